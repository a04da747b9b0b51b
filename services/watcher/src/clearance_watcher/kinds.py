"""Wrapped kinds: informers that come and go with the kinds AppWrappers wrap.

An AppWrapper's generic items can be of any kind (Job, PyTorchJob, Service, ...). The
watcher follows the set of kinds named by the AppWrappers it sees, maps each
apiVersion+kind to a REST resource through the shared API discovery
(:class:`clearance.discovery.Discovery`), and runs one informer per kind (and namespace)
selecting objects that carry the AppWrapper label.

* A kind the API server does not serve is logged with the AppWrapper that names it and
  counted; discovery is asked again every ``discovery_retry`` (the CRD may come later).
  It never stops anything else.
* An informer whose kind no AppWrapper names any more keeps running while it still
  knows objects of that kind (their DELETED events come after the AppWrapper's, through
  garbage collection), for at most ``kind_linger``; it stops at once when it knows none.
* At a takeover, kinds with live items in the stream are watched too, even if no
  AppWrapper names them any more, so items deleted meanwhile get their tombstones.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import msgspec

from clearance.discovery import Discovery
from clearance.events import AppWrapperObject
from clearance.kube import KubeError, Resource
from clearance.tasks import wait_set
from clearance_watcher.metrics import WatcherMetrics

log = logging.getLogger(__name__)

KindKey = tuple[str, str]
"""(apiVersion, kind)."""

WATCHED_AS_PODS: frozenset[KindKey] = frozenset({("v1", "Pod")})
"""Wrapped kinds that get no item informer: a wrapped Pod carries the AppWrapper label, so
the session's pod informer (same namespaces, same selector) already publishes every change
of it, on its ``pod`` subject and with its status. A second watch published each change
twice, and the tracker consumed both (docs/DECISIONS.md, "A wrapped Pod is published once")."""


# -- what an AppWrapper wraps --------------------------------------------------------------


class _LooseAppWrapper(msgspec.Struct):
    spec: Any = None


@dataclass(frozen=True)
class Wrapped:
    """The kinds one AppWrapper names, and what was wrong with the items that name none."""

    kinds: frozenset[KindKey]
    problems: tuple[str, ...] = ()


def _kinds_from_items(items: Iterable[Any]) -> Wrapped:
    kinds: set[KindKey] = set()
    problems: list[str] = []
    for index, item in enumerate(items):
        template = item.get("generictemplate") if isinstance(item, dict) else None
        if not isinstance(template, dict):
            problems.append(f"GenericItems[{index}] has no generictemplate object")
            continue
        api_version, kind = template.get("apiVersion"), template.get("kind")
        if (
            not isinstance(api_version, str)
            or not api_version
            or not isinstance(kind, str)
            or not kind
        ):
            problems.append(f"GenericItems[{index}].generictemplate lacks apiVersion/kind")
            continue
        kinds.add((api_version, kind))
    return Wrapped(frozenset(kinds), tuple(problems))


def wrapped_by(snapshot: AppWrapperObject) -> Wrapped:
    """Kinds named by the generic items of a decoded AppWrapper."""
    return _kinds_from_items(snapshot.spec.resources.generic_items)


def wrapped_by_raw(raw: bytes | msgspec.Raw) -> Wrapped:
    """Kinds named by an AppWrapper that did not decode into the snapshot struct."""
    try:
        loose = msgspec.json.decode(raw, type=_LooseAppWrapper)
    except msgspec.DecodeError as exc:
        return Wrapped(frozenset(), (f"not JSON: {exc}",))
    spec = loose.spec if isinstance(loose.spec, dict) else {}
    resources = spec.get("resources") if isinstance(spec.get("resources"), dict) else {}
    assert isinstance(resources, dict)
    items = resources.get("GenericItems")
    if not isinstance(items, list):
        return Wrapped(frozenset(), ())
    return _kinds_from_items(items)


# -- the dynamic set of informers ----------------------------------------------------------

Starter = Callable[[Resource], Awaitable["Running"]]


class Running:
    """What :class:`KindInformers` needs from the informers it runs for one kind."""

    def __init__(
        self,
        *,
        known_count: Callable[[], int],
        synced: Callable[[], Awaitable[None]],
        is_synced: Callable[[], bool],
        stop: Callable[[], Awaitable[None]],
    ) -> None:
        self.known_count = known_count
        self.synced = synced
        self.is_synced = is_synced
        self.stop = stop


@dataclass
class _Reference:
    namespace: str | None
    name: str
    kinds: frozenset[KindKey]


@dataclass
class KindInformers:
    """Keeps one running informer set per wrapped kind that needs watching."""

    discovery: Discovery
    start: Starter
    metrics: WatcherMetrics
    linger: float
    retry: float
    clock: Callable[[], float] = time.monotonic
    references: dict[str, _Reference] = field(default_factory=dict)
    running: dict[KindKey, Running] = field(default_factory=dict)
    unreferenced_since: dict[KindKey, float] = field(default_factory=dict)
    unserved: dict[KindKey, float] = field(default_factory=dict)
    pinned: set[KindKey] = field(default_factory=set)
    """Kinds with live items at takeover: watched until their first relist settles them."""
    _reported: set[tuple[str, KindKey]] = field(default_factory=set)
    sync_timeout: float = 30.0
    """Longest wait for a new kind's first LIST before its AppWrapper is published."""
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    # -- input from the AppWrapper informer ------------------------------------------

    async def observe(
        self,
        *,
        uid: str,
        namespace: str | None,
        name: str,
        snapshot: AppWrapperObject | None,
        raw: bytes | msgspec.Raw | None,
        deleted: bool,
    ) -> None:
        if deleted:
            if self.references.pop(uid, None) is not None:
                self._wake.set()
            self._reported = {(u, k) for u, k in self._reported if u != uid}
            return
        if snapshot is not None:
            wrapped = wrapped_by(snapshot)
        elif raw is not None:
            wrapped = wrapped_by_raw(raw)
        else:
            return
        for problem in wrapped.problems:
            log.warning(
                "AppWrapper has a generic item without a usable kind",
                extra={"namespace": namespace, "appwrapper": name, "problem": problem},
            )
        kinds = wrapped.kinds - WATCHED_AS_PODS
        before = self.references.get(uid)
        self.references[uid] = _Reference(namespace, name, kinds)
        if before is None or before.kinds != kinds:
            self._wake.set()
            new = set(kinds) - set(self.running)
            if new:
                await self._ensure_watched(new)

    async def _ensure_watched(self, keys: set[KindKey]) -> None:
        """Start informers for ``keys`` now and wait (bounded) for their first LIST.

        Called before the AppWrapper's event is published: whoever creates items in
        response to that event (the dispatcher) creates them under a running watch, so
        not even an item created and deleted at once goes unseen.
        """
        async with self._lock:
            now = self.clock()
            for key in sorted(keys):
                if key in self.running:
                    continue
                last_try = self.unserved.get(key)
                if last_try is not None and now - last_try < self.retry:
                    continue
                await self._start(key, now)
            self.metrics.unserved_kinds.set(len(self.unserved))
            started = [self.running[key] for key in keys if key in self.running]
        if not started:
            return
        try:
            await asyncio.wait_for(
                asyncio.gather(*(r.synced() for r in started)), self.sync_timeout
            )
        except TimeoutError:
            log.warning(
                "wrapped-kind informers not synced in time; publishing the AppWrapper anyway",
                extra={"kinds": sorted(f"{k[0]}/{k[1]}" for k in keys)},
            )

    def wanted(self) -> set[KindKey]:
        kinds: set[KindKey] = set(self.pinned)
        for ref in self.references.values():
            kinds |= ref.kinds
        return kinds - WATCHED_AS_PODS

    # -- reconciliation --------------------------------------------------------------

    async def reconcile(self) -> None:
        """Start what is wanted and served, stop what is neither wanted nor busy."""
        async with self._lock:
            await self._reconcile()

    async def _reconcile(self) -> None:
        for key in list(self.pinned):
            running = self.running.get(key)
            if running is not None and running.is_synced():
                self.pinned.discard(key)  # its relist settled what vanished meanwhile
        wanted = self.wanted()
        now = self.clock()
        for key in sorted(wanted - set(self.running)):
            last_try = self.unserved.get(key)
            if last_try is not None and now - last_try < self.retry:
                continue
            await self._start(key, now)
        for key, running in list(self.running.items()):
            if key in wanted:
                self.unreferenced_since.pop(key, None)
                continue
            since = self.unreferenced_since.setdefault(key, now)
            if running.known_count() == 0 or now - since >= self.linger:
                if running.known_count():
                    log.warning(
                        "stopping the informer of a kind no AppWrapper names any more; "
                        "its remaining objects are no longer watched",
                        extra={
                            "api_version": key[0],
                            "kind": key[1],
                            "known": running.known_count(),
                        },
                    )
                else:
                    log.info(
                        "stopping the informer of a kind no AppWrapper names any more",
                        extra={"api_version": key[0], "kind": key[1]},
                    )
                del self.running[key]
                self.unreferenced_since.pop(key, None)
                await running.stop()
        for key in list(self.unserved):
            if key not in wanted:
                del self.unserved[key]
        self.metrics.unserved_kinds.set(len(self.unserved))

    async def _start(self, key: KindKey, now: float) -> None:
        api_version, kind = key
        try:
            resource = await self.discovery.find(api_version, kind)
        except KubeError as exc:
            log.warning(
                "discovery failed; will retry",
                extra={"api_version": api_version, "kind": kind, "error": str(exc)},
            )
            self.unserved[key] = now
            return
        if resource is None:
            self.unserved[key] = now
            self._report_unserved(key)
            return
        self.unserved.pop(key, None)
        log.info(
            "watching wrapped kind",
            extra={"api_version": api_version, "kind": kind, "resource": resource.plural},
        )
        self.running[key] = await self.start(resource)

    def _report_unserved(self, key: KindKey) -> None:
        api_version, kind = key
        for uid, ref in self.references.items():
            if key not in ref.kinds or (uid, key) in self._reported:
                continue
            self._reported.add((uid, key))
            self.metrics.unserved_reports.inc()
            log.warning(
                "AppWrapper names a kind the API server does not serve; its items cannot be "
                "watched (other kinds are unaffected)",
                extra={
                    "namespace": ref.namespace,
                    "appwrapper": ref.name,
                    "uid": uid,
                    "api_version": api_version,
                    "kind": kind,
                },
            )

    async def run(self, *, period: float) -> None:
        """Reconcile on every change, and every ``period`` for retries and lingering."""
        while True:
            self._wake.clear()
            await self.reconcile()
            await wait_set(self._wake, timeout=period)

    async def stop_all(self) -> None:
        running, self.running = self.running, {}
        await asyncio.gather(*(r.stop() for r in running.values()), return_exceptions=True)

    async def all_synced(self) -> None:
        await asyncio.gather(*(r.synced() for r in list(self.running.values())))
