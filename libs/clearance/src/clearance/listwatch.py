"""List-then-watch as an async iterator: what happens to one resource, from a starting rv.

A Kubernetes watch can end at any time (EOF, timeout, dropped connection) and can fail with
410 Expired when the server no longer holds the history it is asked to resume from; the only
safe answer to a 410 is a fresh LIST. :class:`ListWatch` hides the first kind of ending and
reports the second: it yields :class:`Listed` (a consistent LIST), :class:`Changed` (a watch
event), :class:`Bookmark` and :class:`Expired` (the watch cannot resume; a :class:`Listed`
follows), resuming from the last resourceVersion it saw after every interruption. Each object
goes through the caller's *decode hook*, which turns raw JSON into the caller's value and its
:class:`Identity`. What a relist means (tombstones for what vanished) is the caller's rule:
:func:`clearance.informing.diff_relist`. Every service's informer is built on this one loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Mapping
from dataclasses import dataclass
from typing import Final, Generic, Literal, TypeVar

import aiohttp
import msgspec

from clearance.kube import Kube, KubeError, ListResult, Resource, error_status

log = logging.getLogger(__name__)

Action = Literal["ADDED", "MODIFIED", "DELETED"]
T = TypeVar("T")

_ACTIONS: Final = frozenset({"ADDED", "MODIFIED", "DELETED"})


class Identity(msgspec.Struct, frozen=True):
    """The identity fields the informer needs from any object (no constraint checking)."""

    uid: str = ""
    name: str = ""
    namespace: str | None = None
    resourceVersion: str = ""  # Kubernetes wire name

    def describe(self) -> str:
        """``ns/name (uid …, rv …)`` for log lines."""
        where = f"{self.namespace}/" if self.namespace else ""
        return f"{where}{self.name} (uid {self.uid or '?'}, rv {self.resourceVersion or '?'})"


class _Envelope(msgspec.Struct, frozen=True):
    metadata: Identity = msgspec.field(default_factory=Identity)


_ENVELOPE: Final = msgspec.json.Decoder(_Envelope)


def meta_of(raw: msgspec.Raw | bytes) -> Identity:
    """Decode only ``metadata`` identity fields from raw object JSON (raises DecodeError)."""
    return _ENVELOPE.decode(raw).metadata


def loose_meta(raw: msgspec.Raw | bytes) -> Identity | None:
    """:func:`meta_of`, or None when not even the identity fields decode."""
    try:
        return meta_of(raw)
    except msgspec.DecodeError:
        return None


# ------------------------------------------------------------------------ what happens


@dataclass(frozen=True, slots=True)
class Decoded(Generic[T]):
    """One object as the decode hook made it: its identity and the caller's value."""

    meta: Identity
    value: T


Decode = Callable[[msgspec.Raw, str], Decoded[T] | None]
"""The decode hook: (raw object JSON, where it was seen: ``LIST`` or the watch action) → the
decoded object, or None to skip it (the hook logs why; :class:`ListWatch` counts it)."""


@dataclass(frozen=True, slots=True)
class Listed(Generic[T]):
    """A consistent LIST: every object that exists, and the collection's resourceVersion."""

    resource_version: str
    items: list[Decoded[T]]


@dataclass(frozen=True, slots=True)
class Changed(Generic[T]):
    """One ADDED / MODIFIED / DELETED watch event."""

    action: Action
    item: Decoded[T]


@dataclass(frozen=True, slots=True)
class Bookmark:
    """The server says: everything up to this resourceVersion has been delivered."""

    resource_version: str


@dataclass(frozen=True, slots=True)
class Expired:
    """The watch cannot resume from its position; a :class:`Listed` comes next.

    ``reason``: ``expired`` (410 Expired, as a response or as an ERROR watch event), ``error``
    (any other ERROR watch event) or ``requested`` (the consumer called
    :meth:`ListWatch.relist`).
    """

    reason: Literal["expired", "error", "requested"]
    detail: str = ""


Happening = Listed[T] | Changed[T] | Bookmark | Expired


@dataclass(frozen=True, slots=True)
class Timing:
    """How one informer talks to the API server."""

    watch_timeout: float = 300.0
    """Server-side ``timeoutSeconds`` of one watch request; the watch resumes after it."""
    inactivity_timeout: float = 90.0
    """Reconnect when no event or bookmark arrived for this long (bookmarks come every ~60 s)."""
    retry_delay: float = 1.0
    """Pause before retrying a failed watch; the first pause before retrying a failed LIST."""
    max_retry_delay: float = 30.0
    """Cap of the exponential backoff between failed LISTs."""


@dataclass
class InformerStats:
    """Counters the owning service may export as metrics."""

    relists: int = 0
    watch_restarts: int = 0
    tombstones: int = 0
    events: int = 0
    undecodable: int = 0


@dataclass(frozen=True, slots=True)
class _Moved:
    """A skipped event's resourceVersion: the watch resumes after it."""

    resource_version: str


class _Bookmark(msgspec.Struct, frozen=True):
    metadata: Identity = msgspec.field(default_factory=Identity)


_BOOKMARK: Final = msgspec.json.Decoder(_Bookmark)


def bookmark_rv(raw: bytes | msgspec.Raw) -> str:
    """resourceVersion carried by a BOOKMARK (``""`` when absent or malformed)."""
    try:
        return _BOOKMARK.decode(raw).metadata.resourceVersion
    except msgspec.DecodeError:
        return ""


class ListWatch(Generic[T]):
    """What happens to one resource, as an async iterator (see :meth:`happenings`)."""

    def __init__(
        self,
        kube: Kube,
        resource: Resource,
        *,
        decode: Decode[T],
        namespace: str | None = None,
        label_selector: str | None = None,
        timing: Timing | None = None,
        on_watch_restart: Callable[[], None] | None = None,
        log_extra: Mapping[str, object] | None = None,
    ) -> None:
        self.kube = kube
        self.resource = resource
        self.decode = decode
        self.namespace = namespace
        self.label_selector = label_selector
        self.timing = timing or Timing()
        self.on_watch_restart = on_watch_restart
        self.stats = InformerStats()
        self._extra = dict(log_extra or {"resource": resource.plural})
        self._relist_wanted = False

    def relist(self) -> None:
        """End the current watch at the next line: :class:`Expired` (requested), then a LIST."""
        self._relist_wanted = True

    async def list_raw(self) -> ListResult:
        """A consistent LIST, retried with capped exponential backoff until it works."""
        failures = 0
        while True:
            try:
                return await self.kube.list(
                    self.resource, namespace=self.namespace, label_selector=self.label_selector
                )
            except KubeError as exc:
                failures += 1
                pause = min(
                    self.timing.retry_delay * 2 ** (failures - 1), self.timing.max_retry_delay
                )
                log.warning(
                    "list failed, retrying",
                    extra={
                        **self._extra,
                        "error": str(exc),
                        "failures": failures,
                        "retry_in": pause,
                    },
                )
                await asyncio.sleep(pause)

    async def list(self) -> Listed[T]:
        """A consistent LIST through the decode hook."""
        result = await self.list_raw()
        self.stats.relists += 1
        items = []
        for raw in result.items:
            decoded = self._decode(raw, "LIST")
            if decoded is not None:
                items.append(decoded)
        return Listed(result.resource_version, items)

    def _decode(self, raw: msgspec.Raw, where: str) -> Decoded[T] | None:
        decoded = self.decode(raw, where)
        if decoded is None:
            self.stats.undecodable += 1
        return decoded

    async def happenings(self, start: str | None = None) -> AsyncGenerator[Happening[T], None]:
        """Watch from ``start`` (None: LIST first), forever; relist after each :class:`Expired`.

        Close the iterator (``contextlib.aclosing``) to stop; it holds a watch connection.
        """
        position = start
        while True:
            if position is None:
                self._relist_wanted = False
                listed = await self.list()
                position = listed.resource_version
                yield listed
            expired: Expired | None = None
            while expired is None:
                try:
                    async with contextlib.aclosing(self._watch(position)) as lines:
                        async for happening in lines:
                            if isinstance(happening, Expired):
                                expired = happening
                                break
                            if isinstance(happening, _Moved):
                                position = happening.resource_version
                                continue
                            position = (
                                happening.resource_version
                                if isinstance(happening, Bookmark)
                                else happening.item.meta.resourceVersion or position
                            )
                            yield happening
                            if self._relist_wanted:
                                expired = Expired("requested")
                                break
                    if expired is not None:
                        break
                except KubeError as exc:
                    if exc.expired:
                        expired = Expired("expired", str(exc))
                        break
                    log.warning("watch failed, resuming", extra={**self._extra, "error": str(exc)})
                    await asyncio.sleep(self.timing.retry_delay)
                except msgspec.DecodeError as exc:
                    log.warning(
                        "malformed watch line, resuming", extra={**self._extra, "error": repr(exc)}
                    )
                    await asyncio.sleep(self.timing.retry_delay)
                except (TimeoutError, OSError, aiohttp.ClientError) as exc:
                    if _being_cancelled():
                        # A client timeout that fired with our cancellation turned it into
                        # TimeoutError: resuming would keep a stopped informer watching forever.
                        raise asyncio.CancelledError from exc
                    log.info(
                        "watch interrupted, resuming", extra={**self._extra, "error": repr(exc)}
                    )
                self.stats.watch_restarts += 1
                if self.on_watch_restart is not None:
                    self.on_watch_restart()
            log.info(
                "watch cannot resume, relisting",
                extra={**self._extra, "reason": expired.reason, "error": expired.detail},
            )
            yield expired
            position = None

    async def _watch(
        self, position: str
    ) -> AsyncGenerator[Changed[T] | Bookmark | Expired | _Moved, None]:
        """One watch request: its events and bookmarks, an ERROR as Expired, and a
        :class:`_Moved` for an event the hook skipped (the position still moves past it)."""
        lines = self.kube.watch(
            self.resource,
            resource_version=position,
            namespace=self.namespace,
            label_selector=self.label_selector,
            timeout_seconds=max(1, round(self.timing.watch_timeout)),
            inactivity_timeout=self.timing.inactivity_timeout,
        )
        async with contextlib.aclosing(lines):
            async for line in lines:
                kind = line.type
                if kind == "ERROR":
                    error = error_status(line)
                    yield Expired("expired" if error.expired else "error", str(error))
                    return
                if kind == "BOOKMARK":
                    rv = bookmark_rv(line.object)
                    if rv:
                        yield Bookmark(rv)
                elif kind in _ACTIONS:
                    decoded = self._decode(line.object, kind)
                    if decoded is None:
                        meta = loose_meta(line.object)
                        if meta is not None and meta.resourceVersion:
                            yield _Moved(meta.resourceVersion)
                        continue
                    action: Action = kind  # type: ignore[assignment]
                    yield Changed(action, decoded)


def _being_cancelled() -> bool:
    """Has someone asked the current task to stop (even if the request was swallowed)?"""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
