"""Kube access, the informer and leader election against kubesim over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import pytest

from clearance.informing import Change, Informer
from clearance.kube import LEASES, PODS, Kube, KubeError
from clearance.leadership import LeaderElector
from clearance.tasks import cancel_and_wait

Admin = Callable[..., Awaitable[None]]
"""The ``admin`` fixture (conftest.py): kubesim's fault injection."""


def pod(name: str, **labels: str) -> dict[str, object]:
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }


class Recorder:
    """A sink that remembers every change and lets a test wait for a condition."""

    def __init__(self) -> None:
        self.changes: list[Change] = []
        self._event = asyncio.Event()

    async def __call__(self, change: Change) -> None:
        self.changes.append(change)
        self._event.set()

    async def wait_for(self, predicate: object, timeout: float = 5.0) -> None:
        assert callable(predicate)
        async with asyncio.timeout(timeout):
            while not predicate():
                self._event.clear()
                await self._event.wait()

    def seen(self, action: str, name: str, *, inferred: bool = False) -> bool:
        return any(
            c.action == action and c.meta.name == name and c.inferred == inferred
            for c in self.changes
        )


async def test_error_status_of_the_server_becomes_a_typed_kube_error(kube: Kube) -> None:
    with pytest.raises(KubeError) as caught:
        await kube.get(PODS, "missing", namespace="default")
    assert caught.value.not_found
    assert caught.value.reason == "NotFound"
    assert 'pods "missing" not found' in caught.value.message


async def test_paginated_list_returns_every_item(kube: Kube) -> None:
    for i in range(7):
        await kube.create(PODS, pod(f"p{i}"), namespace="default")
    result = await kube.list(PODS, namespace="default", page_size=3)
    assert len(result.items) == 7
    assert int(result.resource_version) > 0


async def test_informer_reports_changes_in_resource_version_order(kube: Kube) -> None:
    sink = Recorder()
    informer = Informer(kube, PODS, namespace="default", watch_timeout=5)
    task = asyncio.create_task(informer.run(sink))
    try:
        await asyncio.wait_for(informer.synced.wait(), 5)
        await kube.create(PODS, pod("a"), namespace="default")
        await kube.patch(PODS, "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
        await kube.delete(PODS, "a", namespace="default")
        await sink.wait_for(lambda: sink.seen("DELETED", "a"))
    finally:
        await cancel_and_wait(task)
    actions = [c.action for c in sink.changes]
    # The label patch is one MODIFIED; the delete of an unscheduled pod first writes its
    # deletionTimestamp (a MODIFIED, as the real API server does), then removes it.
    assert actions[0] == "ADDED"
    assert actions[-1] == "DELETED"
    assert set(actions[1:-1]) == {"MODIFIED"}
    versions = [int(c.meta.resourceVersion) for c in sink.changes]
    assert versions == sorted(versions)


async def test_deletion_hidden_by_compaction_is_reported_as_tombstone(
    kube: Kube, admin: Admin
) -> None:
    sink = Recorder()
    informer = Informer(kube, PODS, namespace="default", watch_timeout=5, retry_delay=0.1)
    await kube.create(PODS, pod("gone"), namespace="default")
    task = asyncio.create_task(informer.run(sink))
    try:
        await sink.wait_for(lambda: sink.seen("ADDED", "gone"))
        # Cut the informer off (its pod GETs fail), delete in the gap, forget history.
        await admin("POST", "fail", {"path": "/pods", "code": 503, "method": "GET"})
        await admin("POST", "drop-watches")
        await kube.delete(PODS, "gone", namespace="default")
        await admin("POST", "compact")
        await admin("DELETE", "fail")
        await sink.wait_for(lambda: sink.seen("DELETED", "gone", inferred=True))
    finally:
        await cancel_and_wait(task)
    assert informer.stats.tombstones == 1
    assert informer.stats.relists >= 2


async def test_informer_seeded_with_known_state_reports_deletions_made_while_down(
    kube: Kube,
) -> None:
    first = Recorder()
    informer = Informer(kube, PODS, namespace="default", watch_timeout=5)
    await kube.create(PODS, pod("old"), namespace="default")
    task = asyncio.create_task(informer.run(first))
    await first.wait_for(lambda: first.seen("ADDED", "old"))
    await cancel_and_wait(task)

    await kube.delete(PODS, "old", namespace="default")
    second = Recorder()
    restarted = Informer(kube, PODS, namespace="default", known=dict(informer.known))
    task = asyncio.create_task(restarted.run(second))
    try:
        await second.wait_for(lambda: second.seen("DELETED", "old", inferred=True))
    finally:
        await cancel_and_wait(task)


async def test_standby_takes_over_after_the_leader_stops_renewing(kube: Kube) -> None:
    def elector(identity: str) -> LeaderElector:
        return LeaderElector(
            kube,
            namespace="default",
            name="clearance-test",
            identity=identity,
            lease_duration=1.0,
            retry_period=0.1,
        )

    leader, standby = elector("a"), elector("b")
    leader_task = asyncio.create_task(leader.run())
    await asyncio.wait_for(leader.is_leader.wait(), 5)
    standby_task = asyncio.create_task(standby.run())
    await asyncio.sleep(0.5)
    assert not standby.is_leader.is_set()

    # A crash: the leader vanishes without releasing the Lease.
    leader.is_leader.clear()
    leader_task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await leader_task
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(standby.is_leader.wait(), 5)
    assert loop.time() - started <= 1.5
    await cancel_and_wait(standby_task)
    # Clean shutdown released the Lease for the next candidate.
    lease = await kube.get(LEASES, "clearance-test", namespace="default")
    assert b'"holderIdentity"' not in lease or b'"holderIdentity":null' in lease
