"""List-then-watch that never loses a deletion.

A Kubernetes watch can end at any time (EOF, timeout, dropped connection) and can fail with
410 Expired when the server no longer holds the history we ask to resume from. The only safe
answer to a 410 is a fresh LIST, and a LIST shows what exists, not what disappeared in the gap.
So the informer remembers the last state of every object it reported and, after each relist,
reports a DELETED *tombstone* (the last known state, marked ``inferred``) for every object that
vanished. The tracker relies on that: a missed DELETED would hang a teardown.

The decision logic (what a relist means) is the pure function :func:`diff_relist`; the loop in
:class:`Informer` only does I/O and bookkeeping around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Literal

import aiohttp
import msgspec

from clearance.kube import Kube, KubeError, Resource, error_status

log = logging.getLogger(__name__)

Action = Literal["ADDED", "MODIFIED", "DELETED"]


class ObjectMeta(msgspec.Struct, frozen=True):
    """The identity fields the informer needs from any object."""

    uid: str = ""
    name: str = ""
    namespace: str | None = None
    resourceVersion: str = ""  # Kubernetes wire name


class _Envelope(msgspec.Struct, frozen=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)


def meta_of(raw: msgspec.Raw | bytes) -> ObjectMeta:
    """Decode only ``metadata`` identity fields from raw object JSON."""
    return _ENVELOPE.decode(raw).metadata


@dataclass(frozen=True, slots=True)
class Change:
    """One change to report: the object's raw JSON and its identity."""

    action: Action
    meta: ObjectMeta
    raw: msgspec.Raw
    inferred: bool = False
    """True for a tombstone deduced from a relist rather than read from a watch."""


@dataclass(frozen=True, slots=True)
class Known:
    """What the informer last reported about one object (by UID)."""

    meta: ObjectMeta
    raw: msgspec.Raw


def diff_relist(known: Mapping[str, Known], listed: Iterable[msgspec.Raw]) -> list[Change]:
    """Changes implied by a fresh LIST, given what was reported before it.

    Tombstones come first so that, when a name was reused during the gap, the old object's
    DELETED precedes the new object's ADDED on the per-name subject.
    """
    seen: dict[str, Change | None] = {}
    for raw in listed:
        meta = meta_of(raw)
        before = known.get(meta.uid)
        if before is None:
            seen[meta.uid] = Change("ADDED", meta, raw)
        elif before.meta.resourceVersion != meta.resourceVersion:
            seen[meta.uid] = Change("MODIFIED", meta, raw)
        else:
            seen[meta.uid] = None
    tombstones = [
        Change("DELETED", k.meta, k.raw, inferred=True)
        for uid, k in known.items()
        if uid not in seen
    ]
    return tombstones + [c for c in seen.values() if c is not None]


Sink = Callable[[Change], Awaitable[None]]


@dataclass
class InformerStats:
    """Counters the owning service exports as metrics."""

    relists: int = 0
    watch_restarts: int = 0
    tombstones: int = 0
    events: int = 0
    undecodable: int = 0


@dataclass
class Informer:
    """Reports every change of one resource (optionally filtered) to ``sink``, in order.

    The sink is awaited for every change before the next one is read, so a slow sink slows
    the watch instead of growing memory. ``synced`` is set once the first LIST was reported.
    """

    kube: Kube
    resource: Resource
    namespace: str | None = None
    label_selector: str | None = None
    watch_timeout: int = 300
    """Server-side ``timeoutSeconds`` of one watch request; the informer resumes after it."""
    inactivity_timeout: float = 90.0
    """Reconnect when no event or bookmark arrived for this long (bookmarks come every ~60 s)."""
    retry_delay: float = 1.0
    """Pause before retrying after the API server failed or was unreachable."""
    known: dict[str, Known] = field(default_factory=dict)
    """Last reported state per UID; seed it to detect deletions that happened while down."""
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    stats: InformerStats = field(default_factory=InformerStats)

    async def run(self, sink: Sink) -> None:
        """Run forever (until cancelled)."""
        while True:
            try:
                resource_version = await self._relist(sink)
            except KubeError as exc:
                log.warning(
                    "list failed, retrying",
                    extra={"resource": self.resource.plural, "error": str(exc)},
                )
                await asyncio.sleep(self.retry_delay)
                continue
            await self._watch_until_expired(sink, resource_version)

    async def _relist(self, sink: Sink) -> str:
        result = await self.kube.list(
            self.resource, namespace=self.namespace, label_selector=self.label_selector
        )
        self.stats.relists += 1
        for change in diff_relist(self.known, result.items):
            await self._report(sink, change)
        self.synced.set()
        return result.resource_version

    async def _watch_until_expired(self, sink: Sink, resource_version: str) -> None:
        """Watch and resume from the last resourceVersion until the server says 410."""
        while True:
            try:
                async for line in self.kube.watch(
                    self.resource,
                    resource_version=resource_version,
                    namespace=self.namespace,
                    label_selector=self.label_selector,
                    timeout_seconds=self.watch_timeout,
                    inactivity_timeout=self.inactivity_timeout,
                ):
                    if line.type == "ERROR":
                        error = error_status(line)
                        log.info(
                            "watch error, relisting",
                            extra={"resource": self.resource.plural, "error": str(error)},
                        )
                        return
                    try:
                        meta = meta_of(line.object)
                    except msgspec.DecodeError as exc:
                        # One malformed object must not stall the stream: skip it, loudly.
                        self.stats.undecodable += 1
                        log.error(
                            "watch event with undecodable metadata skipped",
                            extra={"resource": self.resource.plural, "error": str(exc)},
                        )
                        continue
                    if meta.resourceVersion:
                        resource_version = meta.resourceVersion
                    if line.type == "BOOKMARK":
                        continue
                    if line.type in ("ADDED", "MODIFIED", "DELETED"):
                        action: Action = line.type  # type: ignore[assignment]
                        await self._report(sink, Change(action, meta, line.object))
            except KubeError as exc:
                if exc.expired:
                    return
                log.warning(
                    "watch failed, resuming",
                    extra={"resource": self.resource.plural, "error": str(exc)},
                )
                await asyncio.sleep(self.retry_delay)
            except (TimeoutError, OSError, aiohttp.ClientError, msgspec.DecodeError) as exc:
                log.info(
                    "watch interrupted, resuming",
                    extra={"resource": self.resource.plural, "error": repr(exc)},
                )
            self.stats.watch_restarts += 1

    async def _report(self, sink: Sink, change: Change) -> None:
        await sink(change)
        self.stats.events += 1
        if change.action == "DELETED":
            self.known.pop(change.meta.uid, None)
            if change.inferred:
                self.stats.tombstones += 1
        else:
            self.known[change.meta.uid] = Known(change.meta, change.raw)


async def cancel_quietly(task: asyncio.Task[None]) -> None:
    """Cancel a task and wait for it, swallowing its cancellation."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
