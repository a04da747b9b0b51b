"""The thin JetStream runtime every Clearance service talks to NATS through.

Plain nats-py 2.16 (no framework): the value of Clearance is in exact ack and
redelivery control, so this module keeps it visible. It provides

* ``connect``: reconnect forever, every connection event logged;
* ``ensure_stream`` / ``ensure_consumer`` / ``ensure_kv``: idempotent provisioning that
  also corrects configuration drift, safe to call from every replica at start-up and
  again whenever the server turns out to have lost its state;
* ``publish``: ``Nats-Msg-Id`` for server-side dedup, W3C trace context in headers, a
  PRODUCER span, retries with the *same* Msg-Id (a retry after a lost ack cannot
  duplicate), and re-provisioning when the stream vanished;
* ``Consumer``: a durable pull-consumer loop with bounded concurrency, a CONSUMER span
  per message parented on the producer span, ``in_progress`` heartbeats for long
  handlers, ack only after the handler returned, ``Retry`` → ``nak(delay)``,
  undecodable messages → copy to ``clearance.dlq.v1.<stream>`` then ``term``, and a
  stop sequence that cannot hit the nats-py drain hang (unsubscribe before drain).

Known nats-py behaviours this module is built around (see
reference/libraries-and-style.md §1.3): header keys are case-sensitive, an empty
``fetch`` raises ``TimeoutError``, ``drain()`` after an empty fetch waits the whole
drain timeout unless the pull subscription was unsubscribed first, and a server that
restarted without its store answers ``NoStreamResponseError`` (publish) or
``ServiceUnavailableError`` (fetch) until streams and consumers are re-created.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Generic, TypeVar

import msgspec
import nats
import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import JetStreamContext, api
from nats.js.kv import KeyValue
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from clearance import subjects
from clearance.settings import CommonSettings
from clearance.telemetry import extract_context, inject_headers

__all__ = [
    "DLQ_ERROR_HEADER",
    "MSG_ID",
    "BusError",
    "BusMetrics",
    "Consumer",
    "ConsumerDriftError",
    "ConsumerSpec",
    "Delivery",
    "KvSpec",
    "PublishError",
    "Retry",
    "RetryPolicy",
    "StreamSpec",
    "connect",
    "consume",
    "default_streams",
    "dlq_stream",
    "dlq_subject",
    "ensure_consumer",
    "ensure_kv",
    "ensure_stream",
    "ensure_topology",
    "publish",
    "shutdown",
]

log = logging.getLogger(__name__)

MSG_ID: Final = "Nats-Msg-Id"
"""The dedup header; the server only honours this exact spelling."""

DLQ_ERROR_HEADER: Final = "Clearance-Dlq-Error"
DLQ_SUBJECT_HEADER: Final = "Clearance-Dlq-Subject"
DLQ_STREAM_HEADER: Final = "Clearance-Dlq-Stream"
DLQ_SEQUENCE_HEADER: Final = "Clearance-Dlq-Sequence"
DLQ_CONSUMER_HEADER: Final = "Clearance-Dlq-Consumer"
DLQ_MSG_ID_HEADER: Final = "Clearance-Dlq-Msg-Id"


# JetStream API error code for "stream name already in use with a different configuration".
_STREAM_CONFIG_CONFLICT: Final = 10058
_DUPLICATE_WINDOW: Final = 120.0

_JSON = msgspec.json.Encoder()


class BusError(RuntimeError):
    """A NATS/JetStream operation failed in a way the caller must handle."""


class PublishError(BusError):
    """Publishing failed after every retry; ``__cause__`` is the last error."""

    def __init__(self, subject: str, msg_id: str, attempts: int, last: BaseException) -> None:
        self.subject = subject
        self.msg_id = msg_id
        self.attempts = attempts
        super().__init__(
            f"publish to {subject!r} (msg id {msg_id!r}) failed after {attempts} attempts: "
            f"{type(last).__name__}: {last}"
        )


class ConsumerDriftError(BusError):
    """A durable consumer exists with a configuration the server refuses to update."""


class Retry(Exception):
    """Raised by a handler to ask for redelivery after ``delay`` seconds (``nak(delay)``)."""

    def __init__(self, delay: float, reason: str = "") -> None:
        self.delay = delay
        self.reason = reason
        super().__init__(f"retry in {delay}s" + (f": {reason}" if reason else ""))


# -- topology --------------------------------------------------------------------------


@dataclass(frozen=True)
class StreamSpec:
    """What a stream must look like; ``ensure_stream`` makes the server agree."""

    name: str
    subjects: tuple[str, ...]
    max_age: float
    """Seconds a message is kept (LIMITS retention)."""
    duplicate_window: float = _DUPLICATE_WINDOW
    storage: api.StorageType = api.StorageType.FILE
    retention: api.RetentionPolicy = api.RetentionPolicy.LIMITS
    description: str | None = None
    replicas: int = 1

    def to_config(self) -> api.StreamConfig:
        return api.StreamConfig(
            name=self.name,
            num_replicas=self.replicas,
            description=self.description,
            subjects=list(self.subjects),
            retention=self.retention,
            storage=self.storage,
            max_age=self.max_age,
            duplicate_window=min(self.duplicate_window, self.max_age),
            discard=api.DiscardPolicy.OLD,
        )

    def covers(self, subject: str) -> bool:
        return any(subject_matches(pattern, subject) for pattern in self.subjects)


def dlq_subject(stream: str) -> str:
    """Where undecodable messages of ``stream`` are copied: ``clearance.dlq.v1.<stream>``."""
    return subjects.dlq_subject(stream)


def _spec_from(stream: subjects.StreamSpec, *, replicas: int) -> StreamSpec:
    return StreamSpec(
        stream.name,
        stream.subjects,
        max_age=stream.max_age_seconds,
        description=stream.description,
        replicas=replicas,
    )


def dlq_stream(*, replicas: int = 1) -> StreamSpec:
    return _spec_from(subjects.DLQ, replicas=replicas)


def default_streams(*, replicas: int = 1) -> tuple[StreamSpec, ...]:
    """Clearance's streams (DESIGN §3), as :mod:`clearance.subjects` defines them.

    ``replicas`` is the JetStream replication factor: 1 on a single server, 3 on a
    production cluster (``CLEARANCE_STREAM_REPLICAS``).
    """
    return tuple(_spec_from(stream, replicas=replicas) for stream in subjects.STREAMS)


@dataclass(frozen=True)
class KvSpec:
    """A JetStream key-value bucket; ``ensure_kv`` creates it or corrects its limits."""

    bucket: str
    history: int = 5
    ttl: float | None = None
    storage: api.StorageType = api.StorageType.FILE
    description: str | None = None
    replicas: int = 1


@dataclass(frozen=True)
class ConsumerSpec:
    """A durable pull consumer with explicit ack on ``stream``."""

    stream: StreamSpec
    durable: str
    filter_subjects: tuple[str, ...] = ()
    ack_wait: float = 30.0
    max_deliver: int = -1
    max_ack_pending: int = 1000
    backoff: tuple[float, ...] | None = None
    deliver_policy: api.DeliverPolicy = api.DeliverPolicy.ALL
    description: str | None = None

    def to_config(self) -> api.ConsumerConfig:
        single = len(self.filter_subjects) == 1
        return api.ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            description=self.description,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
            backoff=list(self.backoff) if self.backoff else None,
            deliver_policy=self.deliver_policy,
            filter_subject=self.filter_subjects[0] if single else None,
            filter_subjects=list(self.filter_subjects) if len(self.filter_subjects) > 1 else None,
        )


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcard match: ``*`` is one token, a trailing ``>`` one or more tokens."""
    pat = pattern.split(".")
    sub = subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub) or (token != "*" and token != sub[i]):
            return False
    return len(pat) == len(sub)


async def ensure_stream(js: JetStreamContext, spec: StreamSpec) -> api.StreamInfo:
    """Create the stream, or update it when its configuration drifted from ``spec``."""
    config = spec.to_config()
    try:
        return await js.add_stream(config)
    except nats.js.errors.BadRequestError as exc:
        if exc.err_code != _STREAM_CONFIG_CONFLICT:
            raise
    info = await js.update_stream(config)
    log.info("stream config drift corrected", extra={"stream": spec.name})
    return info


async def ensure_consumer(js: JetStreamContext, spec: ConsumerSpec) -> api.ConsumerInfo:
    """Create the durable consumer or update it to ``spec`` (create-or-update request).

    Fields the server cannot change in place (e.g. ``deliver_policy``) raise
    :class:`ConsumerDriftError` instead of silently deleting the consumer, which
    would lose its ack position.
    """
    try:
        return await js.add_consumer(spec.stream.name, spec.to_config())
    except nats.js.errors.APIError as exc:
        # The server answers 400, or 500 with err_code 10012 ("... can not be updated").
        if not isinstance(exc, nats.js.errors.BadRequestError) and exc.err_code != 10012:
            raise
        raise ConsumerDriftError(
            f"consumer {spec.durable!r} on {spec.stream.name!r} cannot be updated to the "
            f"requested configuration: {exc.description}"
        ) from exc


async def ensure_kv(js: JetStreamContext, spec: KvSpec) -> KeyValue:
    """Create the bucket, or correct history/ttl of an existing one."""
    try:
        kv = await js.key_value(spec.bucket)
    except nats.js.errors.BucketNotFoundError:
        try:
            return await js.create_key_value(
                bucket=spec.bucket,
                history=spec.history,
                ttl=spec.ttl,
                storage=spec.storage,
                description=spec.description,
                replicas=spec.replicas,
            )
        except nats.js.errors.BadRequestError as exc:
            if exc.err_code != _STREAM_CONFIG_CONFLICT:
                raise
            kv = await js.key_value(spec.bucket)  # another replica won the race
    stream = f"KV_{spec.bucket}"
    info = await js.stream_info(stream)
    current = info.config
    wanted_age = spec.ttl or 0.0
    if current.max_msgs_per_subject != spec.history or (current.max_age or 0.0) != wanted_age:
        current.max_msgs_per_subject = spec.history
        current.max_age = wanted_age
        if spec.description is not None:
            current.description = spec.description
        await js.update_stream(current)
        log.info("kv bucket config drift corrected", extra={"bucket": spec.bucket})
    return kv


async def ensure_topology(
    js: JetStreamContext,
    *,
    streams: Sequence[StreamSpec] | None = None,
    buckets: Sequence[KvSpec] = (),
    replicas: int = 1,
) -> None:
    """Ensure the streams (default: DESIGN §3) and the given KV buckets (a service owns its own)."""
    for spec in default_streams(replicas=replicas) if streams is None else streams:
        await ensure_stream(js, spec)
    for kv in buckets:
        await ensure_kv(js, kv)


# -- connection ------------------------------------------------------------------------


def _tls_context(settings: CommonSettings) -> ssl.SSLContext | None:
    wants_tls = any(url.startswith("tls://") for url in settings.nats_servers)
    if settings.nats_tls_ca is None and settings.nats_tls_cert is None and not wants_tls:
        return None
    ctx = ssl.create_default_context(
        cafile=str(settings.nats_tls_ca) if settings.nats_tls_ca is not None else None
    )
    if settings.nats_tls_cert is not None and settings.nats_tls_key is not None:
        ctx.load_cert_chain(str(settings.nats_tls_cert), str(settings.nats_tls_key))
    return ctx


async def connect(
    settings: CommonSettings,
    *,
    name: str,
    drain_timeout: float = 10.0,
    ping_interval: float = 20.0,
    first_connect_timeout: float | None = 60.0,
) -> NatsClient:
    """Connect with reconnect-forever and logged connection events.

    Once connected, the client reconnects forever. The *first* connection is bounded
    by ``first_connect_timeout`` (None: wait forever), because nats-py would otherwise
    retry a wrong URL silently for ever; a service then exits and its supervisor
    restarts it, which is visible.

    Authentication comes from the settings: a creds file, an nkey seed file, or
    user/password; TLS when a CA/client certificate is configured or a ``tls://`` URL
    is used.
    """
    nc = NatsClient()

    async def on_error(exc: Exception) -> None:
        # Failed reconnect attempts repeat every reconnect_wait during an outage that
        # was already reported as a disconnect: keep them out of the warnings.
        level = logging.INFO if nc.is_reconnecting else logging.WARNING
        log.log(level, "nats error: %s: %s", type(exc).__name__, exc, extra={"nats_client": name})

    async def on_disconnected() -> None:
        # Closing/draining also disconnects; only an unplanned loss deserves a warning.
        level = logging.INFO if nc.is_closed or nc.is_draining else logging.WARNING
        log.log(level, "nats disconnected", extra={"nats_client": name})

    async def on_reconnected() -> None:
        url = nc.connected_url
        log.info(
            "nats reconnected",
            extra={"nats_client": name, "server": url.netloc if url else None},
        )

    async def on_closed() -> None:
        log.info("nats connection closed", extra={"nats_client": name})

    options: dict[str, Any] = {
        "servers": settings.nats_servers,
        "name": name,
        "error_cb": on_error,
        "disconnected_cb": on_disconnected,
        "reconnected_cb": on_reconnected,
        "closed_cb": on_closed,
        "max_reconnect_attempts": -1,
        "reconnect_time_wait": settings.nats_reconnect_wait,
        "connect_timeout": settings.nats_connect_timeout,
        "drain_timeout": drain_timeout,
        "ping_interval": ping_interval,
    }
    if settings.nats_creds is not None:
        options["user_credentials"] = str(settings.nats_creds)
    if settings.nats_nkey_seed is not None:
        options["nkeys_seed"] = str(settings.nats_nkey_seed)
    if settings.nats_user is not None:
        options["user"] = settings.nats_user
        options["password"] = settings.nats_password
    tls = _tls_context(settings)
    if tls is not None:
        options["tls"] = tls
    try:
        await asyncio.wait_for(nc.connect(**options), first_connect_timeout)
    except TimeoutError as exc:
        last = nc.last_error
        with contextlib.suppress(Exception):
            await nc.close()
        raise BusError(
            f"could not connect to NATS at {settings.nats_url} within {first_connect_timeout}s"
            + (f" (last error: {type(last).__name__}: {last})" if last else "")
        ) from exc
    url = nc.connected_url
    log.info("nats connected", extra={"nats_client": name, "server": url.netloc if url else None})
    return nc


# -- metrics ---------------------------------------------------------------------------


PUBLISH_FAILURE_REASONS: Final = ("no_stream", "timeout", "unavailable", "reconnecting")
"""The `reason` label values of `clearance_publish_retries_total` and `..._failures_total`."""


class BusMetrics:
    """The bus's Prometheus metrics, registered on an injected registry.

    Labels are bounded (stream, event type, consumer durable, outcome): no object
    names, which belong in events and traces.
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.published = Counter(
            "clearance_events_published",
            "Events acknowledged by JetStream (duplicates included).",
            ["stream", "type"],
            registry=registry,
        )
        self.duplicates = Counter(
            "clearance_events_duplicate",
            "Publishes JetStream reported as duplicates of a Msg-Id it already stored.",
            ["stream"],
            registry=registry,
        )
        self.publish_retries = Counter(
            "clearance_publish_retries",
            "Publish attempts repeated with the same Msg-Id.",
            ["reason"],
            registry=registry,
        )
        self.publish_failures = Counter(
            "clearance_publish_failures",
            "Publishes that failed after every retry.",
            ["reason"],
            registry=registry,
        )
        self.publish_latency = Histogram(
            "clearance_publish_latency_seconds",
            "Time from publish call to PubAck, retries included.",
            ["stream"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=registry,
        )
        self.consumed = Counter(
            "clearance_events_consumed",
            "Messages handled by a consumer, by outcome (ack, retry, error, dlq).",
            ["stream", "consumer", "outcome"],
            registry=registry,
        )
        self.redelivered = Counter(
            "clearance_events_redelivered",
            "Deliveries with num_delivered > 1.",
            ["stream", "consumer"],
            registry=registry,
        )
        self.dead_lettered = Counter(
            "clearance_events_dead_lettered",
            "Undecodable messages copied to the DLQ and terminated.",
            ["stream", "consumer"],
            registry=registry,
        )
        self.in_flight = Gauge(
            "clearance_consumer_in_flight",
            "Messages a consumer is currently handling.",
            ["consumer"],
            registry=registry,
        )
        for reason in PUBLISH_FAILURE_REASONS:  # exported at 0: the first failure is an increase
            self.publish_failures.labels(reason)
        self.pending = Gauge(
            "clearance_consumer_pending_messages",
            "Messages of the stream not yet delivered to this consumer, as JetStream reported "
            "with the latest fetch (0 when a fetch found nothing): the consumer's lag.",
            ["stream", "consumer"],
            registry=registry,
        )
        self.delivery_lag = Histogram(
            "clearance_consumer_lag_seconds",
            "From JetStream storing a message to this consumer starting to handle it.",
            ["stream", "consumer"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600),
            registry=registry,
        )
        self.reprovisions = Counter(
            "clearance_bus_reprovisions",
            "Times streams/consumers were re-created after the server lost them.",
            ["stream"],
            registry=registry,
        )


# -- publish ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """Bounded exponential backoff with jitter."""

    attempts: int = 6
    initial: float = 0.1
    maximum: float = 2.0
    multiplier: float = 2.0
    jitter: float = 0.1

    def delay(self, attempt: int) -> float:
        """Pause after failed attempt number ``attempt`` (1-based)."""
        base = min(self.maximum, self.initial * self.multiplier ** max(0, attempt - 1))
        return base * (1 + random.uniform(-self.jitter, self.jitter))


DEFAULT_PUBLISH_RETRY: Final = RetryPolicy()
DEFAULT_HANDLER_BACKOFF: Final = RetryPolicy(initial=1.0, maximum=60.0)
"""nak delay after an unexpected handler exception, growing with the delivery count."""


def _event_type(payload: bytes | msgspec.Struct) -> str:
    if isinstance(payload, bytes):
        return "raw"
    tag = type(payload).__struct_config__.tag
    return str(tag) if tag is not None else type(payload).__name__


async def publish(
    js: JetStreamContext,
    subject: str,
    payload: bytes | msgspec.Struct,
    *,
    msg_id: str,
    headers: Mapping[str, str] | None = None,
    tracer: Tracer | None = None,
    parent: Context | None = None,
    metrics: BusMetrics | None = None,
    streams: Sequence[StreamSpec] | None = None,
    retry: RetryPolicy = DEFAULT_PUBLISH_RETRY,
    timeout: float | None = None,
    event_type: str | None = None,
    span_name: str | None = None,
) -> api.PubAck:
    """Publish one event to JetStream and return its PubAck.

    ``msg_id`` becomes ``Nats-Msg-Id`` so the server drops duplicates within the
    stream's duplicate window; every retry reuses it. ``parent`` re-parents the
    PRODUCER span (e.g. on a cycle root restored from KV); by default it is a child
    of the current span. ``streams`` are the specs to re-create when the server
    answers that no stream takes ``subject`` (default: :func:`default_streams`).
    """
    data = payload if isinstance(payload, bytes) else _JSON.encode(payload)
    kind = event_type or _event_type(payload)
    tracer = tracer or trace.get_tracer(__name__)
    started = time.monotonic()
    with tracer.start_as_current_span(
        span_name or f"send {subject}",
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes={
            "messaging.system": "nats",
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
            "messaging.destination.name": subject,
            "messaging.message.id": msg_id,
            "messaging.message.body.size": len(data),
            "clearance.event.type": kind,
        },
    ) as span:
        hdrs = inject_headers(None, dict(headers or {}))
        hdrs[MSG_ID] = msg_id
        last: BaseException | None = None
        for attempt in range(1, retry.attempts + 1):
            try:
                ack = await js.publish(subject, data, timeout=timeout, headers=dict(hdrs))
            except nats.js.errors.NoStreamResponseError as exc:
                # No stream answered: the server lost its state, or JetStream is not
                # up yet after a restart. Re-create what we know covers this subject.
                last = exc
                reason = "no_stream"
                await _reprovision_for(js, subject, streams, metrics)
            except (TimeoutError, nats.js.errors.ServiceUnavailableError) as exc:
                last = exc
                reason = "timeout" if isinstance(exc, TimeoutError) else "unavailable"
            except (
                nats.errors.ConnectionReconnectingError,
                nats.errors.OutboundBufferLimitError,
            ) as exc:
                last = exc
                reason = "reconnecting"
            else:
                span.set_attribute("messaging.nats.stream", ack.stream)
                span.set_attribute("messaging.nats.sequence", ack.seq)
                span.set_attribute("messaging.nats.duplicate", bool(ack.duplicate))
                if attempt > 1:
                    span.set_attribute("messaging.nats.publish_attempts", attempt)
                if metrics is not None:
                    metrics.published.labels(ack.stream, kind).inc()
                    if ack.duplicate:
                        metrics.duplicates.labels(ack.stream).inc()
                    metrics.publish_latency.labels(ack.stream).observe(time.monotonic() - started)
                return ack
            if attempt < retry.attempts:
                if metrics is not None:
                    metrics.publish_retries.labels(reason).inc()
                pause = retry.delay(attempt)
                log.info(
                    "publish attempt failed, retrying with the same msg id",
                    extra={
                        "subject": subject,
                        "msg_id": msg_id,
                        "attempt": attempt,
                        "reason": reason,
                        "retry_in": round(pause, 3),
                    },
                )
                await asyncio.sleep(pause)
        assert last is not None
        if metrics is not None:
            metrics.publish_failures.labels(reason).inc()
        span.set_status(Status(StatusCode.ERROR, f"{type(last).__name__}: {last}"))
        raise PublishError(subject, msg_id, retry.attempts, last) from last


async def _reprovision_for(
    js: JetStreamContext,
    subject: str,
    streams: Sequence[StreamSpec] | None,
    metrics: BusMetrics | None,
) -> None:
    for spec in default_streams() if streams is None else streams:
        if not spec.covers(subject):
            continue
        try:
            await ensure_stream(js, spec)
        except (TimeoutError, nats.errors.Error) as exc:
            log.info(
                "stream re-provisioning failed (will retry)",
                extra={"stream": spec.name, "error": f"{type(exc).__name__}: {exc}"},
            )
        else:
            log.warning(
                "stream ensured after a no-stream answer to a publish",
                extra={"stream": spec.name, "subject": subject},
            )
            if metrics is not None:
                metrics.reprovisions.labels(spec.name).inc()


# -- consume ---------------------------------------------------------------------------

T = TypeVar("T")


@dataclass(frozen=True)
class Delivery:
    """What a handler knows about the message it is handling, besides the event."""

    msg: Msg
    subject: str
    headers: Mapping[str, str]
    stream: str
    consumer: str
    stream_sequence: int
    num_delivered: int

    @property
    def msg_id(self) -> str | None:
        return self.headers.get(MSG_ID)

    @property
    def redelivered(self) -> bool:
        return self.num_delivered > 1


Handler = Callable[[T, Delivery], Awaitable[None]]
Decoder = Callable[[bytes], T]


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
        tracer: Tracer | None = None,
        metrics: BusMetrics | None = None,
        error_backoff: RetryPolicy = DEFAULT_HANDLER_BACKOFF,
        heartbeat_interval: float | None = None,
        dlq: StreamSpec | None = None,
        dlq_subject_for: Callable[[str], str] = dlq_subject,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be >= 1")
        self.js = js
        self.spec = spec
        self.decode = decode
        self.handler = handler
        self.concurrency = concurrency
        self.fetch_timeout = fetch_timeout
        self.tracer = tracer or trace.get_tracer(__name__)
        self.metrics = metrics
        self.error_backoff = error_backoff
        self.heartbeat_interval = heartbeat_interval or spec.ack_wait / 3
        self.dlq = dlq if dlq is not None else dlq_stream()
        self.dlq_subject_for = dlq_subject_for
        self._sub: JetStreamContext.PullSubscription | None = None
        self._loop: asyncio.Task[None] | None = None
        self._state = _State()
        self._healthy = False

    # -- lifecycle -------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.spec.durable

    @property
    def ready(self) -> bool:
        """Subscribed and fetching without server errors (a readiness check)."""
        return self._healthy and self._loop is not None and not self._loop.done()

    @property
    def in_flight(self) -> int:
        return len(self._state.tasks)

    async def start(self) -> Consumer[T]:
        """Ensure stream and consumer, bind the pull subscription, start fetching."""
        if self._loop is not None:
            raise BusError(f"consumer {self.name} already started")
        await self._provision()
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
                transient = isinstance(exc, TimeoutError | nats.errors.Error)
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
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._state.stopping.wait(), seconds)

    # -- the loop --------------------------------------------------------------------

    async def _wait_for_capacity(self) -> int:
        state = self._state
        while len(state.tasks) >= self.concurrency and not state.stopping.is_set():
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
                msgs = await sub.fetch(batch=free, timeout=self.fetch_timeout)
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
                self.metrics.in_flight.labels(self.name).set(len(self._state.tasks))

    def _observe_pending(self, pending: int) -> None:
        if self.metrics is not None:
            self.metrics.pending.labels(self.spec.stream.name, self.name).set(pending)

    def _task_done(self, task: asyncio.Task[None]) -> None:
        self._state.tasks.discard(task)
        self._state.wake.set()
        if self.metrics is not None:
            self.metrics.in_flight.labels(self.name).set(len(self._state.tasks))
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "consumer task crashed",
                exc_info=task.exception(),
                extra={"consumer": self.name},
            )

    # -- one message -----------------------------------------------------------------

    def _count(self, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.consumed.labels(self.spec.stream.name, self.name, outcome).inc()

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
            self.metrics.delivery_lag.labels(self.spec.stream.name, self.name).observe(
                max(0.0, lag)
            )
        if delivery.redelivered and self.metrics is not None:
            self.metrics.redelivered.labels(self.spec.stream.name, self.name).inc()
        with self.tracer.start_as_current_span(
            f"process {msg.subject}",
            context=extract_context(headers),
            kind=SpanKind.CONSUMER,
            attributes={
                "messaging.system": "nats",
                "messaging.operation.type": "process",
                "messaging.destination.name": msg.subject,
                "messaging.consumer.group.name": self.name,
                "messaging.message.id": delivery.msg_id or "",
                "messaging.message.body.size": len(msg.data),
                "messaging.nats.stream": delivery.stream,
                "messaging.nats.sequence": delivery.stream_sequence,
                "messaging.nats.delivery_count": delivery.num_delivered,
            },
        ) as span:
            try:
                event = self.decode(msg.data)
            except Exception as exc:
                span.set_status(Status(StatusCode.ERROR, f"undecodable: {exc}"))
                await self._dead_letter(msg, delivery, exc, context)
                return
            heartbeat = asyncio.create_task(self._heartbeat(msg))
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
                heartbeat.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await heartbeat

    async def _settle(self, op: Awaitable[None], context: Mapping[str, Any]) -> None:
        """Send ack/nak/term; failures only delay the message (the server redelivers)."""
        try:
            await op
        except Exception as exc:
            log.warning("could not acknowledge message", extra={**context, "error": repr(exc)})

    async def _heartbeat(self, msg: Msg) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            try:
                await msg.in_progress()
            except Exception as exc:
                log.debug("in_progress failed", extra={"consumer": self.name, "error": repr(exc)})

    async def _dead_letter(
        self, msg: Msg, delivery: Delivery, error: Exception, context: Mapping[str, Any]
    ) -> None:
        """Copy an undecodable message to the DLQ, then ``term`` it.

        The copy is confirmed first: if the DLQ publish fails the message is nak'ed
        (tried again later) rather than terminated, so nothing is ever dropped silently.
        """
        text = f"{type(error).__name__}: {error}"
        headers = {k: v for k, v in delivery.headers.items() if k != MSG_ID}
        headers.update(
            {
                DLQ_ERROR_HEADER: text[:1024],
                DLQ_SUBJECT_HEADER: msg.subject,
                DLQ_STREAM_HEADER: delivery.stream,
                DLQ_SEQUENCE_HEADER: str(delivery.stream_sequence),
                DLQ_CONSUMER_HEADER: delivery.consumer,
            }
        )
        if delivery.msg_id:
            headers[DLQ_MSG_ID_HEADER] = delivery.msg_id
        try:
            await publish(
                self.js,
                self.dlq_subject_for(delivery.stream),
                msg.data,
                msg_id=f"dlq:{delivery.stream}:{delivery.stream_sequence}",
                headers=headers,
                tracer=self.tracer,
                metrics=self.metrics,
                streams=(self.dlq,),
                event_type="dlq",
                retry=RetryPolicy(attempts=3),
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


async def shutdown(
    nc: NatsClient,
    consumers: Sequence[Consumer[Any]] = (),
    *,
    timeout: float = 10.0,
) -> None:
    """The shutdown order that never hangs: stop consumers (unsubscribe), then drain."""
    await asyncio.gather(*(c.stop(timeout=timeout) for c in consumers))
    if nc.is_closed:
        return
    try:
        await nc.drain()
    except (nats.errors.ConnectionClosedError, nats.errors.ConnectionReconnectingError):
        await nc.close()
