"""One informer per watched resource and namespace: publishes every change, never loses a deletion.

The list-then-watch loop is :class:`clearance.listwatch.ListWatch` (shared with the other
services); this module is what the watcher puts on top of it: where to start, what to
publish, and when it counts as synced.

Start-up, per informer:

1. ``known`` (uid → last published state) and ``resume`` (acknowledged position) come
   from the CLEARANCE_KUBE stream (:mod:`clearance_watcher.seeding`).
2. With a ``resume`` position: one consistent LIST (not published) tells which changes the
   resumed watch must deliver to have caught up (:mod:`clearance_watcher.resuming`); the
   watch starts *at exactly* ``resume`` and the informer counts as synced once all of those
   arrived. A 410 (history compacted) falls back to step 3.
3. Without one: a consistent LIST, diffed against ``known``
   (:func:`clearance.informing.diff_relist`) → tombstones for what vanished, ADDED/MODIFIED
   for the rest, all acknowledged before the informer counts as synced; the watch then
   starts at the LIST's resourceVersion.
4. Watch: bookmarks move the published position; a 410 or an ERROR event relists (step 3).

Every object goes through :meth:`Codec.read`: one that does not decode whole is published
with what did decode and a ``problem`` (never skipped while its identity can be read).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import msgspec

from clearance.events import KubeEvent, WatchAction
from clearance.informing import diff_relist
from clearance.kube import Kube, Resource
from clearance.listwatch import (
    Bookmark,
    Changed,
    Decoded,
    Expired,
    Identity,
    Listed,
    ListWatch,
    Timing,
    loose_meta,
)
from clearance.telemetry import ContextLogger
from clearance_watcher.decoding import Codec, Reading, Snapshot
from clearance_watcher.metrics import WatcherMetrics
from clearance_watcher.progress import Progress
from clearance_watcher.publishing import Publisher
from clearance_watcher.resuming import CatchUp, int_rv

log = logging.getLogger(__name__)

Known = Decoded[Reading]
"""What the informer last published about one object (``value.snapshot`` is never None)."""


@dataclass(frozen=True, slots=True)
class Scope:
    """What one informer watches: a resource, optionally one namespace, a label selector."""

    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None

    @property
    def key(self) -> str:
        """Stable identity of the informer, written into every event's headers."""
        r = self.resource
        return f"{r.group or 'core'}/{r.version}/{r.plural}@{self.namespace or '*'}"


@dataclass(frozen=True, slots=True)
class WatcherTiming(Timing):
    resync_interval: float = 0.0
    """Re-announce every known object this often (0: never); see :meth:`Informer._resync`."""


def known_of(snapshot: Snapshot, reading: Reading | None = None) -> Known:
    """The ``known`` entry for a published snapshot."""
    m = snapshot.metadata
    return Decoded(
        Identity(m.uid, m.name, m.namespace, m.resource_version), reading or Reading(snapshot)
    )


Observer = Callable[
    [str, str | None, str, Snapshot | None, msgspec.Raw | None, bool], Awaitable[None]
]
"""Awaited with (uid, namespace, name, snapshot, raw, deleted) for every object seen, before
its event is published (the AppWrapper informer starts item informers here). ``snapshot`` is
None and ``raw`` set for an object that did not decode whole."""


@dataclass
class Informer:
    """Publishes every change of one :class:`Scope` through the :class:`Publisher`."""

    kube: Kube
    scope: Scope
    codec: Codec
    publisher: Publisher
    metrics: WatcherMetrics
    timing: WatcherTiming = field(default_factory=WatcherTiming)
    known: dict[str, Known] = field(default_factory=dict)
    resume: str | None = None
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    observer: Observer | None = None

    def __post_init__(self) -> None:
        self.progress = Progress(self.scope.key, self.resume)
        self.kind = self.codec.kube_kind
        self.log = ContextLogger(log, informer=self.scope.key)
        self.stream: ListWatch[Reading] = ListWatch(
            self.kube,
            self.scope.resource,
            decode=self._decode,
            namespace=self.scope.namespace,
            label_selector=self.scope.label_selector,
            timing=self.timing,
            on_watch_restart=self.metrics.watch_restarts.labels(self.kind).inc,
            log_extra={"informer": self.scope.key},
        )
        self._catch_up: CatchUp | None = None

    # -- the loop --------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled."""
        resync = None
        if self.timing.resync_interval > 0:
            resync = asyncio.create_task(self._resync(), name=f"resync:{self.scope.key}")
        try:
            start = await self._plan_resume() if self.resume else None
            async with contextlib.aclosing(self.stream.happenings(start)) as happenings:
                async for happening in happenings:
                    if isinstance(happening, Changed):
                        await self._changed(happening.action, happening.item)
                    elif isinstance(happening, Bookmark):
                        self.progress.mark(happening.resource_version)
                        if self._catch_up is not None:
                            self._caught_up(self._catch_up.bookmarked(happening.resource_version))
                    elif isinstance(happening, Listed):
                        await self._relisted(happening)
                    elif isinstance(happening, Expired):
                        if self._catch_up is not None and happening.reason != "requested":
                            self.metrics.resumes.labels(self.kind, "expired").inc()
                        self._catch_up = None
                    self._check_overdue()
        finally:
            if resync is not None:
                resync.cancel()

    async def _resync(self) -> None:
        """Re-announce the last state of every known object, every ``resync_interval``.

        CLEARANCE_KUBE keeps 24 h and a takeover learns what exists from it, so every live
        object must have an event younger than that, even one that never changes. The
        re-announcement is an ADDED with the original Msg-Id (``<uid>:<rv>``): inside the
        dedup window JetStream drops it, outside it stores a fresh copy of the same state
        (with its ``problem``, if it had one).
        """
        while True:
            await asyncio.sleep(self.timing.resync_interval)
            if not self.synced.is_set():
                continue
            count = 0
            for uid in list(self.known):

                def current(uid: str = uid) -> KubeEvent | None:
                    known = self.known.get(uid)
                    if known is None or known.value.snapshot is None:
                        return None  # deleted meanwhile
                    return self._event("ADDED", known.value, datetime.now(UTC))

                if await self.publisher.submit_current(current, progress=self.progress):
                    count += 1
            self.metrics.resyncs.labels(self.kind).inc(count)

    # -- resume ----------------------------------------------------------------------

    async def _plan_resume(self) -> str | None:
        """Prepare a resume from ``self.resume``; None means "relist instead"."""
        assert self.resume is not None
        start = int_rv(self.resume)
        if start is None:
            self.metrics.resumes.labels(self.kind, "not_numeric").inc()
            return None
        listed = await self.stream.list_raw()
        metas = [m for m in map(loose_meta, listed.items) if m is not None]
        self._catch_up = CatchUp.plan(
            start=start,
            listed=metas,
            list_rv=listed.resource_version,
            known=self.known,
            deadline=time.monotonic() + self.timing.inactivity_timeout,
        )
        self.log.info(
            "resuming watch from the published position",
            extra={"resource_version": self.resume, "awaiting": len(self._catch_up.expected)},
        )
        self._caught_up(self._catch_up.done)
        return self.resume

    def _caught_up(self, now_done: bool) -> None:
        if now_done:
            self._catch_up = None
            self.metrics.resumes.labels(self.kind, "caught_up").inc()
            self.synced.set()

    def _check_overdue(self) -> None:
        catch_up = self._catch_up
        if catch_up is not None and catch_up.overdue(time.monotonic()):
            # Never expected in practice; a relist settles whatever is missing.
            self.log.warning(
                "resumed watch did not deliver every expected change; relisting",
                extra={"missing": len(catch_up.expected)},
            )
            self.metrics.resumes.labels(self.kind, "gave_up").inc()
            self._catch_up = None
            self.stream.relist()

    # -- what happened ---------------------------------------------------------------

    async def _relisted(self, listed: Listed[Reading]) -> None:
        """Publish the difference a LIST makes, wait for every ack."""
        self._catch_up = None
        self.metrics.relists.labels(self.kind).inc()
        for item in listed.items:
            await self._observe(item, deleted=False)
        observed = datetime.now(UTC)
        acks: list[asyncio.Future[None]] = []
        for change in diff_relist(self.known, listed.items):
            if change.item.value.snapshot is None:
                continue  # exists, but nothing about it can be published
            if change.inferred:
                await self._observe(change.item, deleted=True)
                self.metrics.tombstones.labels(self.kind).inc()
                meta = change.item.meta
                self.log.info(
                    "object vanished while not watched; publishing a tombstone",
                    extra={"namespace": meta.namespace, "object_name": meta.name, "uid": meta.uid},
                )
            acks.append(
                await self._emit(
                    change.action, change.item, observed, rv=None, inferred=change.inferred
                )
            )
        self.progress.mark(listed.resource_version)
        if acks:
            await asyncio.wait(acks)
        self.synced.set()

    async def _changed(self, action: WatchAction, item: Known) -> None:
        deleted = action == "DELETED"
        await self._observe(item, deleted=deleted)
        rv = item.meta.resourceVersion
        if item.value.snapshot is not None:
            await self._emit(action, item, datetime.now(UTC), rv=rv or None)
        if self._catch_up is not None:
            self._caught_up(self._catch_up.saw(item.meta.uid, rv, deleted=deleted))

    async def _observe(self, item: Known, *, deleted: bool) -> None:
        if self.observer is None or not item.meta.uid:
            return
        reading, meta = item.value, item.meta
        snapshot = reading.snapshot if reading.problem is None else None
        await self.observer(meta.uid, meta.namespace, meta.name, snapshot, reading.raw, deleted)

    def _decode(self, raw: msgspec.Raw, where: str) -> Known | None:
        """The decode hook: the snapshot, else what could be salvaged (logged and counted)."""
        reading = self.codec.read(raw)
        snapshot = reading.snapshot
        if reading.problem is None and snapshot is not None:
            return known_of(snapshot, reading)
        self.metrics.decode_failures.labels(self.kind).inc()
        meta = loose_meta(raw) if snapshot is None else known_of(snapshot).meta
        problem = reading.problem
        self.log.error(
            "object does not decode into the event snapshot; publishing what could be read"
            if snapshot is not None
            else "object has no valid identity; nothing can be published about it",
            extra={
                "resource": self.scope.resource.plural,
                "object": meta.describe() if meta else "(unreadable metadata)",
                "namespace": meta.namespace if meta else None,
                "object_name": meta.name if meta else None,
                "uid": meta.uid if meta else None,
                "seen_in": where,
                "error": problem.message if problem else None,
                "path": problem.path if problem else None,
                "dropped": list(problem.dropped) if problem else [],
            },
        )
        if meta is None or not meta.uid:
            return None
        return Decoded(meta, reading)

    def _event(
        self, action: WatchAction, reading: Reading, observed: datetime, *, inferred: bool = False
    ) -> KubeEvent:
        assert reading.snapshot is not None
        return self.codec.event(
            action,
            reading.snapshot,
            observed_at=observed,
            inferred=inferred,
            problem=reading.problem,
        )

    async def _emit(
        self,
        action: WatchAction,
        item: Known,
        observed: datetime,
        *,
        rv: str | None,
        inferred: bool = False,
    ) -> asyncio.Future[None]:
        event = self._event(action, item.value, observed, inferred=inferred)
        done = await self.publisher.submit(event, progress=self.progress, rv=rv)
        if action == "DELETED":
            self.known.pop(item.meta.uid, None)
        else:
            self.known[item.meta.uid] = item
        return done
