"""The seed scenario on a 3-node JetStream cluster that loses a node mid-cycle (issue 12,
Acceptance 1 and 3).

Everything is real: three clustered ``nats-server`` processes, ``kubesim serve``, the three
services as subprocesses given every node's URL and R3. Right after the requeue the node that
leads ``CLEARANCE_CYCLE`` (or, separately, the meta leader) is killed with SIGKILL. Judged from
the outside, the cycle must still complete exactly as on one server: one requeue, the stuck
alert readable with ``clearance events --alerts``, every event the services stored present in
the streams without gaps (and every pod write in kubesim's history present as a kube event),
no object of attempt 2 while one of attempt 1 existed, and every stream still R3 with a new
leader. A whole node restarted on its store rejoins, catches up, and the next cycle is normal.
The replica check itself is shown catching the ``r1-streams`` fault (the old behaviour).

Each run takes 30 to 60 s, so these carry the ``ha_e2e`` marker: ``make test`` deselects them
(``-m "not ha_e2e"``), ``make ha`` runs them once and ``make ha-soak`` ten times in a row.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2e_support import Scenario, dump_logs, eventually
from ha_support import (
    CYCLE_TIMEOUT,
    STREAMS,
    SeedRun,
    cluster_of,
    drive_seed,
    ha_stack_config,
    missing_kube_events,
    replica_problems,
    stored,
)

from clearance import events, subjects, testfaults
from clearance.processes import venv_script
from clearance.stack import LocalStack

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.ha_e2e,
]

Launch = Callable[..., Awaitable[Scenario]]


@pytest.fixture
async def launch(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Launch]:
    stacks: list[LocalStack] = []
    opened: list[Scenario] = []

    async def start(**overrides: object) -> Scenario:
        stack = LocalStack(ha_stack_config(tmp_path / f"stack-{len(stacks)}", **overrides))
        stacks.append(stack)
        await stack.start()
        scenario = await Scenario.open(stack)
        opened.append(scenario)
        return scenario

    yield start
    for scenario in opened:
        await scenario.close()
    report = getattr(request.node, "rep_call", None)
    if report is not None and report.failed:
        for stack in stacks:
            dump_logs(stack)
            print(repr(stack.cluster))
        for scenario in opened:
            print(scenario.log.timeline())
    for stack in stacks:
        await stack.stop()


async def events_cli_alerts(scenario: Scenario) -> list[events.Event]:
    env = {**os.environ, "CLEARANCE_NATS_URL": scenario.stack.nats_url}
    result = await asyncio.to_thread(
        subprocess.run,
        [venv_script("clearance"), "events", "--alerts", "--json", "--no-follow", "--since", "1h"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [events.decode(line) for line in result.stdout.splitlines()]


async def check_completed_cycle(scenario: Scenario, run: SeedRun, *, lost: str) -> None:
    log = scenario.log
    # The cycle completed, once.
    assert run.final_pod["metadata"]["labels"]["clearance.dev/attempt"] == "2"
    assert run.final_status.get("numberOfRequeueings") == 1
    assert [e.attempt for e in log.of(events.CycleRequeued)] == [1]
    assert [e.attempt for e in log.of(events.CycleTeardownStarted)] == [1]
    assert [e.attempt for e in log.of(events.CycleRedispatched)] == [2]
    assert run.cleared.cleared_at.timestamp() >= run.released_at
    # The stuck alert, as a user reads it.
    printed = await events_cli_alerts(scenario)
    stuck = [e for e in printed if isinstance(e, events.AlertDeletionStuck)]
    assert [e.step for e in stuck if e.attempt == 1].count("stuck_alert") == 1
    # Nothing missing: what the test followed across the loss is what the streams hold, and
    # the streams have no gap; every pod write in kubesim's history has its kube event.
    for stream, prefix in (
        (subjects.CYCLE_STREAM, "clearance.cycle.v1."),
        (subjects.ALERT_STREAM, "clearance.alert.v1."),
    ):
        held = await stored(scenario.nc, stream)
        assert [seq for seq, _, _ in held] == list(range(1, len(held) + 1)), stream
        followed = [r.subject for r in log.received if r.subject.startswith(prefix)]
        assert followed == [subject for _, _, subject in held], stream
    assert await missing_kube_events(scenario) == []
    # Safety from the API server's write history.
    assert await scenario.safety_violations() == []
    # Still R3, with a leader other than the lost node.
    problems = await eventually(
        lambda: _no_problems(scenario, lost), timeout=CYCLE_TIMEOUT, what="R3 with new leaders"
    )
    assert problems == ["none"]


async def _no_problems(scenario: Scenario, lost: str) -> list[str] | None:
    problems = await replica_problems(scenario.nc, lost=lost)
    return None if problems else ["none"]


async def test_the_cycle_completes_when_the_stream_leader_is_killed_after_the_requeue(
    launch: Launch,
) -> None:
    scenario = await launch()
    cluster = cluster_of(scenario)
    lost: list[str] = []

    async def kill_stream_leader() -> None:
        leader = await cluster.await_stream_leader(subjects.CYCLE_STREAM)
        lost.append(cluster.kill(leader))

    run = await drive_seed(scenario, at_requeue=kill_stream_leader)
    print(f"killed {lost[0]} (leader of {subjects.CYCLE_STREAM}); cycle took {run.took:.1f}s")
    await check_completed_cycle(scenario, run, lost=lost[0])


async def test_the_cycle_completes_when_the_meta_leader_is_killed_after_the_requeue(
    launch: Launch,
) -> None:
    scenario = await launch()
    cluster = cluster_of(scenario)
    lost: list[str] = []

    async def kill_meta_leader() -> None:
        leader = await cluster.await_formed()
        lost.append(cluster.kill(leader))

    run = await drive_seed(scenario, at_requeue=kill_meta_leader)
    print(f"killed {lost[0]} (meta leader); cycle took {run.took:.1f}s")
    await check_completed_cycle(scenario, run, lost=lost[0])


async def test_a_restarted_node_rejoins_catches_up_and_the_next_cycle_is_normal(
    launch: Launch,
) -> None:
    scenario = await launch(nodes=3)
    cluster = cluster_of(scenario)
    lost: list[str] = []

    async def restart_a_node() -> None:
        leader = await cluster.await_stream_leader(subjects.CYCLE_STREAM)
        lost.append(cluster.kill(leader))

    first = await drive_seed(scenario, at_requeue=restart_a_node, name="first-job")
    await cluster.astart_node(lost[0])  # the same store: it must rejoin and catch up
    await cluster.await_healthy(lost[0], timeout=CYCLE_TIMEOUT)
    for stream in STREAMS:
        await cluster.await_caught_up(lost[0], stream, timeout=CYCLE_TIMEOUT)
    del first

    async def nothing() -> None:
        return None

    before = len(scenario.log.received)
    second = await drive_seed(scenario, at_requeue=nothing, name="second-job")
    later = [r.event for r in scenario.log.received[before:]]
    assert [e.attempt for e in later if isinstance(e, events.CycleRequeued)] == [1]
    assert second.final_status.get("numberOfRequeueings") == 1
    assert await scenario.safety_violations() == []
    assert await replica_problems(scenario.nc) == []
    for stream in STREAMS:
        placement = cluster.placement(stream)
        assert placement is not None and lost[0] in placement.peers, stream


async def test_the_replica_check_catches_streams_provisioned_r1(launch: Launch) -> None:
    scenario = await launch(env={testfaults.ENV: "r1-streams"})
    problems = await replica_problems(scenario.nc)
    assert problems, "R1 streams passed the replica check"
    assert json.dumps(problems)  # printed in the note
