"""The relist rule and the callback informer, on the one list-then-watch loop.

A LIST shows what exists, not what disappeared while nobody watched. So whoever consumes an
informer remembers the last state of every object it reported and, after each relist, reports
a DELETED *tombstone* (the last known state, marked ``inferred``) for every object that
vanished. The tracker relies on that: a missed DELETED would hang a teardown.

* :func:`diff_relist` — the pure rule for what a relist means given what was reported before.
* :class:`Informer` — the callback informer: reports every change of raw JSON to a sink,
  tombstones included (the dispatcher's direct intake, tests), on
  :class:`clearance.listwatch.ListWatch`, which the watcher's informers use directly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import msgspec

from clearance.kube import Kube, Resource
from clearance.listwatch import (
    Action,
    Changed,
    Decoded,
    Identity,
    InformerStats,
    Listed,
    ListWatch,
    Timing,
    loose_meta,
)

log = logging.getLogger(__name__)

T = TypeVar("T")


# ------------------------------------------------------------------------ the relist rule


@dataclass(frozen=True, slots=True)
class Planned(Generic[T]):
    """One change a relist implies."""

    action: Action
    item: Decoded[T]
    inferred: bool = False
    """True for a tombstone: known before, absent from the LIST."""


def diff_relist(known: Mapping[str, Decoded[T]], listed: Iterable[Decoded[T]]) -> list[Planned[T]]:
    """Changes implied by a fresh LIST, given what was reported before it.

    Each listed object is ADDED when unknown, MODIFIED when its resourceVersion moved, and
    nothing when unchanged; each known object missing from the LIST is a DELETED tombstone
    carrying its last known state. Tombstones come first so that, when a name was reused
    during the gap, the old object's DELETED precedes the new object's ADDED on the
    per-name subject. A uid listed twice counts once (its last entry).
    """
    seen: dict[str, Planned[T] | None] = {}
    for item in listed:
        uid = item.meta.uid
        before = known.get(uid)
        if before is None:
            seen[uid] = Planned("ADDED", item)
        elif before.meta.resourceVersion != item.meta.resourceVersion:
            seen[uid] = Planned("MODIFIED", item)
        else:
            seen[uid] = None
    tombstones = [
        Planned("DELETED", before, inferred=True)
        for uid, before in known.items()
        if uid not in seen
    ]
    return tombstones + [change for change in seen.values() if change is not None]


# ---------------------------------------------------------------- the callback informer


@dataclass(frozen=True, slots=True)
class Change:
    """One change to report: the object's raw JSON and its identity."""

    action: Action
    meta: Identity
    raw: msgspec.Raw
    inferred: bool = False
    """True for a tombstone deduced from a relist rather than read from a watch."""


Sink = Callable[[Change], Awaitable[None]]


def decode_raw(raw: msgspec.Raw, where: str) -> Decoded[msgspec.Raw] | None:
    """The decode hook of :class:`Informer`: identity only, the JSON stays raw."""
    meta = loose_meta(raw)
    if meta is None:
        log.error("object with undecodable metadata skipped", extra={"seen_in": where})
        return None
    return Decoded(meta, raw)


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
    known: dict[str, Decoded[msgspec.Raw]] = field(default_factory=dict)
    """Last reported state per UID; seed it to detect deletions that happened while down."""
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    stats: InformerStats = field(default_factory=InformerStats)

    async def run(self, sink: Sink) -> None:
        """Run forever (until cancelled)."""
        stream: ListWatch[msgspec.Raw] = ListWatch(
            self.kube,
            self.resource,
            decode=decode_raw,
            namespace=self.namespace,
            label_selector=self.label_selector,
            timing=Timing(
                watch_timeout=self.watch_timeout,
                inactivity_timeout=self.inactivity_timeout,
                retry_delay=self.retry_delay,
            ),
        )
        stream.stats = self.stats  # one set of counters, shared with the owner
        async with contextlib.aclosing(stream.happenings()) as happenings:
            async for happening in happenings:
                if isinstance(happening, Listed):
                    for planned in diff_relist(self.known, happening.items):
                        item = planned.item
                        await self._report(
                            sink, Change(planned.action, item.meta, item.value, planned.inferred)
                        )
                    self.synced.set()
                elif isinstance(happening, Changed):
                    item = happening.item
                    await self._report(sink, Change(happening.action, item.meta, item.value))

    async def _report(self, sink: Sink, change: Change) -> None:
        await sink(change)
        self.stats.events += 1
        if change.action == "DELETED":
            self.known.pop(change.meta.uid, None)
            if change.inferred:
                self.stats.tombstones += 1
        else:
            self.known[change.meta.uid] = Decoded(change.meta, change.raw)
