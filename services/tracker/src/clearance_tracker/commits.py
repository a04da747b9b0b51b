"""This replica's writes of teardown records: CAS mutations, taking turns, and group commit.

This module owns how facts reach the bucket. Writers of one record inside this process take
turns (one lock per key), so the view's revision is almost always current and concurrent
events do not retry against each other. Pure facts (an :class:`~.confirmation.Outcome` per
change) that arrive while a write of the same record is in flight queue up and go out
together in the next single CAS write — the burst of DELETED events of one teardown costs a
few KV round trips, not a conflict storm. A write that confirmed objects stamps each with the
span id of its future `deletion.confirmed` span (in the same write) and hands them to
``on_confirmed`` for reporting, off the critical path. How many facts wait per record is
visible (:meth:`RecordWriter.pending`), so verification can defer while a record's events are
still queued.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

import msgspec

from clearance_tracker import spans
from clearance_tracker.confirmation import Confirmation, Outcome
from clearance_tracker.store import Mutation, TeardownStore, Versioned
from clearance_tracker.teardown import Teardown
from clearance_tracker.view import TeardownView

Change = Callable[[Teardown], Outcome | None]
"""A pure fact about one record: the outcome of applying it, or None for "nothing to do"."""

_Queued = tuple[Change, "asyncio.Future[Versioned | None]"]


def stamp_span_ids(record: Teardown, confirmed: Iterable[Confirmation]) -> Teardown:
    """The record with a `deletion.confirmed` span id reserved for each newly confirmed object."""
    uids = [c.object.uid for c in confirmed]
    if not uids:
        return record
    objects = dict(record.objects)
    for uid in uids:
        obj = objects.get(uid)
        if obj is not None and obj.confirm_span_id is None:
            objects[uid] = msgspec.structs.replace(obj, confirm_span_id=spans.new_span_id())
    return msgspec.structs.replace(record, objects=objects)


class RecordWriter:
    """CAS writes of records by this replica, with group commit of pure facts."""

    def __init__(
        self,
        store: TeardownStore,
        view: TeardownView,
        *,
        on_confirmed: Callable[[Teardown, list[Confirmation]], None],
    ) -> None:
        self.store = store
        self.view = view
        self._on_confirmed = on_confirmed
        self._locks: dict[str, asyncio.Lock] = {}
        self._queued: dict[str, list[_Queued]] = {}

    def pending(self, key: str) -> int:
        """Facts about `key` waiting for the next group write."""
        return len(self._queued.get(key, ()))

    def forget(self, key: str) -> None:
        self._locks.pop(key, None)

    def _lock(self, key: str) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    async def mutate(
        self, key: str, change: Mutation, *, known: Versioned | None = None
    ) -> tuple[Versioned | None, bool]:
        """CAS update of one record by a pure `change`: (latest version, whether we wrote it)."""
        async with self._lock(key):
            version, wrote = await self.store.mutate(key, change, known=self.view.get(key) or known)
        if version is not None:
            self.view.remember(version)
        return version, wrote

    async def commit(
        self, key: str, change: Change, *, known: Versioned | None = None
    ) -> Versioned | None:
        """Apply one pure fact, group-committed with the others queued for `key`.

        Returns the version written (or current) once the write that carried this fact is
        done; raises what that write raised.
        """
        future: asyncio.Future[Versioned | None] = asyncio.get_running_loop().create_future()
        queued = self._queued.setdefault(key, [])
        queued.append((change, future))
        lock = self._lock(key)
        if not lock.locked():
            # The first fact of a write: one turn of the loop lets the facts delivered with it
            # (the other DELETED events of the teardown in the same fetch) join this write.
            await asyncio.sleep(0)
        async with lock:
            batch = self._queued.pop(key, [])
            if batch:
                await self._write_batch(key, batch, known)
        return await future

    async def _write_batch(self, key: str, batch: list[_Queued], known: Versioned | None) -> None:
        confirmed: list[Confirmation] = []

        def mutation(record: Teardown) -> Teardown | None:
            confirmed.clear()  # re-run from scratch after a CAS conflict
            new = record
            for change, _ in batch:
                outcome = change(new)
                if outcome is not None:
                    confirmed.extend(outcome.confirmed)
                    new = stamp_span_ids(outcome.record, outcome.confirmed)
            return new

        try:
            version, wrote = await self.store.mutate(
                key, mutation, known=self.view.get(key) or known
            )
        except Exception as exc:
            # Every fact's future carries the error, the writer's own included: each caller
            # raises it from its own future (none is left unretrieved).
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        except BaseException:
            for _, future in batch:
                future.cancel()
            raise
        if version is not None:
            self.view.remember(version)
        for _, future in batch:
            if not future.done():
                future.set_result(version)
        if version is not None and wrote and confirmed:
            self._on_confirmed(version.record, list(confirmed))
