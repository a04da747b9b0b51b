"""Acceptance 6 and 7: kill -9 and restart at each step; two replicas sharing teardowns."""

from __future__ import annotations

import asyncio
import json
from collections import Counter

from tracker_support import NAMESPACE, Stack, eventually, new_traceparent

from clearance.events import TeardownPolicy


async def _warning_reasons(stack: Stack, aw_uid: str) -> list[str]:
    events = json.loads(await stack.kube.request("GET", f"/api/v1/namespaces/{NAMESPACE}/events"))
    return sorted(e["reason"] for e in events["items"] if e["involvedObject"].get("uid") == aw_uid)


async def test_kill_9_after_each_step_then_restart_completes_without_repeating(
    stack: Stack,
) -> None:
    # Steps at 1 s, 6 s and 11 s: each restart (a cold Python start) fits between two.
    env = {"CLEARANCE_FINALIZER_REMOVAL_DELAY": "5s"}
    tracker = await stack.start_tracker(**env)
    pod = await stack.create_pod("crash-w-0", aw="crash", finalizers=("example.com/hold",), grace=1)
    await stack.wait_pod_running("crash-w-0")
    await stack.delete_pod("crash-w-0")
    traceparent = new_traceparent()
    policy = TeardownPolicy(
        stuck_alert_seconds=1,
        force_deletion_seconds=6,
        finalizer_removal="AfterForceDeletion",
        pause_seconds=0,
    )
    started = await stack.start_teardown(
        "crash", inventory=[pod], policy=policy, traceparent=traceparent
    )

    for step in ("stuck_alert", "force_deletion"):

        async def done(step: str = step) -> bool:
            record = await stack.record(started)
            return record is not None and record.step_done(step)  # type: ignore[arg-type]

        await eventually(done, timeout=20)

        def exported(step: str = step) -> bool:  # the step's span left the batch exporter
            return any(
                s.attributes.get("clearance.step") == step
                for s in stack.otlp.named("deletion.escalate")
            )

        await eventually(exported, timeout=10)
        await stack.restart(tracker)  # kill -9, then the same command and environment

    await stack.cleared("crash", timeout=20)
    record = await stack.record(started)
    assert record is not None and record.cleared
    assert all(record.step_done(s) for s in ("stuck_alert", "force_deletion", "finalizer_removal"))
    # each step exactly once: one message per step, one Warning Event per step, one span
    assert len(stack.recorder.of("alert.deletion.stuck", aw="crash")) == 2  # alert + after force
    assert len(stack.recorder.of("cycle.deletion.forced", aw="crash")) == 1
    assert len(stack.recorder.of("cycle.finalizers.removed", aw="crash")) == 1
    assert len(stack.recorder.of("cycle.cleared", aw="crash")) == 1
    assert await _warning_reasons(stack, started.appwrapper.uid) == [
        "DeletionForced",
        "DeletionStuck",
        "FinalizersRemoved",
    ]
    await eventually(lambda: stack.otlp.named("cleared", aw="crash"), timeout=5)
    steps = Counter(s.attributes["clearance.step"] for s in stack.otlp.named("deletion.escalate"))
    assert steps == {"stuck_alert": 1, "force_deletion": 1, "finalizer_removal": 1}
    # every tracker span of the teardown, from three processes, is in the cycle's trace
    trace_id = traceparent.split("-")[1]
    ours = [
        s
        for s in stack.otlp.spans
        if s.name in ("deletion.escalate", "deletion.confirmed", "deletion.await", "cleared")
    ]
    assert len(ours) >= 6
    assert {s.trace_id for s in ours} == {trace_id}
    root = traceparent.split("-")[2]
    assert {s.parent_id for s in ours if s.name in ("deletion.escalate", "cleared")} == {root}


async def test_two_replicas_share_teardowns_and_a_killed_ones_are_taken_over(stack: Stack) -> None:
    env = {"CLEARANCE_CONSUMER_CONCURRENCY": "1"}
    r1, r2 = await asyncio.gather(
        stack.start_tracker("r1", **env), stack.start_tracker("r2", **env)
    )
    replicas = {"r1": r1, "r2": r2}
    policy = TeardownPolicy(stuck_alert_seconds=1, force_deletion_seconds=0, pause_seconds=0)
    started = []
    for i in range(8):
        name = f"pair{i}"
        pod = await stack.create_pod(f"{name}-w-0", aw=name, finalizers=("example.com/hold",))
        await stack.delete_pod(f"{name}-w-0", grace=0)
        started.append(await stack.start_teardown(name, inventory=[pod], policy=policy))

    async def all_alerted() -> bool:
        return all(stack.recorder.of("alert.deletion.stuck", aw=e.appwrapper.name) for e in started)

    await eventually(all_alerted, timeout=15)
    records = {e.appwrapper.name: await stack.record(e) for e in started}
    owners = {name: r.owner for name, r in records.items() if r is not None}
    assert len(owners) == 8 and set(owners.values()) <= {"r1", "r2"}, owners
    # (pull consumers load-balance, so usually both own some; not asserted: it is timing)
    # each teardown handled by exactly one replica: one alert, escalated by its owner only
    await asyncio.sleep(0.5)
    for name, owner in owners.items():
        assert len(stack.recorder.of("alert.deletion.stuck", aw=name)) == 1
        by = {
            s.resource.get("service.instance.id")
            for s in stack.otlp.named("deletion.escalate", aw=name)
        }
        assert by == {owner}, (name, by)

    victim = Counter(owners.values()).most_common(1)[0][0]
    survivor = "r2" if victim == "r1" else "r1"
    replicas[victim].kill()
    for e in started:
        await stack.strip_finalizers(f"{e.appwrapper.name}-w-0")

    for e in started:
        await stack.cleared(e.appwrapper.name, timeout=15)
    for e in started:
        record = await stack.record(e)
        assert record is not None and record.cleared
        if owners[e.appwrapper.name] == victim:
            assert record.owner == survivor
    await eventually(lambda: len(stack.otlp.named("cleared")) >= 8, timeout=5)
    cleared_by = {s.resource.get("service.instance.id") for s in stack.otlp.named("cleared")}
    assert cleared_by == {survivor}
    for e in started:
        assert len(stack.recorder.of("cycle.cleared", aw=e.appwrapper.name)) == 1


async def test_a_nats_restart_delays_but_does_not_lose_a_teardown(stack: Stack) -> None:
    await stack.start_tracker()
    pod = await stack.create_pod("bounce-w-0", aw="bounce", finalizers=("example.com/hold",))
    await stack.delete_pod("bounce-w-0", grace=0)
    slow = TeardownPolicy(stuck_alert_seconds=60, force_deletion_seconds=570, pause_seconds=0)
    started = await stack.start_teardown("bounce", inventory=[pod], policy=slow)
    await eventually(lambda: stack.record(started), timeout=10)

    await asyncio.to_thread(stack.nats.restart)  # same port, same store
    await stack.strip_finalizers("bounce-w-0")  # the pod goes while the tracker reconnects

    async def cleared() -> bool:
        record = await stack.record(started)
        return record is not None and record.cleared

    await eventually(cleared, timeout=20)
    # ... and the tracker still takes new teardowns after the restart
    other = await stack.create_pod("bounce-w-1", aw="bounce2", grace=1)
    await stack.delete_pod("bounce-w-1", grace=0)
    again = await stack.start_teardown("bounce2", inventory=[other], policy=slow)

    async def cleared_again() -> bool:
        record = await stack.record(again)
        return record is not None and record.cleared

    await eventually(cleared_again, timeout=20)
