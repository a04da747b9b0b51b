"""Acceptance 1 (functional part), 4 and 5: how objects are confirmed gone, against kubesim."""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import NamedTuple

from tracker_support import (
    Stack,
    StandInWatcher,
    create_job,
    eventually,
    new_traceparent,
    pods_of,
)

from clearance import attributes
from clearance.events import CycleCleared, CycleDeletionConfirmed, TeardownPolicy
from clearance.kube import JOBS

from tracker_support import NAMESPACE  # isort: skip

SLOW = TeardownPolicy(stuck_alert_seconds=60, force_deletion_seconds=570, pause_seconds=0)


class Confirmed(NamedTuple):
    how: str
    occurred_at: datetime


def _confirmations(stack: Stack, aw: str) -> dict[str, Confirmed]:
    """Each confirmed UID → how and when (from the event that lists it; listed only once)."""
    out: dict[str, Confirmed] = {}
    for r in stack.recorder.of("cycle.deletion.confirmed", aw=aw):
        assert isinstance(r.event, CycleDeletionConfirmed)
        for c in r.event.confirmed:
            assert c.object.uid not in out, f"{c.object.uid} confirmed twice"
            out[c.object.uid] = Confirmed(c.how, r.event.occurred_at)
    return out


async def test_job_with_8_pods_is_cleared_after_every_uid_is_confirmed(stack: Stack) -> None:
    await stack.start_tracker()
    watcher = await StandInWatcher(stack.kube, stack.js).start()
    try:
        job = await create_job(stack, "train", aw="train", pods=8)
        await eventually(lambda: _running(stack, "train", 8), timeout=10)
        pods = await pods_of(stack, "train")
        traceparent = new_traceparent()
        await stack.kube.delete(JOBS, "train", namespace=NAMESPACE, propagation_policy="Background")
        await stack.start_teardown("train", inventory=[job], policy=SLOW, traceparent=traceparent)

        cleared = await stack.cleared("train", timeout=15)
        assert not await pods_of(stack, "train")
        event = cleared.event
        assert isinstance(event, CycleCleared)
        uids = {p["metadata"]["uid"] for p in pods} | {job["metadata"]["uid"]}
        assert {o.uid for o in event.confirmed} == uids
        confirmations = _confirmations(stack, "train")
        assert set(confirmations) == uids
        assert all(c.occurred_at <= event.cleared_at for c in confirmations.values())
        assert not stack.recorder.of("alert.deletion.stuck", aw="train")

        # One trace: deletion.await and cleared under the cycle root, one deletion.confirmed
        # per object under deletion.await, cleared linking to every confirmation.
        trace_id = traceparent.split("-")[1]
        root_span = traceparent.split("-")[2]
        cleared_span = (await eventually(lambda: stack.otlp.named("cleared", aw="train")))[0]
        await_span = (await eventually(lambda: stack.otlp.named("deletion.await", aw="train")))[0]
        confirmed = await eventually(
            lambda: (s := stack.otlp.named("deletion.confirmed", aw="train")) and len(s) == 9 and s
        )
        assert {s.trace_id for s in (cleared_span, await_span, *confirmed)} == {trace_id}
        assert cleared_span.parent_id == root_span and await_span.parent_id == root_span
        assert {s.parent_id for s in confirmed} == {await_span.span_id}
        assert set(cleared_span.links) == {s.span_id for s in confirmed}

        # Attribute names: semantic conventions where they exist, clearance.* for ours.
        by_uid = {s.attributes[attributes.OBJECT_UID]: s for s in confirmed}
        assert set(by_uid) == uids
        for p in pods:
            span = by_uid[p["metadata"]["uid"]].attributes
            assert span[attributes.K8S_POD_NAME] == p["metadata"]["name"]
            assert span[attributes.K8S_POD_UID] == p["metadata"]["uid"]
            assert span[attributes.K8S_NAMESPACE_NAME] == NAMESPACE
        job_span = by_uid[job["metadata"]["uid"]].attributes
        assert job_span[attributes.K8S_JOB_NAME] == "train"
        assert attributes.K8S_POD_NAME not in job_span
        for span in (cleared_span, await_span, *confirmed):
            assert span.attributes[attributes.APPWRAPPER_NAME] == "train"
            assert span.attributes[attributes.ATTEMPT] == 1
            assert all(k.startswith(("clearance.", "k8s.")) for k in span.attributes)
    finally:
        await watcher.stop()


async def _running(stack: Stack, aw: str, count: int) -> bool:
    pods = await pods_of(stack, aw)
    return len([p for p in pods if (p.get("status") or {}).get("phase") == "Running"]) >= count


async def test_deletions_while_the_watcher_was_down_are_confirmed_by_verification(
    stack: Stack,
) -> None:
    await stack.start_tracker()
    pods = [await stack.create_pod(f"quiet-w-{i}", aw="quiet", grace=1) for i in range(3)]
    for pod in pods:
        await stack.delete_pod(pod["metadata"]["name"])
    await stack.start_teardown("quiet", inventory=pods, policy=SLOW)
    # No watcher runs: no kube event will ever arrive. Verification (GET/LIST) must do it.
    cleared = await stack.cleared("quiet", timeout=15)
    assert isinstance(cleared.event, CycleCleared)
    confirmations = _confirmations(stack, "quiet")
    assert {c.how for c in confirmations.values()} == {"get_404"}
    for pod in pods:
        assert await stack.pod(pod["metadata"]["name"]) is None


async def test_same_name_new_uid_member_keeps_the_teardown_open_until_it_is_gone(
    stack: Stack,
) -> None:
    await stack.start_tracker()
    watcher = await StandInWatcher(stack.kube, stack.js).start()
    try:
        old = await stack.create_pod("same-w-0", aw="same", grace=1)
        holder = await stack.create_pod("same-w-1", aw="same", finalizers=("example.com/hold",))
        await stack.start_teardown("same", inventory=[old, holder], policy=SLOW)
        await stack.delete_pod("same-w-0", grace=0)
        await eventually(lambda: _confirmations(stack, "same").get(old["metadata"]["uid"]))
        # A controller recreates the name during the teardown (still attempt 1).
        new = await stack.create_pod("same-w-0", aw="same", grace=1)
        assert new["metadata"]["uid"] != old["metadata"]["uid"]
        await stack.delete_pod("same-w-1", grace=0)
        await stack.strip_finalizers("same-w-1")
        await asyncio.sleep(2.5)  # > 2 verification periods
        assert not stack.recorder.of("cycle.cleared", aw="same"), "cleared while w-0 (new) exists"
        await stack.delete_pod("same-w-0", grace=0)
        cleared = await stack.cleared("same", timeout=10)
        event = cleared.event
        assert isinstance(event, CycleCleared)
        assert {o.uid for o in event.confirmed} == {
            old["metadata"]["uid"],
            new["metadata"]["uid"],
            holder["metadata"]["uid"],
        }
    finally:
        await watcher.stop()


async def test_same_name_of_a_later_attempt_proves_the_old_uid_gone(stack: Stack) -> None:
    await stack.start_tracker()
    old = await stack.create_pod("reuse-w-0", aw="reuse", grace=1)
    await stack.delete_pod("reuse-w-0", grace=0)
    # The name now belongs to an object outside the teardown (attempt 2): not a member, and
    # the GET of the old name answering another UID proves the old one gone (no watcher).
    new = await stack.create_pod("reuse-w-0", aw="reuse", attempt=2)
    await stack.start_teardown("reuse", inventory=[old], policy=SLOW)
    cleared = await stack.cleared("reuse", timeout=15)
    event = cleared.event
    assert isinstance(event, CycleCleared)
    assert {o.uid for o in event.confirmed} == {old["metadata"]["uid"]}
    confirmation = _confirmations(stack, "reuse")[old["metadata"]["uid"]]
    assert confirmation.how == "uid_changed"
    assert (await stack.pod("reuse-w-0") or {})["metadata"]["uid"] == new["metadata"]["uid"]


async def test_an_item_of_a_kind_the_api_does_not_serve_does_not_hang_the_teardown(
    stack: Stack,
) -> None:
    await stack.start_tracker()
    ghost = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ghost", "namespace": NAMESPACE, "uid": "ghost-uid-1"},
    }
    pod = await stack.create_pod("ghost-w-0", aw="ghost", grace=1)
    await stack.delete_pod("ghost-w-0", grace=0)
    await stack.start_teardown("ghost", inventory=[ghost, pod], policy=SLOW)
    cleared = await stack.cleared("ghost", timeout=15)
    assert isinstance(cleared.event, CycleCleared)
    assert {o.uid for o in cleared.event.confirmed} == {"ghost-uid-1", pod["metadata"]["uid"]}


async def test_a_pod_listed_twice_in_the_inventory_is_tracked_and_cleared_once(
    stack: Stack,
) -> None:
    # A bare Pod wrapped by an AppWrapper is both a generic item and one of its pods; the
    # dispatcher has listed it twice (issue 17: "deleting pod seed-job-0, pod seed-job-0").
    await stack.start_tracker()
    pod = await stack.create_pod("twice-0", aw="twice", grace=1)
    await stack.delete_pod("twice-0", grace=0)
    event = await stack.start_teardown("twice", inventory=[pod, pod], policy=SLOW)
    assert len(event.inventory) == 2
    cleared = await stack.cleared("twice", timeout=15)
    assert isinstance(cleared.event, CycleCleared)
    assert [o.uid for o in cleared.event.confirmed] == [pod["metadata"]["uid"]]
    record = await stack.record(event)
    assert record is not None and list(record.objects) == [pod["metadata"]["uid"]]
    assert len(stack.recorder.of("cycle.deletion.confirmed", aw="twice")) == 1
