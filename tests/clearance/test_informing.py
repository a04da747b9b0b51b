"""The one informer: the relist rule (pure) and the list-then-watch loop against kubesim."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from clearance.informing import decode_raw, diff_relist
from clearance.kube import PODS, Kube
from clearance.listwatch import (
    Bookmark,
    Changed,
    Decoded,
    Expired,
    Happening,
    Listed,
    ListWatch,
    Timing,
    meta_of,
)

# -- the relist rule -----------------------------------------------------------------------

Admin = Callable[..., Awaitable[None]]
"""The ``admin`` fixture (conftest.py): kubesim's fault injection."""


def obj(uid: str, name: str, rv: str) -> msgspec.Raw:
    body = {"metadata": {"uid": uid, "name": name, "namespace": "ns", "resourceVersion": rv}}
    return msgspec.Raw(msgspec.json.encode(body))


def item(uid: str, name: str, rv: str) -> Decoded[msgspec.Raw]:
    raw = obj(uid, name, rv)
    return Decoded(meta_of(raw), raw)


def known(*items: Decoded[msgspec.Raw]) -> dict[str, Decoded[msgspec.Raw]]:
    return {i.meta.uid: i for i in items}


def test_first_list_reports_every_object_as_added() -> None:
    changes = diff_relist({}, [item("u1", "a", "5"), item("u2", "b", "6")])
    assert [(c.action, c.item.meta.uid, c.inferred) for c in changes] == [
        ("ADDED", "u1", False),
        ("ADDED", "u2", False),
    ]


def test_object_gone_during_gap_yields_inferred_tombstone_with_last_state() -> None:
    last = item("u1", "a", "5")
    changes = diff_relist(known(last), [])
    assert len(changes) == 1
    assert changes[0].action == "DELETED"
    assert changes[0].inferred
    assert changes[0].item == last
    assert changes[0].item.meta.resourceVersion == "5"


def test_unchanged_object_is_not_reported_again() -> None:
    same = item("u1", "a", "5")
    assert diff_relist(known(same), [same]) == []


def test_object_changed_during_gap_is_reported_modified() -> None:
    changes = diff_relist(known(item("u1", "a", "5")), [item("u1", "a", "9")])
    assert [(c.action, c.item.meta.resourceVersion) for c in changes] == [("MODIFIED", "9")]


def test_reused_name_reports_old_tombstone_before_new_object() -> None:
    changes = diff_relist(known(item("old", "pod-1", "5")), [item("new", "pod-1", "12")])
    assert [(c.action, c.item.meta.uid, c.inferred) for c in changes] == [
        ("DELETED", "old", True),
        ("ADDED", "new", False),
    ]


_uids = st.sampled_from([f"u{i}" for i in range(6)])
_states = st.dictionaries(_uids, st.integers(min_value=1, max_value=4), max_size=6)


@given(before=_states, listed=st.lists(st.tuples(_uids, st.integers(1, 4)), max_size=8))
def test_relist_rule_applied_to_what_was_known_yields_exactly_what_was_listed(
    before: dict[str, int], listed: list[tuple[str, int]]
) -> None:
    """Whatever the order or duplicates of a LIST, known + changes == the LIST (last entry
    of a uid wins), tombstones come first and nothing unchanged is reported."""
    state = {uid: item(uid, uid, str(rv)) for uid, rv in before.items()}
    items = [item(uid, uid, str(rv)) for uid, rv in listed]
    changes = diff_relist(state, items)
    after = dict(state)
    for change in changes:
        if change.action == "DELETED":
            assert change.inferred and change.item == state[change.item.meta.uid]
            after.pop(change.item.meta.uid)
        else:
            assert (change.item.meta.uid in state) == (change.action == "MODIFIED")
            after[change.item.meta.uid] = change.item
    expected = {uid: str(rv) for uid, rv in listed}
    assert {uid: i.meta.resourceVersion for uid, i in after.items()} == expected
    actions = [c.action for c in changes]
    assert actions == sorted(actions, key=lambda a: a != "DELETED")
    reported = [c.item.meta.uid for c in changes if c.action != "DELETED"]
    assert all(before.get(uid) != int(expected[uid]) for uid in reported)
    assert len(reported) == len(set(reported))


# -- the iterator against kubesim ----------------------------------------------------------


def pod(name: str) -> dict[str, object]:
    return {"metadata": {"name": name}, "spec": {"containers": [{"name": "c", "image": "x"}]}}


FAST = Timing(watch_timeout=5, inactivity_timeout=5, retry_delay=0.05)


class Collector:
    """Runs one ListWatch in a task and keeps every happening."""

    def __init__(self, stream: ListWatch[msgspec.Raw], start: str | None = None) -> None:
        self.stream = stream
        self.seen: list[Happening[msgspec.Raw]] = []
        self._new = asyncio.Event()
        self._task = asyncio.create_task(self._run(start))

    async def _run(self, start: str | None) -> None:
        async with contextlib.aclosing(self.stream.happenings(start)) as happenings:
            async for happening in happenings:
                self.seen.append(happening)
                self._new.set()

    async def until(self, predicate: object, timeout: float = 10.0) -> None:
        assert callable(predicate)
        async with asyncio.timeout(timeout):
            while not predicate():
                self._new.clear()
                await self._new.wait()

    def changed(self, action: str) -> list[str]:
        return [
            h.item.meta.name for h in self.seen if isinstance(h, Changed) and h.action == action
        ]

    async def stop(self) -> None:
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


async def test_without_a_start_it_lists_first_then_watches_from_the_list(kube: Kube) -> None:
    await kube.create(PODS, pod("before"), namespace="default")
    collector = Collector(ListWatch(kube, PODS, decode=decode_raw, timing=FAST))
    try:
        await collector.until(lambda: collector.seen)
        first = collector.seen[0]
        assert isinstance(first, Listed)
        assert [i.meta.name for i in first.items] == ["before"]
        await kube.create(PODS, pod("after"), namespace="default")
        await collector.until(lambda: "after" in collector.changed("ADDED"))
    finally:
        await collector.stop()
    assert collector.changed("ADDED") == ["after"]  # "before" came with the LIST only


async def test_from_a_start_it_replays_the_watch_without_a_list_and_moves_on_bookmarks(
    kube: Kube,
) -> None:
    created = meta_of(await kube.create(PODS, pod("a"), namespace="default"))
    await kube.patch(PODS, "a", {"metadata": {"labels": {"x": "1"}}}, namespace="default")
    stream = ListWatch(kube, PODS, decode=decode_raw, timing=FAST)
    collector = Collector(stream, start=created.resourceVersion)
    try:
        await collector.until(lambda: any(isinstance(h, Bookmark) for h in collector.seen))
    finally:
        await collector.stop()
    assert not any(isinstance(h, Listed) for h in collector.seen)
    assert collector.changed("MODIFIED") == ["a"]
    assert stream.stats.relists == 0


async def test_a_start_the_server_no_longer_holds_expires_then_relists(
    kube: Kube, admin: Admin
) -> None:
    first = meta_of(await kube.create(PODS, pod("a"), namespace="default"))
    await kube.create(PODS, pod("b"), namespace="default")
    await admin("POST", "compact")
    collector = Collector(
        ListWatch(kube, PODS, decode=decode_raw, timing=FAST), start=first.resourceVersion
    )
    try:
        await collector.until(lambda: any(isinstance(h, Listed) for h in collector.seen))
    finally:
        await collector.stop()
    expired, listed = collector.seen[0], collector.seen[1]
    assert isinstance(expired, Expired) and expired.reason == "expired"
    assert isinstance(listed, Listed)
    assert sorted(i.meta.name for i in listed.items) == ["a", "b"]


async def test_dropped_watches_resume_from_the_last_position_without_a_relist(
    kube: Kube, admin: Admin
) -> None:
    restarts: list[int] = []
    stream = ListWatch(
        kube, PODS, decode=decode_raw, timing=FAST, on_watch_restart=lambda: restarts.append(1)
    )
    collector = Collector(stream)
    try:
        await collector.until(lambda: collector.seen)
        for i in range(3):
            await admin("POST", "drop-watches")
            await kube.create(PODS, pod(f"p{i}"), namespace="default")
        await collector.until(lambda: len(collector.changed("ADDED")) == 3)
    finally:
        await collector.stop()
    assert collector.changed("ADDED") == ["p0", "p1", "p2"]
    assert stream.stats.relists == 1 and len(restarts) >= 1


async def test_requested_relist_ends_the_watch_and_lists_again(kube: Kube) -> None:
    stream = ListWatch(kube, PODS, decode=decode_raw, timing=FAST)
    collector = Collector(stream)
    try:
        await collector.until(lambda: collector.seen)
        stream.relist()
        await kube.create(PODS, pod("x"), namespace="default")  # the next line ends the watch
        await collector.until(lambda: sum(isinstance(h, Listed) for h in collector.seen) == 2)
    finally:
        await collector.stop()
    reasons = [h.reason for h in collector.seen if isinstance(h, Expired)]
    assert reasons == ["requested"]


async def test_an_object_the_hook_skips_is_counted_and_the_watch_moves_past_it(
    kube: Kube,
) -> None:
    def only_good(raw: msgspec.Raw, where: str) -> Decoded[msgspec.Raw] | None:
        meta = meta_of(raw)
        return None if meta.name.startswith("bad") else Decoded(meta, raw)

    stream = ListWatch(kube, PODS, decode=only_good, timing=FAST)
    collector = Collector(stream)
    try:
        await collector.until(lambda: collector.seen)
        await kube.create(PODS, pod("bad-1"), namespace="default")
        await kube.create(PODS, pod("good"), namespace="default")
        await collector.until(lambda: "good" in collector.changed("ADDED"))
    finally:
        await collector.stop()
    assert collector.changed("ADDED") == ["good"]
    assert stream.stats.undecodable == 1


class _CancelSwallowingKube:
    """Stand-in for a client whose own timeout fires with a cancellation and reports it as
    TimeoutError (aiohttp's timer does; a replica waking from SIGSTOP meets it: every timer is
    due at once). Its first watch does exactly that; later ones hang, like an idle watch."""

    def __init__(self) -> None:
        self.watches = 0

    async def watch(self, *args: object, **kwargs: object) -> AsyncIterator[object]:
        self.watches += 1
        if self.watches == 1:
            task = asyncio.current_task()
            assert task is not None
            task.cancel()
            try:
                await asyncio.sleep(1)
            except asyncio.CancelledError:
                raise TimeoutError from None
        await asyncio.Event().wait()
        yield  # an async generator, like Kube.watch


async def test_a_cancel_a_client_timeout_turned_into_timeouterror_still_ends_the_watch() -> None:
    # Found by the chaos harness (short seed 2): a watcher frozen past its lease woke, lost
    # the lease and never stopped its pod informer (the watch resumed), so it stayed silent
    # and ignored SIGTERM.
    kube = _CancelSwallowingKube()
    stream = ListWatch(kube, PODS, decode=decode_raw, timing=FAST)  # type: ignore[arg-type]

    async def consume() -> None:
        async for _ in stream.happenings("5"):
            pass

    task = asyncio.create_task(consume())
    with contextlib.suppress(asyncio.CancelledError, TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), 2)
    assert task.done() and task.cancelled(), f"still watching after {kube.watches} watch(es)"


class _LineArrivingWithTheCancel:
    """A watch stream whose next line arrives in the same instant its reader is cancelled."""

    def __init__(self, reader: asyncio.Task[None]) -> None:
        self.reader = reader

    async def readline(self) -> bytes:
        self.reader.cancel()
        return b'{"type": "BOOKMARK"}\n'


async def test_a_watch_line_arriving_with_the_cancel_does_not_swallow_it() -> None:
    # Found by the chaos harness (short seed 2), like the test above: asyncio.wait_for (3.11)
    # returned the line and dropped the cancellation, so the informer never stopped.
    from clearance.kube import read_line

    async def reader() -> None:
        stream = _LineArrivingWithTheCancel(asyncio.current_task())  # type: ignore[arg-type]
        await read_line(stream, timeout=5)  # type: ignore[arg-type]
        await asyncio.sleep(0.5)  # a cancelled reader must not get here

    task = asyncio.create_task(reader())
    with contextlib.suppress(asyncio.CancelledError):
        await task
    assert task.cancelled()
