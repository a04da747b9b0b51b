"""Publishing kube events to CLEARANCE_KUBE: pipelined, ordered per object, bounded, never dropped.

* **Pipelined.** Events are sent without waiting for the previous event's PubAck
  (:class:`~clearance_watcher.ackinbox.AckInbox`: one reply subscription, a callback per
  message, like nats-py's ``publish_async`` without its future and JSON model per ack, and
  the frame written from pre-encoded headers); a window of at most ``max_in_flight`` events
  is outstanding. The steady state costs no task and no future per event besides the one
  the informer's :class:`Progress` tracks, and no metrics lock (:class:`AckTally`).
* **Per-object order.** Events are chained per subject (= per object name): an event is
  sent only after the previous event on its subject was acknowledged. A retry therefore
  cannot reorder one object's history, and a tombstone always precedes the ADDED of a new
  object that reuses the name. Different subjects are in flight at the same time.
* **Bounded memory.** :meth:`Publisher.submit` waits for a free slot in the window, and
  the informers await it, so a slow NATS slows the watches instead of growing a queue.
* **Never dropped.** A publish whose ack times out or fails is sent again with the same
  ``Nats-Msg-Id`` (the stream drops the duplicate if the first one was stored) — at once
  after a reconnect, since acks due on the broken connection may never come — the stream
  re-provisioned when no stream answers, with a growing pause, for as long as the watcher
  runs. Only an event NATS can never accept (above the server's max payload) is trimmed
  (:mod:`clearance_watcher.oversize`), and dropped only if trimming cannot save it.
* **Spans.** The deletions a requeue cycle waits for are published inside the cycle's trace:
  a PRODUCER span each, started when the event is sent, its ``traceparent`` in the headers,
  ended by its PubAck — on the same pipelined path as every other event (the DELETED the
  tracker waits for is often queued behind its object's last MODIFIED: a slower path for
  either delays the ``cleared``). The high-volume state events get no span of their own
  (see docs/DECISIONS.md); a failed send goes the one-by-one way, in the cycle's trace.
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
from functools import partial
from typing import Any, Final

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from opentelemetry.trace import Span, Tracer

from clearance import bus, subjects
from clearance.events import KubeAppWrapperEvent, KubeEvent
from clearance.tasks import cancel_and_wait
from clearance.telemetry import ContextLogger, context_from_traceparent
from clearance_watcher import cyclespans
from clearance_watcher.ackinbox import HEADER_END, AckInbox, header_value
from clearance_watcher.cycles import CycleIndex
from clearance_watcher.decoding import encode_event
from clearance_watcher.metrics import AckTally, WatcherMetrics
from clearance_watcher.oversize import shrink
from clearance_watcher.progress import Progress

__all__ = ["Progress", "Publisher"]

log = ContextLogger(logging.getLogger(__name__))

_MAX_PAUSE: Final = 10.0
_MSG_ID_START: Final = bus.MSG_ID.encode() + b": "


class _Pending:
    """One accepted event until its PubAck (a plain class: one is made per event)."""

    __slots__ = (
        "data",
        "done",
        "event",
        "progress",
        "rounds",
        "sent",
        "span",
        "subject",
        "submitted",
        "token",
        "traceparent",
    )

    def __init__(
        self, event: KubeEvent, progress: Progress, submitted: float, subject: str
    ) -> None:
        self.event = event
        self.progress = progress
        self.submitted = submitted
        self.subject = subject
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.data: bytes | None = None
        self.rounds = 0
        """Failed sends so far (the pause before the next grows with it)."""
        self.sent = 0.0
        self.token: str | None = None
        """The :class:`AckInbox` token of the pipelined send in flight, if any."""
        self.traceparent: str | None = None
        """The requeue cycle this event joins (its span's parent), once it was sent."""
        self.span: Span | None = None
        """The PRODUCER span of the pipelined send in flight, if the event joins a cycle."""


class Publisher:
    """Publishes kube events pipelined, in order per subject, at most ``max_in_flight`` pending."""

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
        self._pending: dict[int, _Pending] = {}
        """Accepted and not yet acknowledged, by id (insertion order = submission order)."""
        self._chains: dict[str, deque[_Pending]] = {}
        """Subject → events queued behind the one of that subject in flight."""
        self._ready: deque[_Pending] = deque()
        self._idle = asyncio.Event()
        self._idle.set()
        self._sender: asyncio.Task[None] | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        """Retry pauses and span-carrying publishes."""
        self._acks = AckInbox(js._nc)
        self._stop_reconnect_listener = bus.on_reconnect(js._nc, self._resend_unacknowledged)
        self._tally = AckTally(metrics, bus_metrics, stream=subjects.KUBE_STREAM)
        metrics.in_flight.set_function(lambda: len(self._pending))

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    def oldest_pending_age(self) -> float:
        for pending in self._pending.values():
            return max(0.0, self.clock() - pending.submitted)
        return 0.0

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
        pending = _Pending(event, progress, self.clock(), subject)
        progress.track(rv, pending.done)
        self._pending[id(pending)] = pending
        self._idle.clear()
        chain = self._chains.get(subject)
        if chain is None:
            self._chains[subject] = deque()
            self._make_ready(pending)
        else:
            chain.append(pending)
        return pending.done

    def _make_ready(self, pending: _Pending, *, first: bool = False) -> None:
        if first:
            self._ready.appendleft(pending)
        else:
            self._ready.append(pending)
        if self._sender is None or self._sender.done():
            self._sender = asyncio.create_task(self._send_ready())

    async def _send_ready(self) -> None:
        """Send what is ready, then end (the next ready event starts a new sender)."""
        while self._ready:
            await self._send(self._ready.popleft())

    async def _send(self, pending: _Pending) -> None:
        event = pending.event
        if pending.data is None:
            pending.data = encode_event(event)
        cycle = self.cycles.cycle_for(event)
        trace_lines = b""
        if cycle is not None and self.cycle_tracer is not None:
            # A deletion the tracker waits for: sent inside the cycle's trace.
            pending.traceparent = cycle.traceparent
            pending.span = cyclespans.start(
                self.cycle_tracer,
                event,
                traceparent=cycle.traceparent,
                subject=pending.subject,
                size=len(pending.data),
            )
            trace_lines = cyclespans.header_lines(pending.span)
        header = b"%b%b%b%b\r\n%b" % (
            pending.progress.header_lines(),
            trace_lines,
            _MSG_ID_START,
            header_value(event.msg_id()),
            HEADER_END,
        )
        try:
            token = await self._acks.send(
                pending.subject, pending.data, header=header, on_ack=partial(self._acked, pending)
            )
        except nats.errors.MaxPayloadError:
            self._end_span(pending, error="above the server's max payload: trimmed")
            self._spawn(self._publish_traced(pending))
            return
        except (nats.errors.Error, nats.js.errors.Error) as exc:  # connection trouble
            self._failed(pending, exc)
            return
        pending.sent = self.clock()
        pending.token = token
        if self._sweeper is None or self._sweeper.done():
            self._sweeper = asyncio.create_task(self._sweep())

    async def _sweep(self) -> None:
        """Give up on acks older than ``publish_timeout`` (their events are sent again).

        One timer for the whole window instead of one per message; it ends when nothing
        is in flight on the pipelined path."""
        while True:
            await asyncio.sleep(self.publish_timeout / 4)
            deadline = self.clock() - self.publish_timeout
            waiting = False
            for pending in list(self._pending.values()):
                if pending.token is None:
                    continue
                if pending.sent <= deadline:
                    self._withdraw(pending)
                    self._failed(pending, TimeoutError(f"no PubAck within {self.publish_timeout}s"))
                else:
                    waiting = True
            if not waiting:
                return

    def _resend_unacknowledged(self) -> None:
        """After a reconnect, the acks of sends made on the broken connection may never come
        (the server that held them may be gone): send those events again now, under their
        Msg-Ids, instead of holding their objects' later events for ``publish_timeout``."""
        lost = [p for p in self._pending.values() if p.token is not None]
        for pending in lost:
            self._withdraw(pending)
            pending.rounds += 1
            self.metrics.publish_stalls.inc()
            self._spawn(self._publish_traced(pending))
        if lost:
            log.warning(
                "nats reconnected; unacknowledged publishes sent again with the same msg ids",
                extra={"events": len(lost)},
            )

    @staticmethod
    def _end_span(pending: _Pending, *, error: str | None = None, duplicate: bool = False) -> None:
        span, pending.span = pending.span, None
        if span is not None:
            cyclespans.end(span, error=error, duplicate=duplicate)

    def _withdraw(self, pending: _Pending) -> None:
        """Stop waiting for the ack of ``pending``'s pipelined send (a late one is ignored)."""
        if pending.token is not None:
            self._acks.forget(pending.token)
            pending.token = None
        self._end_span(pending, error="no PubAck in time: sent again")

    def _acked(self, pending: _Pending, duplicate: bool, exc: BaseException | None) -> None:
        """The stream's answer to a pipelined send (called by the :class:`AckInbox`)."""
        pending.token = None
        if id(pending) not in self._pending:
            return  # aborted meanwhile
        if exc is not None:
            self._failed(pending, exc)
            return
        self._end_span(pending, duplicate=duplicate)
        self._tally.published(pending.event.event_type, duplicate=duplicate)
        self._succeeded(pending)

    def _succeeded(self, pending: _Pending) -> None:
        event = pending.event
        self.metrics.publish_latency.observe(self.clock() - pending.submitted)
        lag = time.time() - event.observed_at.timestamp()
        self.metrics.lag.observe(max(0.0, lag))
        self._tally.acknowledged(event)
        if not pending.done.done():
            pending.done.set_result(None)
        self._release(pending)

    def _release(self, pending: _Pending) -> None:
        if self._pending.pop(id(pending), None) is None:
            return  # aborted meanwhile: its slot was released then
        self._slots.release()
        chain = self._chains.get(pending.subject)
        if chain:
            self._make_ready(chain.popleft())
        elif chain is not None:
            del self._chains[pending.subject]
        if not self._pending:
            self._idle.set()

    def _failed(self, pending: _Pending, exc: BaseException) -> None:
        """Hand the event to the one-by-one path (retries with the same Msg-Id, stream
        re-provisioning, growing pauses); its subject stays blocked until it is stored."""
        self._end_span(pending, error=f"{type(exc).__name__}: {exc}")
        self._stalled(pending, pending.event, exc, "pipelined publish failed")
        self._spawn(self._publish_traced(pending, pause=self.retry_pause))

    def _stalled(self, pending: _Pending, event: KubeEvent, exc: BaseException, what: str) -> None:
        """One more failed round of `pending` (publishing `event`): counted and logged."""
        pending.rounds += 1
        self.metrics.publish_stalls.inc()
        log.warning(
            f"{what}; retrying with the same msg id",
            extra={
                "subject": pending.subject,
                "msg_id": event.msg_id(),
                "rounds": pending.rounds,
                "error": f"{type(exc).__name__}: {exc}",
            },
        )

    async def _publish_traced(self, pending: _Pending, *, pause: float = 0.0) -> None:
        """One event through :func:`clearance.bus.publish` (span, retries, trimming), in its
        cycle's trace if it joins one (``pending.traceparent``)."""
        if pause:
            await asyncio.sleep(pause)
        event, data = pending.event, pending.data
        assert data is not None
        tracer, parent, span_name = self.tracer, None, None
        if pending.traceparent is not None:
            tracer = self.cycle_tracer
            parent = context_from_traceparent(pending.traceparent)
            span_name = cyclespans.span_name(event)
        while True:
            try:
                await bus.publish(
                    self.js,
                    pending.subject,
                    data,
                    msg_id=event.msg_id(),
                    headers=pending.progress.headers(),
                    tracer=tracer,
                    parent=parent,
                    span_name=span_name,
                    metrics=self.bus_metrics,
                    timeout=self.publish_timeout,
                    event_type=event.event_type,
                )
                break
            except nats.errors.MaxPayloadError:
                smaller = shrink(event, data, metrics=self.metrics)
                if smaller is None:
                    break
                event, data = smaller
            except (bus.PublishError, nats.errors.Error, TimeoutError) as exc:
                self._stalled(pending, event, exc, "publish keeps failing")
                await asyncio.sleep(min(self.retry_pause * pending.rounds, _MAX_PAUSE))
        pending.event = event
        self._succeeded(pending)

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def flush(self, *, timeout: float) -> bool:
        """Wait until every accepted event is acknowledged; False on timeout."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._idle.wait(), timeout)
        return not self._pending

    async def abort(self) -> None:
        """Drop every pending publish (they are idempotent; a successor redoes them)."""
        self._stop_reconnect_listener()
        tasks = set(self._tasks)
        tasks |= {t for t in (self._sender, self._sweeper) if t is not None}
        await cancel_and_wait(*tasks)
        self._sender = self._sweeper = None
        for pending in list(self._pending.values()):
            # Not acknowledged: successors on the subject and Progress must not count it.
            pending.done.cancel()
            self._end_span(pending, error="aborted: the session ended")
            self._pending.pop(id(pending), None)
            self._slots.release()
        self._chains.clear()
        self._ready.clear()
        self._idle.set()
        self._tally.flush()
        await self._acks.close()
