"""``clearance explain`` against the running stack at three moments of the seed scenario.

One stack, one AppWrapper (one pod, minAvailable 1, a finalizer nobody removes, a 30 s grace
period), its node lost. The real CLI (a subprocess with the user's kubeconfig and NATS URL)
is run, as text and as ``--json``, at three moments:

1. **stuck in grace**: after the stuck alert, before the force deadline: the pod is blocking
   with its node lost, its finalizer named and its grace period still running; the next step
   is the force deletion, at the deadline ``teardown.started`` announced;
2. **force-deleted, finalizer held**: grace 0 did not get past the finalizer; the ladder is
   done (finalizerRemoval Never); the command it prints to drop the finalizer is then run as
   printed (kubectl) and is what unblocks the job;
3. **cleared and redispatched**: nothing blocks, the timeline ends with cleared and the
   redispatch of attempt 2.

Each screen is checked line by line against what the streams and the API server say (times,
uids, nodes). The errors a user meets (unknown AppWrapper, no NATS, no permission, a bad
argument) are checked on the same stack: one line on stderr, a non-zero exit, no traceback.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    HOLD,
    NAMESPACE,
    Scenario,
    appwrapper,
    dump_logs,
    eventually,
    failed,
    item,
    pod_state,
    pod_template,
    requeuing,
    stack_config,
)

from clearance import events
from clearance.explanation import CAUSAL_ORDER
from clearance.processes import venv_script
from clearance.stack import LocalStack

REPO = Path(__file__).resolve().parents[2]
AW = "explain-job"
POD = "explain-job-0"
STUCK_ALERT, FORCE, PAUSE, GRACE = 2, 7, 1, 30

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@dataclass(frozen=True)
class Run:
    """One ``clearance explain`` invocation."""

    code: int
    stdout: str
    stderr: str
    started: float
    ended: float

    @property
    def lines(self) -> list[str]:
        return self.stdout.splitlines()


@dataclass
class Snapshot:
    text: Run
    json: Run
    pod: dict[str, Any] | None
    status: dict[str, Any]

    @property
    def document(self) -> dict[str, Any]:
        document: dict[str, Any] = json.loads(self.json.stdout)
        return document


@dataclass
class ExplainRun:
    scenario: Scenario
    node: str
    first_uid: str
    teardown: events.CycleTeardownStarted
    in_grace: Snapshot
    held: Snapshot
    stale: Run
    """At the second moment, with CLEARANCE_TEST_FAULT=explain-stale-diagnosis."""
    unblock: list[subprocess.CompletedProcess[str]]
    unblocked_at: float
    cleared: events.CycleCleared
    redispatched: events.CycleRedispatched
    final_pod: dict[str, Any]
    after: Snapshot
    errors: dict[str, Run]


def _env(scenario: Scenario, **overrides: str) -> dict[str, str]:
    env = {
        **os.environ,
        "KUBECONFIG": str(scenario.stack.kubeconfig),
        "CLEARANCE_NATS_URL": scenario.stack.nats_url,
    }
    env.update(overrides)
    return env


async def explain(scenario: Scenario, *args: str, env: dict[str, str] | None = None) -> Run:
    started = time.time()
    result = await asyncio.to_thread(
        subprocess.run,
        [venv_script("clearance"), "explain", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env or _env(scenario),
        check=False,
    )
    return Run(result.returncode, result.stdout, result.stderr, started, time.time())


async def snapshot(scenario: Scenario) -> Snapshot:
    target = f"{NAMESPACE}/{AW}"
    text, as_json = await asyncio.gather(
        explain(scenario, target), explain(scenario, target, "--json")
    )
    return Snapshot(text, as_json, await scenario.pod(POD), await scenario.status(AW))


async def user_errors(scenario: Scenario) -> dict[str, Run]:
    """The failures a user meets, each on this stack."""
    closed_port = "nats://127.0.0.1:9"  # discard: nothing listens on loopback here
    scenario.stack.kubesim_ctl(
        "fail", "--path", "^/apis/[^/]+/[^/]+/namespaces/locked/", "--code", "403"
    )
    runs = await asyncio.gather(
        explain(scenario, f"{NAMESPACE}/no-such-job"),
        explain(scenario, f"{NAMESPACE}/{AW}", "--timeout", "1s",
                env=_env(scenario, CLEARANCE_NATS_URL=closed_port)),
        explain(scenario, "locked/some-job"),
        explain(scenario, "no-slash"),
    )  # fmt: skip
    return dict(zip(("unknown", "no_nats", "forbidden", "usage"), runs, strict=True))


async def _pod_if(scenario: Scenario, state: str, *, not_uid: str = "") -> dict[str, Any] | None:
    pod = await scenario.pod(POD)
    if pod_state(pod) == state and pod is not None and pod["metadata"]["uid"] != not_uid:
        return pod
    return None


async def drive(scenario: Scenario) -> ExplainRun:
    log = scenario.log
    pod = pod_template(POD, grace=GRACE, finalizers=[HOLD], cpu="1")
    await scenario.submit(
        appwrapper(
            AW,
            [item(pod, pods=1, cpu="1")],
            min_available=1,
            requeue=requeuing(wait=2, pause=PAUSE, stuck_alert=STUCK_ALERT, force=FORCE),
        )
    )
    running, errors = await asyncio.gather(
        eventually(lambda: _pod_if(scenario, "Running"), timeout=30, what="the first pod to run"),
        user_errors(scenario),
    )
    node = running["spec"]["nodeName"]
    scenario.lose_node(node)
    teardown = await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=30)

    # Each snapshot waits until every event of its step is on the streams (quiet until the next).
    await log.wait_for(events.AlertDeletionStuck, attempt=1, step="stuck_alert", timeout=30)
    await log.wait_for(events.AlertNodeLost, attempt=1, timeout=30)
    in_grace = await snapshot(scenario)

    await log.wait_for(events.AlertDeletionStuck, attempt=1, step="force_deletion", timeout=30)
    await log.wait_for(events.CycleDeletionForced, attempt=1, timeout=30)
    await log.wait_for(events.AlertDeletionForced, attempt=1, timeout=30)
    held, stale = await asyncio.gather(
        snapshot(scenario),
        explain(
            scenario,
            f"{NAMESPACE}/{AW}",
            env=_env(scenario, CLEARANCE_TEST_FAULT="explain-stale-diagnosis"),
        ),
    )

    unblocked_at = time.time()
    unblock = [
        await asyncio.to_thread(
            subprocess.run,
            shlex.split(line.strip()),
            capture_output=True,
            text=True,
            timeout=30,
            env=_env(scenario),
            check=False,
        )
        for line in held.text.lines
        if line.startswith("  kubectl ")
    ]
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=30)
    redispatched = await log.wait_for(events.CycleRedispatched, attempt=2, timeout=30)
    final_pod = await eventually(
        lambda: _pod_if(scenario, "Running", not_uid=running["metadata"]["uid"]),
        timeout=30,
        what="the new pod to run",
    )
    after = await snapshot(scenario)
    return ExplainRun(
        scenario=scenario,
        node=node,
        first_uid=running["metadata"]["uid"],
        teardown=teardown,
        in_grace=in_grace,
        held=held,
        stale=stale,
        unblock=unblock,
        unblocked_at=unblocked_at,
        cleared=cleared,
        redispatched=redispatched,
        final_pod=final_pod,
        after=after,
        errors=errors,
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[ExplainRun]:
    stack = LocalStack(stack_config(tmp_path_factory.mktemp("explain"), nodes=2))
    scenario: Scenario | None = None
    broken = False
    try:
        await stack.start()
        scenario = await Scenario.open(stack)
        try:
            yield await drive(scenario)
        except BaseException:
            broken = True
            raise
    finally:
        if scenario is not None:
            await scenario.close()
        mine = [i for i in request.session.items if getattr(i, "module", None) is request.module]
        if broken or any(failed(i) for i in mine):
            dump_logs(stack)
            if scenario is not None:
                print(scenario.log.timeline())
        await stack.stop()


# ------------------------------------------------------------------------------- checks


def at(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%H:%M:%S}Z"


def check_lines(lines: Sequence[str], patterns: Sequence[str]) -> list[re.Match[str]]:
    """Every line matches its pattern in full, and there are as many lines as patterns."""
    matches = []
    for number, (line, pattern) in enumerate(zip(lines, patterns, strict=False), start=1):
        match = re.fullmatch(pattern, line)
        assert match, f"line {number}:\n  got      {line!r}\n  expected {pattern!r}"
        matches.append(match)
    assert len(lines) == len(patterns), (
        f"{len(lines)} lines, expected {len(patterns)}:\n" + "\n".join(lines)
    )
    return matches


def true_conditions(status: dict[str, Any]) -> str:
    return ", ".join(c["type"] for c in status.get("conditions", []) if c.get("status") == "True")


def header(run: ExplainRun, snap: Snapshot) -> list[str]:
    """Expected first lines: name and uid, state (from the API), conditions, the cycle."""
    uid = run.teardown.appwrapper.uid
    status = snap.status
    clearance = status["clearance"]
    trace = clearance["cycleTraceparent"].split("-")[1]
    phase, attempt = clearance["phase"], clearance["attempt"]
    if clearance.get("tearingDown") is not None:
        cleared = r"\(\d+s ago\), not cleared yet"
    else:
        took = (run.cleared.cleared_at - run.teardown.occurred_at).total_seconds()
        cleared = re.escape(f", cleared at {at(run.cleared.cleared_at)} after {took:.1f}s")
    return [
        rf"AppWrapper {NAMESPACE}/{AW}  uid {uid}  \(read \d{{4}}-\d\d-\d\d \d\d:\d\d:\d\dZ\)",
        re.escape(
            f"state       {status['state']} · phase {phase} · attempt {attempt} · "
            f"requeues {status['numberOfRequeueings']} (no limit)"
        ),
        re.escape(f"conditions  {true_conditions(status)}"),
        re.escape(f"cycle       attempt 1 torn down from {at(run.teardown.occurred_at)}")
        + (" " if clearance.get("tearingDown") is not None else "")
        + cleared
        + re.escape(f", reason {clearance['reason']}, trace {trace}"),
        re.escape("timeline    (UTC, seconds since teardown.started)"),
    ]


def timeline(run: ExplainRun, upto: float) -> list[str]:
    """The cycle's events the streams hold (arrived before ``upto``), as the screen lists them."""
    log = run.scenario.log
    start = run.teardown.occurred_at
    expected: list[tuple[tuple[datetime, int], str, str]] = []

    def add(event: events.CycleEvent | events.AlertEvent, name: str, detail: str) -> None:
        # Equal times (one stamp for several facts): cause before effect.
        if log.arrival(event) < upto:
            expected.append(((event.occurred_at, CAUSAL_ORDER[event.event_type]), name, detail))

    [requeued] = log.of(events.CycleRequeued, attempt=1)
    add(requeued, "requeued", f"requeue #1: {requeued.reason}")
    policy = f"stuck alert after {STUCK_ALERT}s, force deletion after {FORCE}s"
    add(run.teardown, "teardown.started", f"deleting pod {POD}; {policy}, finalizer removal Never")
    for alert in log.of(events.AlertDeletionStuck, attempt=1):
        step = alert.step.replace("_", " ")
        add(alert, "ALERT deletion.stuck", f"[{step}] 1 object(s) left: pod {POD}")
    for lost in log.of(events.AlertNodeLost, attempt=1):
        add(lost, "ALERT node.lost", f"node {run.node} is lost, holds pod {POD}")
    for forced in log.of(events.CycleDeletionForced, attempt=1):
        add(forced, "deletion.forced", f"grace-0 delete of pod {POD}")
    for paged in log.of(events.AlertDeletionForced, attempt=1):
        add(paged, "ALERT deletion.forced", f"force-deleted pod {POD}")
    for gone in log.of(events.CycleDeletionConfirmed, attempt=1):
        how = gone.confirmed[0].how.replace("_", " ")
        add(gone, "deletion.confirmed", f"pod {POD} gone ({how})")
    for cleared in log.of(events.CycleCleared, attempt=1):
        add(cleared, "cleared", "1 object(s) confirmed gone, a quorum LIST agrees")
    for again in log.of(events.CycleRedispatched, attempt=2):
        add(again, "redispatched", f"attempt 2 dispatched after a {again.pause_seconds:.0f}s pause")
    expected.sort(key=lambda e: e[0])
    return [
        re.escape(
            f"  {at(when)} {f'{(when - start).total_seconds():+.1f}s':>8}  {name:<22} {detail}"
        )
        for (when, _), name, detail in expected
    ]


def blocking_pod(run: ExplainRun, *, in_grace: bool) -> list[str]:
    lines = [
        re.escape("blocking    1 object(s)"),
        re.escape(f"  pod {POD} (attempt 1, uid {run.first_uid}) on node {run.node}:"),
        re.escape(f"    - node {run.node} not ready (Unknown)"),
        re.escape(f"    - node {run.node} unreachable"),
        re.escape(f"    - held by finalizer {HOLD}"),
    ]
    if in_grace:
        lines.append(r"    - in its grace period \((?P<left>\d+)s left\)")
    return lines


def patch_command(run: ExplainRun) -> str:
    ops = (
        f'[{{"op":"test","path":"/metadata/uid","value":"{run.first_uid}"}},'
        f'{{"op":"test","path":"/metadata/finalizers/0","value":"{HOLD}"}},'
        '{"op":"remove","path":"/metadata/finalizers/0"}]'
    )
    return f"  kubectl -n {NAMESPACE} patch pod {POD} --type=json -p '{ops}'"


def moment_in_grace(run: ExplainRun) -> list[str]:
    force_at = run.teardown.occurred_at + timedelta(seconds=FORCE)
    return [
        *header(run, run.in_grace),
        *timeline(run, upto=run.in_grace.text.started),
        *blocking_pod(run, in_grace=True),
        re.escape(f"next        force deletion at {at(force_at)} (")
        + r"in (?P<due>\d+)s"
        + re.escape("): grace-0 delete of what is left, pods first"),
        re.escape("unblock     once you know the holders cannot finish, run:"),
        re.escape(f"  kubectl -n {NAMESPACE} delete pod {POD} --grace-period=0 --force"),
        re.escape(patch_command(run)),
    ]


def moment_held(run: ExplainRun, snap: Snapshot) -> list[str]:
    return [
        *header(run, snap),
        *timeline(run, upto=snap.text.started),
        *blocking_pod(run, in_grace=False),
        re.escape(
            "next        none: the ladder is done (finalizerRemoval is Never); the teardown "
            "waits until the objects go, and the job resumes by itself then"
        ),
        re.escape("unblock     once you know the holders cannot finish, run:"),
        re.escape(patch_command(run)),
    ]


def moment_after(run: ExplainRun) -> list[str]:
    return [
        *header(run, run.after),
        *timeline(run, upto=run.after.text.started),
        re.escape("blocking    nothing"),
        re.escape(
            f"next        none: attempt 2 was dispatched at {at(run.redispatched.occurred_at)}"
        ),
    ]


# -------------------------------------------------------------------------------- tests


async def test_explain_while_stuck_in_grace_shows_node_finalizer_grace_and_force_deadline(
    run: ExplainRun,
) -> None:
    snap = run.in_grace
    assert snap.text.code == 0, snap.text.stderr
    forced = run.scenario.log.of(events.CycleDeletionForced, attempt=1)
    assert forced and run.scenario.log.arrival(forced[0]) > snap.text.ended, (
        "the first snapshot must be taken before the force deadline"
    )
    matches = check_lines(snap.text.lines, moment_in_grace(run))
    values = {k: int(v) for m in matches for k, v in m.groupdict().items()}
    # The grace period left is computed at reading time: between the run's start and end.
    assert snap.pod is not None
    deletion = datetime.fromisoformat(snap.pod["metadata"]["deletionTimestamp"]).timestamp()
    assert deletion - snap.text.ended - 0.5 <= values["left"] <= deletion - snap.text.started + 0.5
    [blocker] = snap.document["blocking"]
    [grace] = [c for c in blocker["causes"] if c["cause"] == "in_grace_period"]
    read_at = datetime.fromisoformat(snap.document["now"]).timestamp()
    assert grace["seconds_left"] == pytest.approx(deletion - read_at, abs=1e-3)
    assert 0 <= values["due"] <= FORCE - STUCK_ALERT


async def test_explain_after_force_deletion_names_the_held_finalizer_and_its_patch(
    run: ExplainRun,
) -> None:
    snap = run.held
    assert snap.text.code == 0, snap.text.stderr
    assert snap.pod is not None and snap.pod["metadata"]["finalizers"] == [HOLD]
    check_lines(snap.text.lines, moment_held(run, snap))


async def test_the_printed_patch_command_is_what_unblocks_the_job(run: ExplainRun) -> None:
    assert [u.returncode for u in run.unblock] == [0], [(u.stdout, u.stderr) for u in run.unblock]
    assert run.cleared.cleared_at.timestamp() >= run.unblocked_at
    assert run.redispatched.cleared_at == run.cleared.cleared_at
    assert run.final_pod["metadata"]["labels"]["clearance.dev/attempt"] == "2"


async def test_explain_after_cleared_and_redispatch_shows_the_whole_cycle_and_nothing_blocking(
    run: ExplainRun,
) -> None:
    snap = run.after
    assert snap.text.code == 0, snap.text.stderr
    check_lines(snap.text.lines, moment_after(run))


async def test_explain_json_carries_the_same_facts_as_the_screen(run: ExplainRun) -> None:
    expected_next = {
        "in_grace": "force deletion",
        "held": "none",
        "after": "none",
    }
    for moment, snap in (("in_grace", run.in_grace), ("held", run.held), ("after", run.after)):
        assert snap.json.code == 0, snap.json.stderr
        document = snap.document
        assert document["uid"] == run.teardown.appwrapper.uid
        assert document["cycle_attempt"] == 1
        assert document["next"]["what"] == expected_next[moment]
        # The event column of the timeline: after the time (11) and the offset (1 + 8 + 2).
        screen = [line[22:44].strip() for line in snap.text.lines if re.match(r"  \d\d:", line)]
        assert [e["event"] for e in document["timeline"]] == screen, moment
    causes = [[c["cause"] for c in b["causes"]] for b in run.in_grace.document["blocking"]]
    assert causes == [["node_not_ready", "node_unreachable", "finalizers", "in_grace_period"]]
    [held] = run.held.document["blocking"]
    assert held["object"]["uid"] == run.first_uid
    assert held["commands"] == [patch_command(run).strip()]
    assert run.after.document["blocking"] == []


async def test_the_line_check_catches_a_stale_diagnosis(run: ExplainRun) -> None:
    """CLEARANCE_TEST_FAULT=explain-stale-diagnosis: the tracker's first diagnosis (the pod
    still in its grace period) instead of the fresh reads: the second screen's check fails."""
    assert run.stale.code == 0, run.stale.stderr
    assert any("in its grace period" in line for line in run.stale.lines)
    with pytest.raises(AssertionError, match="line"):
        check_lines(run.stale.lines, moment_held(run, run.held))


def shape(lines: Sequence[str]) -> list[str]:
    """What each line of a screen is: its label, a timeline entry, an object, a cause, a command."""
    kinds = []
    for line in lines:
        if re.match(r"  \d\d:\d\d:\d\dZ ", line):
            kinds.append("entry")
        elif line.startswith("    - "):
            kinds.append("cause")
        elif line.startswith("  kubectl "):
            kinds.append("command")
        elif line.startswith("  "):
            kinds.append("object")
        else:
            kinds.append(line.split()[0])
    return kinds


async def test_the_readme_capture_has_the_shape_of_the_screen_stuck_in_grace(
    run: ExplainRun,
) -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Operating it", 1)[1].split("\n## ", 1)[0]
    capture = section.split("$ clearance explain default/seed-job\n", 1)[1].split("```", 1)[0]
    assert shape(capture.splitlines()) == shape(run.in_grace.text.lines)


@pytest.mark.parametrize(
    ("case", "code", "says"),
    [
        ("unknown", 1, f"AppWrapper {NAMESPACE}/no-such-job not found"),
        ("no_nats", 1, "could not connect to NATS at nats://127.0.0.1:9 within 1.0s"),
        ("forbidden", 1, "no permission to get appwrappers.workload.codeflare.dev locked/"),
        ("usage", 2, "'no-slash' is not NAMESPACE/NAME"),
    ],
)
async def test_explain_fails_with_one_clear_line(
    run: ExplainRun, case: str, code: int, says: str
) -> None:
    result = run.errors[case]
    assert result.code == code, (result.stdout, result.stderr)
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("clearance explain: ") and says in line, line
    assert "Traceback" not in result.stderr
