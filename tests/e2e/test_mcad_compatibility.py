"""AppWrappers in the shapes MCAD v1 users submit, each to its expected state, under both CRDs
(issue 17, Build 3 / acceptance 3).

Nothing is fetched: the set below is written here after the shapes of MCAD v1's ``test/yaml``
fixtures and e2e tests (reference mcad-and-appwrapper.md §2.2, §2.7, §4.8) — bare Pods, Jobs
with ``completionstatus``, init containers, ``custompodresources``, several GenericItems of
several kinds, ``priority``/``priorityslope``, ``schedulingSpec.requeuing`` with exponential and
linear growth up to ``maxNumRequeuings``, ``dispatchDuration.limit``, MCAD's quota labels. None
uses a Clearance field. All of them run together on one stack per CRD — Clearance's own
(deploy/crd) and MCAD v1's upstream one, applied unchanged — so the whole set costs two stacks.

Each expectation is judged from the API (the AppWrapper's status, its objects) and the NATS cycle
events; safety (no object of attempt N+1 beside one of attempt N) from kubesim's write history.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    NAMESPACE,
    UNSCHEDULABLE,
    Scenario,
    condition,
    dump_logs,
    failed,
    stack_config,
)

from clearance import events
from clearance.stack import LocalStack

REPO = Path(__file__).resolve().parents[2]
CRDS = {
    "clearance-crd": None,  # the shipped one (deploy/crd)
    "upstream-crd": (REPO / "tests/data/crds/mcad-v1-appwrapper-crd.yaml").read_text(),
}
DEADLINE = 45.0
"""Seconds for the whole set to reach its expected states (the slowest needs ~12 s)."""

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]

Status = Mapping[str, Any]


# ------------------------------------------------------------------------ the AppWrappers


def _container(name: str = "main", cpu: str = "100m") -> dict[str, Any]:
    return {
        "name": name,
        "image": "registry.example/mcad-test:1.0",
        "resources": {"requests": {"cpu": cpu, "memory": "64Mi"}},
    }


def _pod(name: str, *, node_selector: Mapping[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [_container()]}
    if node_selector:
        spec["nodeSelector"] = dict(node_selector)
    spec["terminationGracePeriodSeconds"] = 1
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _job(name: str, *, parallelism: int, init: bool = False) -> dict[str, Any]:
    pod_spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [_container()]}
    if init:
        pod_spec["initContainers"] = [_container("init")]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": {"appwrapper.mcad.ibm.com": name}},
        "spec": {
            "parallelism": parallelism,
            "completions": parallelism,
            "template": {"metadata": {"labels": {"app": name}}, "spec": pod_spec},
        },
    }


def _aw(
    name: str,
    items: list[dict[str, Any]],
    *,
    scheduling: Mapping[str, Any] | None = None,
    priority: int | None = None,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if labels:
        metadata["labels"] = dict(labels)
    spec: dict[str, Any] = {"resources": {"GenericItems": items}}
    if scheduling is not None:
        spec["schedulingSpec"] = dict(scheduling)
    if priority is not None:
        spec["priority"] = priority
        spec["priorityslope"] = 0.0
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": metadata,
        "spec": spec,
    }


def _requeue_until_failed(growth: str) -> dict[str, Any]:
    """Pods that can never schedule, a 1 s wait growing by ``growth``, at most 2 requeues."""
    requeuing: dict[str, Any] = {"timeInSeconds": 1, "growthType": growth, "maxNumRequeuings": 2}
    if growth == "linear":
        requeuing["initialTimeInSeconds"] = 1
    return {"minAvailable": 1, "requeuing": requeuing}


@dataclass(frozen=True)
class Case:
    """One AppWrapper and the state it must reach."""

    body: dict[str, Any]
    expected: str
    """The ``status.state`` it settles in."""
    check: Callable[[Status, CompatRun], str | None] = lambda status, run: None
    """Further conditions on the settled AppWrapper: None when met, else what is missing."""

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


def _pods_running(count: int) -> Callable[[Status, CompatRun], str | None]:
    def check(status: Status, run: CompatRun) -> str | None:
        running = status.get("running")
        return None if running == count else f"running={running}, want {count}"

    return check


def _requeued_twice_growing(growth: str) -> Callable[[Status, CompatRun], str | None]:
    def check(status: Status, run: CompatRun) -> str | None:
        if status.get("numberOfRequeueings") != 2:
            return f"numberOfRequeueings={status.get('numberOfRequeueings')}, want 2"
        want = 4 if growth == "exponential" else 3
        if status.get("requeueingTimeInSeconds") != want:
            return f"requeueingTimeInSeconds={status.get('requeueingTimeInSeconds')}, want {want}"
        return None

    return check


def _failed_because(reason: str) -> Callable[[Status, CompatRun], str | None]:
    def check(status: Status, run: CompatRun) -> str | None:
        found = condition(status, "Failed")
        got = None if found is None else found.get("reason")
        return None if got == reason else f"Failed condition reason {got}, want {reason}"

    return check


def _waiting_for_capacity(status: Status, run: CompatRun) -> str | None:
    queueing = condition(status, "Queueing")
    if queueing is None or queueing.get("reason") != "InsufficientCapacity":
        return f"Queueing condition {queueing}, want reason InsufficientCapacity"
    return None


def _quota_noted(status: Status, run: CompatRun) -> str | None:
    if "quota labels and annotations are ignored" not in run.dispatcher_log:
        return "no log line noting the ignored quota labels"
    return None


CASES = (
    # test/yaml/0008-aw-default style: two bare Pods, MCAD's defaults for everything else.
    Case(
        _aw(
            "aw-bare-pods",
            [{"generictemplate": _pod("bare-pod-a")}, {"generictemplate": _pod("bare-pod-b")}],
        ),
        "Running",
        _pods_running(2),
    ),
    # A Job whose completion is the AppWrapper's: completionstatus Complete.
    Case(
        _aw(
            "aw-job-completion",
            [
                {
                    "replicas": 1,
                    "completionstatus": "Complete",
                    "generictemplate": _job("compl-job", parallelism=2),
                }
            ],
            scheduling={"minAvailable": 2},
        ),
        "Completed",
    ),
    # test/yaml/0006-aw-init-containers shape: Job, init containers, custompodresources.
    Case(
        _aw(
            "aw-init-containers",
            [
                {
                    "replicas": 1,
                    "completionstatus": "Complete",
                    "custompodresources": [
                        {"replicas": 3, "requests": {"cpu": "100m", "memory": "64Mi"}}
                    ],
                    "generictemplate": _job("init-job", parallelism=3, init=True),
                }
            ],
            scheduling={
                "minAvailable": 3,
                "requeuing": {
                    "timeInSeconds": 60,
                    "growthType": "exponential",
                    "maxNumRequeuings": 0,
                },
            },
        ),
        "Completed",
    ),
    # Several GenericItems of several kinds: a Service, a ConfigMap and a Pod.
    Case(
        _aw(
            "aw-several-items",
            [
                {
                    "generictemplate": {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "metadata": {"name": "several-svc"},
                        "spec": {"selector": {"app": "several"}, "ports": [{"port": 80}]},
                    }
                },
                {
                    "generictemplate": {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {"name": "several-cm"},
                        "data": {"k": "v"},
                    }
                },
                {"replicas": 1, "generictemplate": _pod("several-pod")},
            ],
            scheduling={"minAvailable": 1},
        ),
        "Running",
        _pods_running(1),
    ),
    # priority / priorityslope (MCAD v1 fields) with minAvailable.
    Case(
        _aw(
            "aw-priority",
            [{"generictemplate": _pod("prio-pod")}],
            scheduling={"minAvailable": 1},
            priority=10,
        ),
        "Running",
        _pods_running(1),
    ),
    # custompodresources larger than the cluster: queued, never dispatched.
    Case(
        _aw(
            "aw-too-big",
            [
                {
                    "custompodresources": [
                        {"replicas": 1, "requests": {"cpu": "1000", "memory": "64Mi"}}
                    ],
                    "generictemplate": _pod("big-pod"),
                }
            ],
            scheduling={"minAvailable": 1},
        ),
        "Pending",
        _waiting_for_capacity,
    ),
    # MCAD e2e "Deletion After Maximum Requeuing Times": growth exponential (1, 2, 4 s) and linear.
    Case(
        _aw(
            "aw-requeue-exponential",
            [{"generictemplate": _pod("exp-pod", node_selector=UNSCHEDULABLE)}],
            scheduling=_requeue_until_failed("exponential"),
        ),
        "Failed",
        _requeued_twice_growing("exponential"),
    ),
    Case(
        _aw(
            "aw-requeue-linear",
            [{"generictemplate": _pod("lin-pod", node_selector=UNSCHEDULABLE)}],
            scheduling=_requeue_until_failed("linear"),
        ),
        "Failed",
        _requeued_twice_growing("linear"),
    ),
    # MCAD e2e "app wrapper timeout": dispatchDuration.limit passes while the pod runs.
    Case(
        _aw(
            "aw-dispatch-duration",
            [{"generictemplate": _pod("dd-pod")}],
            scheduling={"minAvailable": 1, "dispatchDuration": {"limit": 3}},
        ),
        "Failed",
        _failed_because("DispatchDeadlineExceeded"),
    ),
    # test/yaml/0002-aw-job-quota shape: MCAD's quota labels, ignored with a note.
    Case(
        _aw(
            "aw-quota",
            [{"generictemplate": _pod("quota-pod")}],
            scheduling={"minAvailable": 1},
            labels={"quota_context": "silver", "quota_service": "service-root"},
        ),
        "Running",
        _quota_noted,
    ),
)


# ------------------------------------------------------------------------------- the run


@dataclass
class CompatRun:
    crd: str
    scenario: Scenario
    settled: dict[str, Status] = field(default_factory=dict)
    """Status of each AppWrapper once it met its expectation (absent: never did)."""
    last: dict[str, Status] = field(default_factory=dict)
    missing: dict[str, str] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    safety: list[str] = field(default_factory=list)
    dispatcher_log: str = ""


async def _run_set(scenario: Scenario, crd: str) -> CompatRun:
    run = CompatRun(crd=crd, scenario=scenario)
    started = time.monotonic()
    for case in CASES:
        await scenario.submit(case.body)
    deadline = started + DEADLINE
    while time.monotonic() < deadline and len(run.settled) < len(CASES):
        run.dispatcher_log = scenario.stack.services["dispatcher"].output(tail=2000)
        for case in CASES:
            if case.name in run.settled:
                continue
            status = await scenario.status(case.name)
            run.last[case.name] = status
            problem = (
                f"state {status.get('state')}, want {case.expected}"
                if status.get("state") != case.expected
                else case.check(status, run)
            )
            if problem is None:
                run.settled[case.name] = status
                run.seconds[case.name] = round(time.monotonic() - started, 1)
            else:
                run.missing[case.name] = problem
        await asyncio.sleep(0.25)
    # Settled states must hold: leave the machinery a moment to misbehave, then re-check.
    await asyncio.sleep(1.0)
    for case in CASES:
        if case.name in run.settled:
            status = await scenario.status(case.name)
            if status.get("state") != case.expected:
                run.settled.pop(case.name)
                run.missing[case.name] = f"left {case.expected} for {status.get('state')}"
    run.safety = await scenario.safety_violations_per_appwrapper()
    return run


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=list(CRDS))
async def compat_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[CompatRun]:
    crd = str(request.param)
    stack = LocalStack(
        stack_config(
            tmp_path_factory.mktemp(crd),
            nodes=2,
            crd=CRDS[crd],
            env={"CLEARANCE_PAUSE_TIME": "0s", "CLEARANCE_STUCK_ALERT_TIME": "30s"},
        )
    )
    scenario = None
    try:
        await stack.start()
        scenario = await Scenario.open(stack)
        run = await _run_set(scenario, crd)
        print(f"{crd}: settled after {run.seconds}")
        yield run
    finally:
        if scenario is not None:
            await scenario.close()
        items = [i for i in request.session.items if getattr(i, "module", None) is request.module]
        if any(failed(i) for i in items):
            dump_logs(stack)
        await stack.stop()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
async def test_mcad_v1_appwrapper_reaches_its_expected_state(
    compat_run: CompatRun, case: Case
) -> None:
    assert case.name in compat_run.settled, (
        f"{case.name} under {compat_run.crd}: {compat_run.missing.get(case.name)}; "
        f"status {compat_run.last.get(case.name)}"
    )


async def test_the_set_runs_without_an_old_and_a_new_attempt_side_by_side(
    compat_run: CompatRun,
) -> None:
    assert compat_run.safety == []
    requeued = {e.appwrapper.name for e in compat_run.scenario.log.of(events.CycleRequeued)}
    assert requeued == {"aw-requeue-exponential", "aw-requeue-linear"}, requeued
