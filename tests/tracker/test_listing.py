"""Coalesced verification LISTs: shared per namespace and kind, each answer its own, never stale."""

from __future__ import annotations

import asyncio

from tracker_builders import node, pod

from clearance import labels
from clearance.events import NodeObject
from clearance_tracker.confirmation import Snapshot
from clearance_tracker.listing import CoalescedLists, SharedNodeList, selector_of

WORLD = [
    pod("a-0", "ua0", appwrapper="a"),
    pod("a-1", "ua1", appwrapper="a"),
    pod("b-0", "ub0", appwrapper="b"),
    pod("c-0", "uc0", appwrapper="c", namespace="team-b"),
]


class RecordingApi:
    """Answers a LIST from WORLD by namespace and AppWrapper label values; logs each LIST."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str]] = []
        self.release = asyncio.Event()
        self.release.set()

    async def fetch(self, api: str, kind: str, namespace: str, selector: str) -> list[Snapshot]:
        self.sent.append((namespace, selector))
        await self.release.wait()
        wanted = selector.split("=", 1)[1] if "=" in selector else selector
        values = set(wanted.split(" in (", 1)[-1].rstrip(")").split(","))
        return [
            p
            for p in WORLD
            if p.metadata.namespace == namespace
            and p.metadata.labels.get(labels.MCAD_APPWRAPPER) in values
        ]


def names(snapshots: list[Snapshot]) -> list[str]:
    return sorted(s.metadata.name for s in snapshots)


async def test_requests_made_together_share_one_list_per_namespace() -> None:
    api = RecordingApi()
    lists = CoalescedLists(api.fetch)
    a, b, c = await asyncio.gather(
        lists.by_label("v1", "Pod", "team-a", "a"),
        lists.by_label("v1", "Pod", "team-a", "b"),
        lists.by_label("v1", "Pod", "team-b", "c"),
    )
    assert (names(a), names(b), names(c)) == (["a-0", "a-1"], ["b-0"], ["c-0"])
    assert sorted(api.sent) == [
        ("team-a", f"{labels.MCAD_APPWRAPPER} in (a,b)"),
        ("team-b", f"{labels.MCAD_APPWRAPPER}=c"),
    ]


async def test_a_request_never_joins_a_list_already_sent() -> None:
    api = RecordingApi()
    api.release.clear()
    lists = CoalescedLists(api.fetch)
    first = asyncio.create_task(lists.by_label("v1", "Pod", "team-a", "a"))
    await asyncio.sleep(0.01)
    assert len(api.sent) == 1  # in flight
    second = asyncio.create_task(lists.by_label("v1", "Pod", "team-a", "a"))
    third = asyncio.create_task(lists.by_label("v1", "Pod", "team-a", "b"))
    await asyncio.sleep(0.01)
    assert len(api.sent) == 1  # the later requests wait for a LIST of their own
    api.release.set()
    assert names(await first) == ["a-0", "a-1"]
    assert names(await second) == ["a-0", "a-1"]
    assert names(await third) == ["b-0"]
    assert api.sent[1] == ("team-a", f"{labels.MCAD_APPWRAPPER} in (a,b)")


async def test_a_failed_list_fails_its_requests_only() -> None:
    calls = 0

    async def flaky(api: str, kind: str, namespace: str, selector: str) -> list[Snapshot]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("api down")
        return [WORLD[2]]

    lists = CoalescedLists(flaky)
    failed = await asyncio.gather(
        lists.by_label("v1", "Pod", "team-a", "b"), return_exceptions=True
    )
    assert isinstance(failed[0], ConnectionError)
    assert names(await lists.by_label("v1", "Pod", "team-a", "b")) == ["b-0"]


def test_selector_of_many_values_is_a_set_selector() -> None:
    assert selector_of(["b", "a"]) == f"{labels.MCAD_APPWRAPPER} in (a,b)"
    assert selector_of(["a"]) == f"{labels.MCAD_APPWRAPPER}=a"


class NodeApi:
    """Answers a LIST of nodes; logs each LIST; can hold the answer."""

    def __init__(self) -> None:
        self.sent = 0
        self.release = asyncio.Event()
        self.release.set()

    async def fetch(self) -> dict[str, NodeObject]:
        self.sent += 1
        await self.release.wait()
        return {"node-1": node("node-1"), "node-2": node("node-2", ready="Unknown")}


async def test_node_reads_made_together_share_one_list() -> None:
    api = NodeApi()
    shared = SharedNodeList(api.fetch)
    answers = await asyncio.gather(*(shared.nodes() for _ in range(5)))
    assert api.sent == 1
    assert all(sorted(a) == ["node-1", "node-2"] for a in answers)


async def test_a_node_read_never_joins_a_list_already_sent() -> None:
    api = NodeApi()
    api.release.clear()
    shared = SharedNodeList(api.fetch)
    first = asyncio.create_task(shared.nodes())
    await asyncio.sleep(0.01)  # the first LIST is in flight
    second = asyncio.create_task(shared.nodes())
    await asyncio.sleep(0.01)
    api.release.set()
    await asyncio.gather(first, second)
    assert api.sent == 2
