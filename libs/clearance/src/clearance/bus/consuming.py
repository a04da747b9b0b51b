"""Consuming: a durable pull-consumer loop with bounded concurrency and exact ack control.

A CONSUMER span per message parented on the producer span, ``in_progress`` heartbeats
for long handlers, ack only after the handler returned, ``Retry`` → ``nak(delay)``,
undecodable messages → copy to the DLQ then ``term``, and a stop sequence that cannot
hit the nats-py drain hang (unsubscribe before drain).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry import trace
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from clearance import attributes
from clearance.bus.backoff import DEFAULT_HANDLER_BACKOFF, RetryPolicy
from clearance.bus.delivery import Decoder, Delivery, Handler
from clearance.bus.dlq import copy_to_dlq
from clearance.bus.errors import BusError, PublishError, Retry, StreamUnavailableError
from clearance.bus.keepalive import KeepAlive
from clearance.bus.metrics import BusMetrics
from clearance.bus.provisioning import ensure_consumer, ensure_stream, while_unavailable
from clearance.bus.spanscope import keeps, without_span
from clearance.bus.topology import ConsumerSpec, StreamSpec, dlq_stream, dlq_subject
from clearance.tasks import wait_set
from clearance.telemetry import extract_context

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class _State:
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class Consumer(Generic[T]):
    """A durable pull consumer loop: fetch, decode, handle, then ack/nak/term.

    * at most ``concurrency`` handlers run at once; fetches ask only for free slots;
    * each message gets a CONSUMER span whose parent is the producer's span;
    * handlers that run long are kept alive with ``in_progress`` every ``ack_wait/3``;
    * the message is acked only after the handler returned (its side effects done);
      ``Retry(delay)`` → ``nak(delay)``; any other exception → ``nak`` with backoff
      by delivery count, logged with context;
    * ``decode`` raising → copy to ``clearance.dlq.v1.<stream>`` and ``term``;
    * the server losing the stream/consumer → both re-created, subscription rebound;
    * ``stop()`` stops fetching, waits for in-flight handlers, then unsubscribes, so
      a following ``nc.drain()`` returns at once.
    """

    def __init__(
        self,
        js: JetStreamContext,
        spec: ConsumerSpec,
        *,
        decode: Decoder[T],
        handler: Handler[T],
        concurrency: int = 8,
        fetch_timeout: float = 1.0,
        start_timeout: float = 60.0,
        tracer: Tracer | None = None,
        metrics: BusMetrics | None = None,
        error_backoff: RetryPolicy = DEFAULT_HANDLER_BACKOFF,
        heartbeat_interval: float | None = None,
        dlq: StreamSpec | None = None,
        dlq_subject_for: Callable[[str], str] = dlq_subject,
        span_ratio: float = 1.0,
        refill: int = 1,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.js = js
        self.spec = spec
        self.decode = decode
        self.handler = handler
        self.concurrency = concurrency
        self.fetch_timeout = fetch_timeout
        self.start_timeout = start_timeout
        """Seconds :meth:`start` waits for a stream that has no leader (default 60)."""
        self.tracer = tracer or trace.get_tracer(__name__)
        self.metrics = metrics
        self.error_backoff = error_backoff
        self.heartbeat_interval = heartbeat_interval or spec.ack_wait / 3
        self.dlq = dlq if dlq is not None else dlq_stream()
        self.dlq_subject_for = dlq_subject_for
        self.span_ratio = span_ratio
        """Share of messages handled under a CONSUMER span (:mod:`.spanscope`; default all)."""
        self.refill = max(1, min(refill, concurrency))
        """Free slots a busy consumer waits for before fetching again (default 1: at once)."""
        self._backlog = 0
        """Messages the stream held for this consumer after the last one fetched."""
        self._sub: JetStreamContext.PullSubscription | None = None
        self._loop: asyncio.Task[None] | None = None
        self._state = _State()
        self._healthy = False
        self._children: dict[tuple[str, ...], Any] = {}

    def _metric(self, name: str, *values: str) -> Any:
        """The labelled child of one of the bus metrics (looked up once per label set)."""
        key = (name, *values)
        child = self._children.get(key)
        if child is None:
            assert self.metrics is not None
            child = self._children[key] = getattr(self.metrics, name).labels(*values)
        return child

    # -- lifecycle -------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.durable

    @property
    def ready(self) -> bool:
        """Subscribed and fetching without server errors (a readiness check)."""
        return self._healthy and self._loop is not None and not self._loop.done()

    @property
    def loop(self) -> asyncio.Task[None] | None:
        """The fetch loop's task, once started (a service watches it for crashes)."""
        return self._loop

    @property
    def in_flight(self) -> int:
        return len(self._state.tasks)

    async def start(self) -> Consumer[T]:
        """Ensure stream and consumer, bind the pull subscription, start fetching."""
        if self._loop is not None:
            raise BusError(f"consumer {self.name} already started")
        # A replica that becomes leader while NATS elects a stream leader (after a node loss)
        # waits for it instead of failing its start.
        await while_unavailable(self._provision, self.spec.stream.name, self.start_timeout)
        if self.metrics is not None:  # exported at 0, so the first dead letter is an increase
            self.metrics.dead_lettered.labels(self.spec.stream.name, self.name)
        self._healthy = True
        self._loop = asyncio.create_task(self._run(), name=f"consumer:{self.name}")
        self._loop.add_done_callback(self._loop_done)
        return self

    def _loop_done(self, task: asyncio.Task[None]) -> None:
        self._healthy = False
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "consumer loop crashed", exc_info=task.exception(), extra={"consumer": self.name}
            )

    async def stop(self, *, timeout: float = 10.0) -> None:
        """Stop fetching, wait for in-flight handlers (≤ ``timeout``), unsubscribe.

        The loop finishes its current fetch (≤ ``fetch_timeout``) rather than cancelling
        it: a cancelled fetch leaves a pull request on the server that could pull a
        message into an inbox nobody reads, delaying it by a whole ``ack_wait``.
        """
        state = self._state
        state.stopping.set()
        state.wake.set()
        if self._loop is not None:
            done, _ = await asyncio.wait({self._loop}, timeout=self.fetch_timeout + 1.0)
            if not done:
                self._loop.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await self._loop
        if state.tasks:
            _, pending = await asyncio.wait(set(state.tasks), timeout=timeout)
            for task in pending:
                task.cancel()  # unacked: the server redelivers after ack_wait
            if pending:
                log.warning(
                    "handlers still running at shutdown were cancelled",
                    extra={"consumer": self.name, "cancelled": len(pending)},
                )
                await asyncio.wait(pending, timeout=1.0)
        await self._unsubscribe()
        self._healthy = False

    async def __aenter__(self) -> Consumer[T]:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def _provision(self) -> None:
        await ensure_stream(self.js, self.spec.stream)
        await ensure_consumer(self.js, self.spec)
        await self._unsubscribe()
        self._sub = await self.js.pull_subscribe_bind(
            consumer=self.spec.durable, stream=self.spec.stream.name
        )

    async def _unsubscribe(self) -> None:
        sub, self._sub = self._sub, None
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _reprovision(self, reason: BaseException) -> None:
        """Re-create stream + consumer and rebind, retrying until it works or we stop."""
        self._healthy = False
        log.warning(
            "consumer lost its stream or consumer on the server; re-provisioning",
            extra={"consumer": self.name, "stream": self.spec.stream.name, "error": repr(reason)},
        )
        attempt = 0
        while not self._state.stopping.is_set():
            attempt += 1
            try:
                await self._provision()
            except Exception as exc:
                # Transient (JetStream still starting) or not (ConsumerDriftError): keep
                # trying either way; readiness stays false and the log says why.
                pause = RetryPolicy(initial=0.1, maximum=2.0).delay(attempt)
                transient = isinstance(
                    exc, TimeoutError | nats.errors.Error | StreamUnavailableError
                )
                log.log(
                    logging.INFO if transient else logging.ERROR,
                    "re-provisioning failed, retrying",
                    extra={"consumer": self.name, "error": repr(exc), "retry_in": round(pause, 3)},
                )
                await self._sleep_unless_stopping(pause)
            else:
                if self.metrics is not None:
                    self.metrics.reprovisions.labels(self.spec.stream.name).inc()
                self._healthy = True
                log.info("consumer re-provisioned", extra={"consumer": self.name})
                return

    async def _sleep_unless_stopping(self, seconds: float) -> None:
        await wait_set(self._state.stopping, timeout=seconds)

    # -- the loop --------------------------------------------------------------------

    async def _wait_for_capacity(self) -> int:
        state = self._state
        # A busy consumer waits for `refill` free slots before it fetches again (an idle one
        # fetches at once): batches, not one message per finished handler.
        while (
            state.tasks and self.concurrency - len(state.tasks) < self.refill
        ) and not state.stopping.is_set():
            state.wake.clear()
            await state.wake.wait()
        return 0 if state.stopping.is_set() else self.concurrency - len(state.tasks)

    async def _run(self) -> None:
        failures = 0
        while True:
            free = await self._wait_for_capacity()
            if free == 0:
                return
            sub = self._sub
            if sub is None:
                await self._reprovision(BusError("no subscription"))
                continue
            try:
                msgs = await sub.fetch(batch=self._batch(free), timeout=self.fetch_timeout)
            except TimeoutError:
                # nats-py raises its own TimeoutError or a bare asyncio one (a subclass of
                # the builtin) when a fetch finds nothing: not a failure.
                failures = 0
                self._observe_pending(0)
                continue  # nothing to do (or disconnected: the client reconnects)
            except (
                nats.js.errors.ServiceUnavailableError,
                nats.js.errors.NotFoundError,
                nats.js.errors.NoStreamResponseError,
            ) as exc:
                if self._state.stopping.is_set():
                    return
                await self._reprovision(exc)
                continue
            except nats.js.errors.APIError as exc:
                if exc.code == 409 and "deleted" in (exc.description or "").lower():
                    await self._reprovision(exc)  # "409 Consumer Deleted"
                    continue
                failures += 1
                log.warning("fetch rejected", extra={"consumer": self.name, "error": repr(exc)})
                await self._sleep_unless_stopping(RetryPolicy(maximum=5.0).delay(failures))
                continue
            except nats.errors.ConnectionClosedError:
                log.warning(
                    "nats connection closed; consumer loop ends", extra={"consumer": self.name}
                )
                self._healthy = False
                return
            except Exception as exc:
                failures += 1
                pause = RetryPolicy(initial=0.1, maximum=5.0).delay(failures)
                log.exception("fetch failed", extra={"consumer": self.name, "error": repr(exc)})
                await self._sleep_unless_stopping(pause)
                continue
            failures = 0
            self._healthy = True
            if not msgs:
                # nats-py may return [] at once on some status replies; never spin.
                await self._sleep_unless_stopping(0.05)
                continue
            self._observe_pending(msgs[-1].metadata.num_pending)
            for msg in msgs:
                task = asyncio.create_task(self._process(msg))
                self._state.tasks.add(task)
                task.add_done_callback(self._task_done)
            if self.metrics is not None:
                self._metric("in_flight", self.name).set(len(self._state.tasks))

    def _batch(self, free: int) -> int:
        """How many messages to ask for: what the stream holds for this consumer, at most the
        free slots, and one when it is caught up. nats-py's fetch returns only once the batch
        is full or its timeout is over (it waits for more after the first message), so a
        batch larger than the backlog held a lone message up to ``fetch_timeout`` (the
        tracker's ``teardown.started`` was handled 0.3-0.65 s after it was stored)."""
        return max(1, min(free, self._backlog))

    def _observe_pending(self, pending: int) -> None:
        self._backlog = pending
        if self.metrics is not None:
            self._metric("pending", self.spec.stream.name, self.name).set(pending)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._state.tasks.discard(task)
        self._state.wake.set()
        if self.metrics is not None:
            self._metric("in_flight", self.name).set(len(self._state.tasks))
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "consumer task crashed",
                exc_info=task.exception(),
                extra={"consumer": self.name},
            )

    # -- one message -----------------------------------------------------------------

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self._metric("consumed", self.spec.stream.name, self.name, outcome).inc()

    async def _process(self, msg: Msg) -> None:
        headers: dict[str, str] = dict(msg.headers or {})
        md = msg.metadata
        delivery = Delivery(
            msg=msg,
            subject=msg.subject,
            headers=headers,
            stream=md.stream,
            consumer=md.consumer,
            stream_sequence=md.sequence.stream,
            num_delivered=md.num_delivered,
        )
        context = {
            "consumer": self.name,
            "subject": msg.subject,
            "stream_seq": delivery.stream_sequence,
            "delivered": delivery.num_delivered,
            "msg_id": delivery.msg_id,
        }
        if self.metrics is not None:
            lag = (datetime.now(UTC) - md.timestamp).total_seconds()
            self._metric("delivery_lag", self.spec.stream.name, self.name).observe(max(0.0, lag))
        if delivery.redelivered and self.metrics is not None:
            self._metric("redelivered", self.spec.stream.name, self.name).inc()
        parent = extract_context(headers)
        scope = (
            self.tracer.start_as_current_span(
                f"process {msg.subject}",
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes={
                    "messaging.system": "nats",
                    "messaging.operation.type": "process",
                    "messaging.destination.name": msg.subject,
                    "messaging.consumer.group.name": self.name,
                    "messaging.message.id": delivery.msg_id or "",
                    "messaging.message.body.size": len(msg.data),
                    attributes.NATS_STREAM: delivery.stream,
                    attributes.NATS_SEQUENCE: delivery.stream_sequence,
                    attributes.NATS_DELIVERY_COUNT: delivery.num_delivered,
                },
            )
            if keeps(parent, self.span_ratio)
            else without_span(parent)
        )
        with scope as span:
            try:
                event = self.decode(msg.data)
            except Exception as exc:
                span.set_status(Status(StatusCode.ERROR, f"undecodable: {exc}"))
                await self._dead_letter(msg, delivery, exc, context)
                return
            keepalive = KeepAlive(msg, interval=self.heartbeat_interval, consumer=self.name)
            try:
                await self.handler(event, delivery)
            except Retry as retry:
                span.set_attribute("clearance.retry_in", retry.delay)
                log.info(
                    "handler asked for a retry",
                    extra={**context, "retry_in": retry.delay, "reason": retry.reason},
                )
                await self._settle(msg.nak(delay=retry.delay), context)
                self._count("retry")
            except asyncio.CancelledError:
                raise  # shutdown gave up on us; the server redelivers after ack_wait
            except Exception as exc:
                delay = self.error_backoff.delay(delivery.num_delivered)
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
                log.exception(
                    "handler failed; message will be redelivered",
                    extra={**context, "retry_in": round(delay, 3)},
                )
                await self._settle(msg.nak(delay=delay), context)
                self._count("error")
            else:
                await self._settle(msg.ack(), context)
                self._count("ack")
            finally:
                keepalive.cancel()

    async def _settle(self, op: Awaitable[None], context: Mapping[str, Any]) -> None:
        """Send ack/nak/term; failures only delay the message (the server redelivers)."""
        try:
            await op
        except Exception as exc:
            log.warning("could not acknowledge message", extra={**context, "error": repr(exc)})

    async def _dead_letter(
        self, msg: Msg, delivery: Delivery, error: Exception, context: Mapping[str, Any]
    ) -> None:
        """Copy an undecodable message to the DLQ, then ``term`` it.

        The copy is confirmed first: if the DLQ publish fails the message is nak'ed
        (tried again later) rather than terminated, so nothing is ever dropped silently.
        """
        text = f"{type(error).__name__}: {error}"
        try:
            await copy_to_dlq(
                self.js,
                msg,
                headers=dict(delivery.headers),
                stream=delivery.stream,
                sequence=delivery.stream_sequence,
                consumer=delivery.consumer,
                msg_id=delivery.msg_id,
                error=text,
                dlq=self.dlq,
                subject=self.dlq_subject_for(delivery.stream),
                tracer=self.tracer,
                metrics=self.metrics,
            )
        except PublishError as exc:
            log.error(
                "undecodable message could not be copied to the DLQ; will retry",
                extra={**context, "error": text, "dlq_error": str(exc)},
            )
            await self._settle(
                msg.nak(delay=self.error_backoff.delay(delivery.num_delivered)), context
            )
            self._count("error")
            return
        await self._settle(msg.term(), context)
        self._count("dlq")
        if self.metrics is not None:
            self.metrics.dead_lettered.labels(self.spec.stream.name, self.name).inc()
        log.warning(
            "undecodable message terminated and copied to the DLQ", extra={**context, "error": text}
        )


async def consume(
    js: JetStreamContext,
    spec: ConsumerSpec,
    *,
    decode: Decoder[T],
    handler: Handler[T],
    **options: Any,
) -> Consumer[T]:
    """Start a :class:`Consumer` (options as its constructor) and return it running."""
    return await Consumer(js, spec, decode=decode, handler=handler, **options).start()
