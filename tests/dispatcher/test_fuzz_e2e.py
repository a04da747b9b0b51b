"""Issue 13 Build 7 / Acceptance 2: AppWrappers generated from the CRD schema (valid, boundary
and hostile values, names up to 253 characters, unicode, huge lists; see
tests/support/fuzz_appwrappers.py) are submitted in bursts through kubesim to one running stack
(real watcher, tracker, dispatcher). Every AppWrapper the API accepts is Dispatched, or Failed
with a condition, within 5 s of its creation commit, judged from kubesim's write history alone;
no service logs a traceback or dies; a good AppWrapper submitted beside them runs to completion.

The second test proves the judgement can fail: with validation's range checks switched off
(``CLEARANCE_TEST_FAULT=unbounded-spec``) a few hostile AppWrappers are not settled and the same
judgement names them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest
from tests.dispatcher.conftest import AW, Env, job_appwrapper, state_is
from tests.support.fuzz_appwrappers import INT64, Verdict, generate_fresh, judge, settled
from tests.support.polling import eventually

from clearance.kube import KubeError

GENERATED = 420
"""AppWrappers generated (the same every run: drawn in a fresh interpreter); 93 are refused by
the API's schema (400/422), 327 accepted."""
ACCEPTED_AT_LEAST = 300
BURST = 20
"""AppWrappers submitted at once; the next burst goes when this one settled (or timed out)."""
SETTLED_WITHIN = 5.0


async def _submit(env: Env, bodies: list[dict[str, Any]]) -> tuple[list[str], int]:
    """Create ``bodies`` at once; the names the API accepted, and how many it refused."""

    async def one(body: dict[str, Any]) -> str | None:
        body["metadata"]["namespace"] = env.namespace
        try:
            await env.create_aw(body)
        except KubeError as exc:
            assert exc.code in (400, 422), exc  # the API refused it: not ours to judge
            return None
        return str(body["metadata"]["name"])

    names = await asyncio.gather(*(one(b) for b in bodies))
    accepted = [n for n in names if n]
    return accepted, len(names) - len(accepted)


async def _settled_or_timeout(env: Env, names: list[str]) -> None:
    """Wait until every one of ``names`` is settled, at most the bound (the verdict is later)."""

    async def all_settled() -> bool:
        for name in names:
            with contextlib.suppress(KubeError):
                if settled(await env.get_aw(name)) is None:
                    return False
        return True

    with contextlib.suppress(AssertionError):
        await eventually(all_settled, timeout=SETTLED_WITHIN + 1, interval=0.25)


async def _delete(env: Env, names: list[str]) -> None:
    """Judged AppWrappers go (their teardown is part of the run: no traceback either); kept,
    the dispatched ones would requeue every 10 s and load every later burst more."""
    for name in names:
        with contextlib.suppress(KubeError):
            await env.kube.delete(AW, name, namespace=env.namespace)


async def _verdict(env: Env, names: list[str]) -> Verdict:
    history = await env.history(kind="AppWrapper", namespace=env.namespace)
    return judge(history, names, within=SETTLED_WITHIN)


def _keep_appwrapper_bodies(env: Env) -> None:
    """The judgement reads each AppWrapper as committed (kubesim runs in this process)."""
    env.cluster.server.store.audit_objects = frozenset({"AppWrapper"})


def _tracebacks(env: Env) -> list[str]:
    return [p.log_path.name for p in env.processes if "Traceback" in p.output(tail=1_000_000)]


@pytest.mark.timeout(300)  # ~50 s alone on the shared 2-core machine; more under -n 2
async def test_generated_appwrappers_all_end_dispatched_or_failed_and_a_good_one_runs(
    make_env: Any,
) -> None:
    env = await make_env(nodes=2, node_cpu="1000")
    _keep_appwrapper_bodies(env)
    await env.start_dispatcher()
    generated = await asyncio.to_thread(generate_fresh, GENERATED)
    names: list[str] = []
    refused = 0
    for start in range(0, len(generated), BURST):
        accepted, burst_refused = await _submit(env, generated[start : start + BURST])
        refused += burst_refused
        names += accepted
        if start == BURST:  # the good one goes in among the generated bursts
            await env.create_aw(job_appwrapper("good", env.namespace))
            names.append("good")
        await _settled_or_timeout(env, accepted)
        await _delete(env, accepted)
    verdict = await _verdict(env, names)
    print(f"fuzz: {len(generated)} generated, {refused} refused by the API; {verdict.summary()}")
    assert not verdict.late, (
        f"{len(verdict.late)} of {len(names)} not settled within {SETTLED_WITHIN}s: "
        f"{dict(list(verdict.late.items())[:5])}\n{env.logs()}"
    )
    assert len(names) - 1 >= ACCEPTED_AT_LEAST, (len(names), refused)
    await env.wait_aw("good", state_is("Completed"), what="the good AppWrapper completes")
    for process in env.processes:
        assert process.running, env.logs()
    assert not _tracebacks(env), env.logs()


def _hostile(name: str, namespace: str) -> dict[str, Any]:
    """A ConfigMap AppWrapper whose custom pod count is int64 max: out of range, so Failed."""
    item = {
        "generictemplate": {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"{name}-cm"},
        },
        "custompodresources": [{"replicas": INT64[1], "requests": {"cpu": "1"}}],
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulingSpec": {}, "resources": {"GenericItems": [item]}},
    }


@pytest.mark.parametrize("fault", ["", "unbounded-spec"])
async def test_the_fuzz_judgement_names_appwrappers_a_broken_validation_leaves_unsettled(
    make_env: Any, fault: str
) -> None:
    env = await make_env(nodes=1, node_cpu="4")
    _keep_appwrapper_bodies(env)
    await env.start_dispatcher(CLEARANCE_TEST_FAULT=fault)
    names, refused = await _submit(env, [_hostile(f"h{i}", env.namespace) for i in range(3)])
    assert refused == 0
    await _settled_or_timeout(env, names)
    verdict = await _verdict(env, names)
    if fault:
        assert sorted(verdict.late) == names, verdict.summary()
    else:
        assert not verdict.late and verdict.outcomes == {"Failed/OutOfRange": 3}, verdict
