"""One informer per watched resource and namespace: list-then-watch that never loses a deletion.

Why not :class:`clearance.informing.Informer`: the watcher needs three things it does not
offer. It must *resume* a watch from the position a predecessor published up to (so a
restart or a failover loses no intermediate MODIFIED), it must move that position on
bookmarks and at the end of each LIST, and a single object that does not decode must be
skipped and counted rather than retried forever. The relist rule is the same as
:func:`clearance.informing.diff_relist` (tombstones first, then ADDED/MODIFIED), applied
to decoded snapshots here; :func:`diff` is the pure function.

Start-up, per informer:

1. ``known`` (uid → last published snapshot) and ``resume`` (acknowledged position) come
   from the CLEARANCE_KUBE stream (:mod:`clearance_watcher.seeding`).
2. With a ``resume`` position: one consistent LIST tells which changes the resumed watch
   must deliver to have caught up (each listed object changed after ``resume`` at its
   listed rv; each known object missing from the LIST as a DELETED); the watch starts
   *at exactly* ``resume`` and the informer counts as synced once all of those arrived.
   The LIST is not published. A 410 (history compacted) falls back to step 3.
3. Without one: a consistent LIST, diffed against ``known`` → tombstones for what
   vanished, ADDED/MODIFIED for the rest, all acknowledged before the informer counts as
   synced; then the watch starts at the LIST's resourceVersion.
4. Watch: bookmarks on, resume from the last rv on EOF, timeout or a silent connection;
   relist (step 3) on 410 Expired or an ERROR event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
import msgspec

from clearance.events import KubeEvent, WatchAction
from clearance.kube import Kube, KubeError, ListResult, Resource, error_status
from clearance.telemetry import ContextLogger
from clearance_watcher.decoding import Codec, Identity, Snapshot, bookmark_rv, loose_identity
from clearance_watcher.metrics import WatcherMetrics
from clearance_watcher.publishing import Progress, Publisher

log = logging.getLogger(__name__)

_MAX_RETRY_PAUSE = 30.0


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
class Timing:
    watch_timeout: float = 300.0
    inactivity_timeout: float = 90.0
    retry_delay: float = 1.0
    resync_interval: float = 0.0
    """Re-announce every known object this often (0: never); see :meth:`Informer._resync`."""


@dataclass(frozen=True, slots=True)
class Planned:
    """One change a relist implies."""

    action: WatchAction
    snapshot: Snapshot
    inferred: bool = False


def diff(
    known: Mapping[str, Snapshot], listed: Iterable[Snapshot], present: Iterable[str] = ()
) -> list[Planned]:
    """Changes implied by a fresh LIST given what was published before it.

    ``present`` names uids that are listed but could not be decoded: they exist, so
    they are no tombstone, but there is nothing to publish about them either.
    Tombstones come first, so a name reused during the gap sees the old object's
    DELETED before the new object's ADDED on its subject.
    """
    seen: set[str] = set(present)
    updates: list[Planned] = []
    for snapshot in listed:
        meta = snapshot.metadata
        seen.add(meta.uid)
        before = known.get(meta.uid)
        if before is None:
            updates.append(Planned("ADDED", snapshot))
        elif before.metadata.resource_version != meta.resource_version:
            updates.append(Planned("MODIFIED", snapshot))
    tombstones = [
        Planned("DELETED", snapshot, inferred=True)
        for uid, snapshot in known.items()
        if uid not in seen
    ]
    return tombstones + updates


def _int_rv(rv: str) -> int | None:
    try:
        return int(rv)
    except ValueError:
        return None


Observer = Callable[
    [str, str | None, str, Snapshot | None, msgspec.Raw | None, bool], Awaitable[None]
]
"""Awaited with (uid, namespace, name, snapshot, raw, deleted) for every object seen,
before its event is published (the AppWrapper informer starts item informers here)."""


@dataclass
class Informer:
    """Publishes every change of one :class:`Scope` through the :class:`Publisher`."""

    kube: Kube
    scope: Scope
    codec: Codec
    publisher: Publisher
    metrics: WatcherMetrics
    timing: Timing = field(default_factory=Timing)
    known: dict[str, Snapshot] = field(default_factory=dict)
    resume: str | None = None
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    observer: Observer | None = None

    def __post_init__(self) -> None:
        self.progress = Progress(self.scope.key, self.resume)
        self.kind = self.codec.kube_kind
        self.log = ContextLogger(log, informer=self.scope.key)
        self._expected: set[tuple[str, str]] | None = None
        self._resume_deadline = 0.0
        self._resume_list_rv = 0

    # -- the loop --------------------------------------------------------------------

    async def run(self) -> None:
        """Run until cancelled."""
        resync = None
        if self.timing.resync_interval > 0:
            resync = asyncio.create_task(self._resync(), name=f"resync:{self.scope.key}")
        try:
            position = await self._try_resume() if self.resume else None
            while True:
                if position is None:
                    position = await self._relist()
                position = await self._watch(position)
        finally:
            if resync is not None:
                resync.cancel()

    async def _resync(self) -> None:
        """Re-announce the last state of every known object, every ``resync_interval``.

        CLEARANCE_KUBE keeps 24 h and a takeover learns what exists from it, so every live
        object must have an event younger than that, even one that never changes. The
        re-announcement is an ADDED with the original Msg-Id (``<uid>:<rv>``): inside the
        dedup window JetStream drops it, outside it stores a fresh copy of the same state.
        """
        while True:
            await asyncio.sleep(self.timing.resync_interval)
            if not self.synced.is_set():
                continue
            count = 0
            for uid in list(self.known):

                def current(uid: str = uid) -> KubeEvent | None:
                    snapshot = self.known.get(uid)
                    if snapshot is None:
                        return None  # deleted meanwhile
                    return self.codec.event("ADDED", snapshot, observed_at=datetime.now(UTC))

                if await self.publisher.submit_current(current, progress=self.progress):
                    count += 1
            self.metrics.resyncs.labels(self.kind).inc(count)

    async def _try_resume(self) -> str | None:
        """Prepare a resume from ``self.resume``; None means "relist instead"."""
        assert self.resume is not None
        start = _int_rv(self.resume)
        if start is None:
            self.metrics.resumes.labels(self.kind, "not_numeric").inc()
            return None
        listed = await self._list()
        expected: set[tuple[str, str]] = set()
        uids: set[str] = set()
        for raw in listed.items:
            ident = loose_identity(raw)
            if ident is None:
                continue
            uids.add(ident.uid)
            rv = _int_rv(ident.resource_version)
            if rv is not None and rv > start:
                expected.add((ident.uid, ident.resource_version))
        expected.update((uid, "DELETED") for uid in self.known if uid not in uids)
        self._expected = expected
        self._resume_list_rv = _int_rv(listed.resource_version) or 2**63
        self._resume_deadline = time.monotonic() + self.timing.inactivity_timeout
        self.log.info(
            "resuming watch from the published position",
            extra={"resource_version": self.resume, "awaiting": len(expected)},
        )
        self._check_caught_up()
        return self.resume

    async def _list(self) -> ListResult:
        """A consistent LIST, retried with capped exponential backoff until it works."""
        failures = 0
        while True:
            try:
                return await self.kube.list(
                    self.scope.resource,
                    namespace=self.scope.namespace,
                    label_selector=self.scope.label_selector,
                )
            except KubeError as exc:
                failures += 1
                pause = min(self.timing.retry_delay * 2 ** (failures - 1), _MAX_RETRY_PAUSE)
                self.log.warning(
                    "list failed, retrying",
                    extra={"error": str(exc), "failures": failures, "retry_in": pause},
                )
                await asyncio.sleep(pause)

    def _bookmarked(self, rv: str) -> None:
        """A bookmark at or past the resume LIST's rv proves the replay is complete."""
        number = _int_rv(rv)
        if self._expected is not None and number is not None and number >= self._resume_list_rv:
            self._expected.clear()
            self._check_caught_up()

    def _check_caught_up(self) -> None:
        if self._expected is not None and not self._expected:
            self._expected = None
            self.metrics.resumes.labels(self.kind, "caught_up").inc()
            self.synced.set()

    async def _relist(self) -> str:
        """LIST, publish the difference, wait for every ack; returns the LIST's rv."""
        self._expected = None
        listed = await self._list()
        self.metrics.relists.labels(self.kind).inc()
        snapshots: list[Snapshot] = []
        undecodable: list[str] = []
        for raw in listed.items:
            snapshot = self._decode(raw, "LIST")
            if snapshot is not None:
                snapshots.append(snapshot)
                await self._observe(snapshot, None, deleted=False)
            else:
                ident = loose_identity(raw)
                if ident is not None and ident.uid:
                    undecodable.append(ident.uid)
                    await self._observe_raw(ident, raw, deleted=False)
        observed = datetime.now(UTC)
        acks: list[asyncio.Future[None]] = []
        for change in diff(self.known, snapshots, undecodable):
            if change.inferred:
                await self._observe(change.snapshot, None, deleted=True)
                self.metrics.tombstones.labels(self.kind).inc()
                meta = change.snapshot.metadata
                self.log.info(
                    "object vanished while not watched; publishing a tombstone",
                    extra={"namespace": meta.namespace, "object_name": meta.name, "uid": meta.uid},
                )
            acks.append(
                await self._emit(
                    change.action, change.snapshot, observed, rv=None, inferred=change.inferred
                )
            )
        self.progress.mark(listed.resource_version)
        if acks:
            await asyncio.wait(acks)
        self.synced.set()
        return listed.resource_version

    async def _watch(self, position: str) -> str | None:
        """Watch from ``position``, resuming on interruptions; None when a relist is due."""
        while True:
            try:
                async for line in self.kube.watch(
                    self.scope.resource,
                    resource_version=position,
                    namespace=self.scope.namespace,
                    label_selector=self.scope.label_selector,
                    timeout_seconds=max(1, round(self.timing.watch_timeout)),
                    inactivity_timeout=self.timing.inactivity_timeout,
                ):
                    kind = line.type
                    if self.log.isEnabledFor(logging.DEBUG):
                        self.log.debug(
                            "watch line", extra={"type": kind, "bytes": len(line.object)}
                        )
                    if kind == "ERROR":
                        error = error_status(line)
                        self.log.info("watch error, relisting", extra={"error": str(error)})
                        if self._expected is not None:
                            self.metrics.resumes.labels(self.kind, "expired").inc()
                        return None
                    if kind == "BOOKMARK":
                        rv = bookmark_rv(line.object)
                        if rv:
                            position = rv
                            self.progress.mark(rv)
                            self._bookmarked(rv)
                    if kind in ("ADDED", "MODIFIED", "DELETED"):
                        action: WatchAction = kind  # type: ignore[assignment]
                        rv = await self._on_event(action, line.object)
                        if rv:
                            position = rv
                    if self._expected and time.monotonic() > self._resume_deadline:
                        # Never expected in practice; a relist settles whatever is missing.
                        self.log.warning(
                            "resumed watch did not deliver every expected change; relisting",
                            extra={"missing": len(self._expected)},
                        )
                        self.metrics.resumes.labels(self.kind, "gave_up").inc()
                        return None
            except KubeError as exc:
                if exc.expired:
                    return None
                self.log.warning("watch failed, resuming", extra={"error": str(exc)})
                await asyncio.sleep(self.timing.retry_delay)
            except msgspec.DecodeError as exc:
                self.log.warning("malformed watch line, resuming", extra={"error": repr(exc)})
                await asyncio.sleep(self.timing.retry_delay)
            except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                self.log.info("watch interrupted, resuming", extra={"error": repr(exc)})
            self.metrics.watch_restarts.labels(self.kind).inc()

    async def _on_event(self, action: WatchAction, raw: msgspec.Raw) -> str:
        """Publish one watch event; returns its resourceVersion (the new watch position)."""
        snapshot = self._decode(raw, action)
        if snapshot is None:
            ident = loose_identity(raw)
            rv = ident.resource_version if ident else ""
            if action == "DELETED":
                # A deletion is never lost: publish whatever identity can be read.
                bare = self.codec.identity_snapshot(raw)
                if bare is not None:
                    await self._emit(action, bare, datetime.now(UTC), rv=rv or None)
            if ident is not None:
                await self._observe_raw(ident, raw, deleted=action == "DELETED")
            if ident is not None and self._expected is not None:
                self._expected.discard((ident.uid, "DELETED" if action == "DELETED" else rv))
                self._check_caught_up()
            return rv
        meta = snapshot.metadata
        await self._observe(snapshot, None, deleted=action == "DELETED")
        await self._emit(action, snapshot, datetime.now(UTC), rv=meta.resource_version)
        if self._expected is not None:
            self._expected.discard(
                (meta.uid, "DELETED" if action == "DELETED" else meta.resource_version)
            )
            self._check_caught_up()
        return meta.resource_version

    async def _observe(self, snapshot: Snapshot, raw: msgspec.Raw | None, *, deleted: bool) -> None:
        if self.observer is not None:
            meta = snapshot.metadata
            await self.observer(meta.uid, meta.namespace, meta.name, snapshot, raw, deleted)

    async def _observe_raw(self, ident: Identity, raw: msgspec.Raw, *, deleted: bool) -> None:
        if self.observer is not None and ident.uid:
            await self.observer(ident.uid, ident.namespace, ident.name, None, raw, deleted)

    def _decode(self, raw: msgspec.Raw, context: str) -> Snapshot | None:
        try:
            return self.codec.decode(raw)
        except msgspec.DecodeError as exc:
            self.metrics.decode_failures.labels(self.kind).inc()
            ident = loose_identity(raw)
            self.log.error(
                "object does not decode into the event snapshot; skipped",
                extra={
                    "resource": self.scope.resource.plural,
                    "object": ident.describe() if ident else "(unreadable metadata)",
                    "namespace": ident.namespace if ident else None,
                    "object_name": ident.name if ident else None,
                    "uid": ident.uid if ident else None,
                    "seen_in": context,
                    "error": str(exc),
                },
            )
            return None

    async def _emit(
        self,
        action: WatchAction,
        snapshot: Snapshot,
        observed: datetime,
        *,
        rv: str | None,
        inferred: bool = False,
    ) -> asyncio.Future[None]:
        event = self.codec.event(action, snapshot, observed_at=observed, inferred=inferred)
        done = await self.publisher.submit(event, progress=self.progress, rv=rv)
        uid = snapshot.metadata.uid
        if action == "DELETED":
            self.known.pop(uid, None)
        else:
            self.known[uid] = snapshot
        return done
