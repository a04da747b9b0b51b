"""Publishing kube events to CLEARANCE_KUBE: ordered per object, bounded, never dropped.

* **Per-object order.** Events are chained per subject (= per object name): an event is
  sent only after the previous event on its subject was acknowledged. Retries therefore
  cannot reorder one object's history, and a tombstone always precedes the ADDED of a new
  object that reuses the name. Different subjects are published concurrently.
* **Bounded memory.** At most ``max_in_flight`` events are accepted and not yet
  acknowledged; :meth:`Publisher.submit` waits for a free slot, and the informers await
  it, so a slow NATS slows the watches instead of growing a queue.
* **Never dropped.** Each publish goes through :func:`clearance.bus.publish` (same
  ``Nats-Msg-Id`` on every retry, stream re-provisioned if lost); when that gives up the
  watcher waits and tries again, for as long as it runs. Only an event NATS can never
  accept (above the server's max payload) is trimmed, and dropped only if trimming
  cannot save it, with an error log naming the object.
* **Resume position.** Each informer owns a :class:`Progress`: the resourceVersion up to
  which *every* one of its events is acknowledged. It travels in the headers of every
  event (``Clearance-Watch-Key``/``Clearance-Watch-Resume``), so a successor reads from
  the stream itself where the watch can resume without losing a MODIFIED.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec
import nats.errors
from nats.js import JetStreamContext
from opentelemetry.trace import Tracer

from clearance import bus, labels
from clearance.events import (
    AppWrapperObject,
    KubeAppWrapperEvent,
    KubeEvent,
    NodeObject,
    PodObject,
    SnapshotProblem,
)
from clearance.telemetry import ContextLogger, context_from_traceparent
from clearance_watcher.cycles import CycleIndex
from clearance_watcher.decoding import Snapshot, encode_event
from clearance_watcher.metrics import WatcherMetrics

log = ContextLogger(logging.getLogger(__name__))

WATCH_KEY_HEADER: Final = "Clearance-Watch-Key"
"""Which informer published the event (resource and namespace scope)."""
WATCH_RESUME_HEADER: Final = "Clearance-Watch-Resume"
"""resourceVersion up to which every event of that informer was acknowledged."""

_KEEP_LABELS: Final = frozenset(
    {labels.MCAD_APPWRAPPER, labels.CODEFLARE_APPWRAPPER, labels.NAMESPACE, labels.ATTEMPT}
)


def identity_only(obj: Snapshot) -> Snapshot:
    """The same object with nothing but identity (kind, apiVersion, metadata)."""
    if isinstance(obj, PodObject):
        return PodObject(metadata=obj.metadata)
    if isinstance(obj, NodeObject):
        return NodeObject(metadata=obj.metadata)
    if isinstance(obj, AppWrapperObject):
        return AppWrapperObject(metadata=obj.metadata, kind=obj.kind, api_version=obj.api_version)
    return obj


def _reduced(event: KubeEvent, obj: Snapshot, message: str, dropped: tuple[str, ...]) -> KubeEvent:
    """``event`` carrying the reduced ``obj``, its ``problem`` saying what was left out."""
    before = event.problem
    if before is None:
        problem = SnapshotProblem(message=message, path="$", dropped=dropped)
    else:  # already partial: keep what failed first, add what the reduction left out
        problem = msgspec.structs.replace(before, dropped=(*before.dropped, *dropped))
    return msgspec.structs.replace(event, object=obj, problem=problem)


class Progress:
    """The acknowledged prefix of one informer's event sequence.

    Entries are appended in the informer's order; ``rv`` is None for events that do not
    move the watch position (relist results, tombstones), and a marker with a done
    future moves it without an event (end of a LIST, a bookmark).
    """

    def __init__(self, key: str, resume: str | None = None) -> None:
        self.key = key
        self._committed = resume
        self._entries: deque[tuple[str | None, asyncio.Future[None]]] = deque()

    @property
    def committed(self) -> str | None:
        entries = self._entries
        # A cancelled publish (abandoned at shutdown) was not acknowledged: it stops the prefix.
        while entries and entries[0][1].done() and not entries[0][1].cancelled():
            rv, _ = entries.popleft()
            if rv is not None:
                self._committed = rv
        return self._committed

    def track(self, rv: str | None, done: asyncio.Future[None]) -> None:
        self._entries.append((rv, done))

    def mark(self, rv: str) -> None:
        """Move the position to ``rv`` once everything tracked so far is acknowledged."""
        if not rv:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        if self._entries:
            self._entries.append((rv, done))
        else:
            self._committed = rv

    def headers(self) -> dict[str, str]:
        committed = self.committed
        out = {WATCH_KEY_HEADER: self.key}
        if committed:
            out[WATCH_RESUME_HEADER] = committed
        return out


@dataclass
class _Pending:
    event: KubeEvent
    progress: Progress
    submitted: float
    done: asyncio.Future[None] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Publisher:
    """Publishes kube events with per-subject order and at most ``max_in_flight`` pending."""

    def __init__(
        self,
        js: JetStreamContext,
        *,
        max_in_flight: int,
        publish_timeout: float,
        metrics: WatcherMetrics,
        bus_metrics: bus.BusMetrics | None = None,
        tracer: Tracer | None = None,
        cycle_tracer: Tracer | None = None,
        retry_pause: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.js = js
        self.max_in_flight = max_in_flight
        self.publish_timeout = publish_timeout
        self.metrics = metrics
        self.bus_metrics = bus_metrics
        self.tracer = tracer
        self.cycle_tracer = cycle_tracer
        self.cycles = CycleIndex()
        self.retry_pause = retry_pause
        self.clock = clock
        self._slots = asyncio.Semaphore(max_in_flight)
        self._tails: dict[str, asyncio.Future[None]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._pending: dict[int, _Pending] = {}
        self._closing = False

    @property
    def in_flight(self) -> int:
        return len(self._tasks)

    def oldest_pending_age(self) -> float:
        if not self._pending:
            return 0.0
        now = self.clock()
        return max(0.0, now - min(p.submitted for p in self._pending.values()))

    async def submit(
        self, event: KubeEvent, *, progress: Progress, rv: str | None
    ) -> asyncio.Future[None]:
        """Queue ``event`` behind its subject; returns the future of its acknowledgement.

        Waits while ``max_in_flight`` events are pending (backpressure). ``rv`` is the
        watch position this event stands for (None for relist results and tombstones).
        """
        await self._slots.acquire()
        return self._enqueue(event, progress, rv)

    async def submit_current(
        self, current: Callable[[], KubeEvent | None], *, progress: Progress
    ) -> asyncio.Future[None] | None:
        """Queue the event ``current()`` returns once a slot is free (None: nothing to send).

        ``current`` runs right after the slot is taken, with no await in between, so it
        sees the informer's latest state: a re-announcement can never overtake, on its
        subject, a newer event the informer queued while this one waited for a slot.
        """
        await self._slots.acquire()
        event = current()
        if event is None:
            self._slots.release()
            return None
        return self._enqueue(event, progress, None)

    def _enqueue(
        self, event: KubeEvent, progress: Progress, rv: str | None
    ) -> asyncio.Future[None]:
        subject = event.subject()
        if isinstance(event, KubeAppWrapperEvent):
            self.cycles.observe(event)
        pending = _Pending(event, progress, self.clock())
        previous = self._tails.get(subject)
        self._tails[subject] = pending.done
        progress.track(rv, pending.done)
        task = asyncio.create_task(self._run(subject, pending, previous))
        self._tasks.add(task)
        self._pending[id(pending)] = pending
        task.add_done_callback(lambda t: self._finished(t, subject, pending))
        self.metrics.in_flight.set(len(self._tasks))
        return pending.done

    def _finished(self, task: asyncio.Task[None], subject: str, pending: _Pending) -> None:
        self._tasks.discard(task)
        self._pending.pop(id(pending), None)
        self._slots.release()
        if self._tails.get(subject) is pending.done:
            del self._tails[subject]
        if not pending.done.done():
            # Cancelled (shutdown): successors on the subject must not wait forever.
            pending.done.cancel()
        self.metrics.in_flight.set(len(self._tasks))

    async def _run(
        self, subject: str, pending: _Pending, previous: asyncio.Future[None] | None
    ) -> None:
        if previous is not None and not previous.done():
            await asyncio.wait([previous])
        event = pending.event
        data = encode_event(event)
        await self._publish(subject, event, data, pending.progress)
        now = self.clock()
        self.metrics.publish_latency.observe(now - pending.submitted)
        self.metrics.events.labels(event.kube_kind, event.action).inc()
        if event.problem is not None:
            self.metrics.partial_events.labels(event.kube_kind).inc()
        lag = time.time() - event.observed_at.timestamp()
        self.metrics.lag.observe(max(0.0, lag))
        pending.done.set_result(None)

    async def _publish(
        self, subject: str, event: KubeEvent, data: bytes, progress: Progress
    ) -> None:
        msg_id = event.msg_id()
        tracer, parent, span_name = self.tracer, None, None
        cycle = self.cycles.cycle_for(event)
        if cycle is not None and self.cycle_tracer is not None:
            # A deletion the tracker waits for: publish it inside the cycle's trace.
            tracer = self.cycle_tracer
            parent = context_from_traceparent(cycle.traceparent)
            span_name = f"observe {event.kube_kind} {event.action.lower()}"
        rounds = 0
        while True:
            try:
                await bus.publish(
                    self.js,
                    subject,
                    data,
                    msg_id=msg_id,
                    headers=progress.headers(),
                    tracer=tracer,
                    parent=parent,
                    span_name=span_name,
                    metrics=self.bus_metrics,
                    timeout=self.publish_timeout,
                    event_type=event.event_type,
                )
                return
            except nats.errors.MaxPayloadError:
                smaller = self._shrink(event, data)
                if smaller is None:
                    return
                event, data = smaller
            except (bus.PublishError, nats.errors.Error, TimeoutError) as exc:
                rounds += 1
                self.metrics.publish_stalls.inc()
                log.warning(
                    "publish keeps failing; retrying with the same msg id",
                    extra={
                        "subject": subject,
                        "msg_id": msg_id,
                        "rounds": rounds,
                        "error": f"{type(exc).__name__}: {exc}",
                    },
                )
                await asyncio.sleep(min(self.retry_pause * rounds, 10.0))

    def _shrink(self, event: KubeEvent, data: bytes) -> tuple[KubeEvent, bytes] | None:
        """Fit an event above the NATS max payload: drop foreign labels, then all but identity.

        An ADDED/MODIFIED AppWrapper cannot lose its spec (the dispatcher acts on it), so
        it is dropped with an error instead; a DELETED is always kept, as identity at least.
        """
        obj = event.object
        meta = obj.metadata
        who = {
            "kind": event.kube_kind,
            "action": event.action,
            "namespace": meta.namespace,
            "object_name": meta.name,
            "uid": meta.uid,
            "bytes": len(data),
        }
        smaller: KubeEvent | None = None
        outcome = ""
        too_large = f"event of {len(data)} bytes is above the NATS max payload"
        if any(key not in _KEEP_LABELS for key in meta.labels):
            kept = {k: v for k, v in meta.labels.items() if k in _KEEP_LABELS}
            trimmed = msgspec.structs.replace(meta, labels=kept)
            smaller = _reduced(
                event,
                msgspec.structs.replace(obj, metadata=trimmed),
                f"{too_large}: labels not set by Clearance or MCAD dropped",
                ("$.metadata.labels",),
            )
            outcome = "trimmed"
        elif event.action == "DELETED" or event.kube_kind in ("pod", "node"):
            bare = identity_only(obj)
            if bare is not obj:
                smaller = _reduced(
                    event,
                    bare,
                    f"{too_large}: only its identity is published",
                    ("$.spec", "$.status"),
                )
                outcome = "identity"
        if smaller is not None:
            encoded = encode_event(smaller)
            if len(encoded) < len(data):
                log.warning(
                    "event above the NATS max payload; publishing a reduced snapshot",
                    extra={**who, "reduced_to": outcome, "reduced_bytes": len(encoded)},
                )
                self.metrics.oversized.labels(event.kube_kind, outcome).inc()
                return smaller, encoded
        log.error("event above the NATS max payload cannot be published; dropped", extra=who)
        self.metrics.oversized.labels(event.kube_kind, "dropped").inc()
        return None

    async def flush(self, *, timeout: float) -> bool:
        """Wait until every accepted event is acknowledged; False on timeout."""
        deadline = time.monotonic() + timeout
        while self._tasks:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            await asyncio.wait(set(self._tasks), timeout=remaining)
        return True

    async def abort(self) -> None:
        """Cancel every pending publish (they are idempotent; a successor redoes them)."""
        tasks = set(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
