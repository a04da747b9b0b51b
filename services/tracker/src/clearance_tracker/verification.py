"""Verification: what the API server says now about a teardown, merged into its record.

This module owns the owner's re-check of a teardown (DESIGN §4 step 2) and nothing else: a
quorum LIST by the AppWrapper label of every kind the record knows (or one the caller already
started after the event that prompted it, when it covers those kinds), a GET of each open
object the LIST did not show, then one group-committed CAS of the pure outcome
(:func:`~.confirmation.apply_verification`, which also applies the `cleared` rule). The
ladder uses :meth:`Verifier.fresh_open` for its own fresh view of the open objects before it
acts. Which reads to issue is :mod:`.reads`'s business; deferring a verification while a
record's events are still queued (``RecordWriter.pending``) would be a change local to here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from clearance.telemetry import ContextLogger
from clearance_tracker.commits import Change, RecordWriter
from clearance_tracker.confirmation import (
    Confirmation,
    GetResult,
    Missing,
    Outcome,
    Snapshot,
    apply_get,
    apply_list,
    apply_verification,
    unseen,
)
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.reads import ApiReader, Listing, kinds
from clearance_tracker.store import Versioned
from clearance_tracker.teardown import Teardown, TrackedObject


class Verifier:
    """The owner's verification of its teardowns."""

    def __init__(
        self,
        *,
        reader: ApiReader,
        writer: RecordWriter,
        metrics: TrackerMetrics,
        me: str,
        clock: Callable[[], datetime],
        logger: Callable[[Teardown], ContextLogger],
    ) -> None:
        self.reader = reader
        self.writer = writer
        self.metrics = metrics
        self.me = me
        self.now = clock
        self.logger = logger

    async def verify(
        self,
        version: Versioned,
        *,
        listing: asyncio.Task[Listing] | None = None,
        fact: Change | None = None,
    ) -> Versioned:
        """Quorum LIST + GETs; merge what they prove; fix `clearing` if nothing is left (CAS).

        ``listing``: a LIST of the record's kinds already started by the caller after the
        event that prompted this verification; used only if it covers every kind the record
        knows by now. ``fact``: the change of that event, not yet written: applied first, in
        the same write (written alone if the reads fail, so the event is never lost).
        """
        record = version.record
        if fact is not None:
            preview = fact(record)
            record = preview.record if preview is not None else record
        try:
            listed, gets, added = await self._read(record, listing)
        except Exception:
            if fact is not None:
                await self.writer.commit(record.key, fact, known=version)
            raise
        now = self.now()
        self.metrics.verifications.inc()

        def change(current: Teardown) -> Outcome | None:
            first = fact(current) if fact is not None else None
            if first is not None:
                current = first.record
            outcome = apply_verification(current, listed=listed, gets=gets, now=now, by=self.me)
            if first is None:
                return outcome
            if outcome is None:
                return first
            return Outcome(
                outcome.record,
                first.confirmed + outcome.confirmed,
                first.added + outcome.added,
            )

        updated = await self.writer.commit(record.key, change, known=version)
        if updated is None:
            return version
        if added:
            self.logger(updated.record).info(
                "verification found more objects to wait for",
                extra={"added": [f"{o.kind}/{o.name}" for o in added]},
            )
        return updated

    async def _read(
        self, record: Teardown, listing: asyncio.Task[Listing] | None
    ) -> tuple[list[Snapshot], list[tuple[str, GetResult]], tuple[TrackedObject, ...]]:
        """The verification's reads: the quorum LIST (the one started, if it covers every
        kind of `record`), then a GET of each open object it did not show; and the objects
        the LIST adds to `record`."""
        listed: list[Snapshot] | None = None
        if listing is not None:
            try:
                covered, snapshots = await listing
            except Exception:
                covered, snapshots = frozenset(), []
            if kinds(record) <= covered:
                listed = snapshots
        if listed is None:
            _, listed = await self.reader.list_all(record)
        list_outcome, _ = apply_list(record, items=listed, now=self.now())
        gets = await self.reader.get_each(
            unseen(list_outcome.record, [s.metadata.uid for s in listed])
        )
        return listed, gets, list_outcome.added

    async def fresh_open(self, version: Versioned) -> tuple[Teardown, dict[str, Snapshot]]:
        """GET every open object now; apply what the answers prove; return the survivors."""
        record = version.record
        results = await self.reader.get_open(record)
        now = self.now()

        def change(current: Teardown) -> Outcome | None:
            confirmed: list[Confirmation] = []
            new = current
            for uid, result in results:
                step = apply_get(new, uid=uid, result=result, now=now)
                confirmed.extend(step.confirmed)
                new = step.record
            return Outcome(new, tuple(confirmed))

        updated = await self.writer.commit(record.key, change, known=version)
        current = updated.record if updated is not None else record
        alive: dict[str, Snapshot] = {}
        for uid, result in results:
            if isinstance(result, Missing) or result.metadata.uid != uid:
                continue
            alive[uid] = result
        return current, alive
