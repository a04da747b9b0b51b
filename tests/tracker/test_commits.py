"""Group commit: the facts of one record that arrive together go out in one CAS write."""

from __future__ import annotations

import asyncio
import gc
from typing import Any

from tracker_builders import at, pod, record, tracked

from clearance_tracker.commits import Change, RecordWriter
from clearance_tracker.confirmation import Confirmation, Outcome, apply_event
from clearance_tracker.store import Mutation, Versioned
from clearance_tracker.teardown import Teardown


class _Store:
    """A bucket of one record that counts its writes (each takes a little while)."""

    def __init__(self, current: Teardown) -> None:
        self.current = Versioned(current, 1)
        self.writes = 0

    async def mutate(
        self, key: str, change: Mutation, *, known: Versioned | None = None
    ) -> tuple[Versioned | None, bool]:
        new = change(self.current.record)
        if new is None or new == self.current.record:
            return self.current, False
        await asyncio.sleep(0.01)
        self.writes += 1
        self.current = Versioned(new, self.current.revision + 1)
        return self.current, True


class _View:
    def __init__(self) -> None:
        self.latest: Versioned | None = None

    def get(self, key: str) -> Versioned | None:
        return self.latest

    def remember(self, version: Versioned) -> None:
        self.latest = version


def _deleted(name: str, uid: str) -> Change:
    def change(current: Teardown) -> Outcome:
        return apply_event(current, action="DELETED", snapshot=pod(name, uid), now=at(2))

    return change


async def test_the_deleted_events_of_one_fetch_are_confirmed_in_one_write() -> None:
    names = [(f"w-{i}", f"u{i}") for i in range(8)]
    start = record(*(tracked(name, uid) for name, uid in names))
    store = _Store(start)
    reported: list[list[Confirmation]] = []

    def on_confirmed(_record: Teardown, confirmed: list[Confirmation]) -> None:
        reported.append(confirmed)

    writer = RecordWriter(store, _View(), on_confirmed=on_confirmed)  # type: ignore[arg-type]
    # Handlers of one fetched batch start in the same loop turn, as the consumer starts them.
    tasks: list[asyncio.Task[Any]] = [
        asyncio.create_task(writer.commit(start.key, _deleted(name, uid))) for name, uid in names
    ]
    versions = await asyncio.gather(*tasks)
    assert store.writes == 1
    assert all(v is not None and v.record.all_confirmed for v in versions)
    assert [len(r) for r in reported] == [8]  # one deletion.confirmed event for all eight


class _Unavailable(_Store):
    """A bucket whose stream has no leader: every write fails."""

    async def mutate(
        self, key: str, change: Mutation, *, known: Versioned | None = None
    ) -> tuple[Versioned | None, bool]:
        await asyncio.sleep(0.01)
        raise ConnectionError("no responders")


async def _commit_all(writer: RecordWriter, key: str, names: list[tuple[str, str]]) -> list[Any]:
    tasks = [asyncio.create_task(writer.commit(key, _deleted(name, uid))) for name, uid in names]
    return await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_failed_group_write_raises_in_every_caller_and_leaves_none_unread() -> None:
    names = [(f"w-{i}", f"u{i}") for i in range(3)]
    start = record(*(tracked(name, uid) for name, uid in names))
    unread: list[object] = []
    asyncio.get_running_loop().set_exception_handler(lambda _, ctx: unread.append(ctx["message"]))
    writer = RecordWriter(_Unavailable(start), _View(), on_confirmed=lambda *_: None)  # type: ignore[arg-type]
    raised = [type(r) for r in await _commit_all(writer, start.key, names)]
    assert raised == [ConnectionError] * 3
    await asyncio.sleep(0.01)
    gc.collect()  # a future dropped with its exception unread is reported when collected
    assert not unread  # "Future exception was never retrieved"
