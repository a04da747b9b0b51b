"""Publishing one event: Msg-Id dedup, trace context, a PRODUCER span, retries, re-provisioning.

Every retry reuses the same ``Nats-Msg-Id``, so a retry after a lost ack cannot
duplicate; a server that answers that no stream takes the subject gets the stream
re-created.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import msgspec
import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer

from clearance import attributes
from clearance.bus.backoff import DEFAULT_PUBLISH_RETRY, RetryPolicy
from clearance.bus.errors import FencedPublish, PublishError, StreamUnavailableError
from clearance.bus.headers import MSG_ID
from clearance.bus.metrics import BusMetrics
from clearance.bus.placement import note_placement
from clearance.bus.provisioning import ensure_stream, find_stream
from clearance.bus.topology import StreamSpec, default_streams
from clearance.events import Event, encode
from clearance.fencing import Fenced, Term
from clearance.telemetry import inject_headers

log = logging.getLogger(__name__)

_JSON = msgspec.json.Encoder()


def _event_type(payload: bytes | msgspec.Struct) -> str:
    if isinstance(payload, bytes):
        return "raw"
    tag = type(payload).__struct_config__.tag
    return str(tag) if tag is not None else type(payload).__name__


def producer_attributes(
    subject: str, *, msg_id: str, size: int, event_type: str
) -> dict[str, str | int]:
    """The attributes of a PRODUCER span of one JetStream publish (messaging semantic
    conventions, plus the Clearance event type): the same for every path that sends."""
    return {
        "messaging.system": "nats",
        "messaging.operation.type": "send",
        "messaging.operation.name": "publish",
        "messaging.destination.name": subject,
        "messaging.message.id": msg_id,
        "messaging.message.body.size": size,
        "clearance.event.type": event_type,
    }


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
    retry: RetryPolicy | None = None,
    timeout: float | None = None,
    event_type: str | None = None,
    span_name: str | None = None,
    fence: Term | None = None,
) -> api.PubAck:
    """Publish one event to JetStream and return its PubAck.

    ``msg_id`` becomes ``Nats-Msg-Id`` so the server drops duplicates within the
    stream's duplicate window; every retry reuses it. ``parent`` re-parents the
    PRODUCER span (e.g. on a cycle root restored from KV); by default it is a child
    of the current span. ``streams`` are the specs to re-create when the server
    answers that no stream takes ``subject`` (default: :func:`default_streams`).
    ``fence`` is the publisher's term when the event causes effects elsewhere (a leader's
    ``teardown.started``, the tracker's ``cleared``): every attempt, retries included, is
    checked against it right before it goes out, and :class:`FencedPublish` is raised once
    the term has ended — a replica woken from a freeze cannot make another act on stale state.
    """
    data = payload if isinstance(payload, bytes) else _JSON.encode(payload)
    kind = event_type or _event_type(payload)
    tracer = tracer or trace.get_tracer(__name__)
    started = time.monotonic()
    with tracer.start_as_current_span(
        span_name or f"send {subject}",
        context=parent,
        kind=SpanKind.PRODUCER,
        attributes=producer_attributes(subject, msg_id=msg_id, size=len(data), event_type=kind),
    ) as span:
        hdrs = inject_headers(None, dict(headers or {}))
        hdrs[MSG_ID] = msg_id
        last: BaseException | None = None
        retry = retry or publish_retry(js)
        attempt = 0
        while True:
            attempt += 1
            if fence is not None:
                try:
                    fence.check(f"publish {subject}")
                except Fenced as exc:
                    span.set_status(Status(StatusCode.ERROR, str(exc)))
                    raise FencedPublish(str(exc)) from None
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
                span.set_attribute(attributes.NATS_STREAM, ack.stream)
                span.set_attribute(attributes.NATS_SEQUENCE, ack.seq)
                span.set_attribute(attributes.NATS_DUPLICATE, bool(ack.duplicate))
                if attempt > 1:
                    span.set_attribute(attributes.NATS_PUBLISH_ATTEMPTS, attempt)
                if metrics is not None:
                    metrics.published.labels(ack.stream, kind).inc()
                    if ack.duplicate:
                        metrics.duplicates.labels(ack.stream).inc()
                    metrics.publish_latency.labels(ack.stream).observe(time.monotonic() - started)
                if attempt > 1:
                    await _note_recovery(js, ack.stream)
                return ack
            pause = retry.delay(attempt)
            if not retry.another(attempt, elapsed=time.monotonic() - started, pause=pause):
                break
            if metrics is not None:
                metrics.publish_retries.labels(reason).inc()
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
        raise PublishError(subject, msg_id, attempt, last) from last


async def publish_event(
    js: JetStreamContext,
    event: Event,
    *,
    tracer: Tracer | None = None,
    parent: Context | None = None,
    metrics: BusMetrics | None = None,
    fence: Term | None = None,
) -> api.PubAck:
    """Publish one Clearance event on its own subject with its own message id and type.

    The event is validated on the way out (:func:`clearance.events.encode`); the rest is
    :func:`publish`. The dispatcher's and the tracker's events all leave through here.
    """
    return await publish(
        js,
        event.subject(),
        encode(event),
        msg_id=event.msg_id(),
        tracer=tracer,
        parent=parent,
        metrics=metrics,
        event_type=event.event_type,
        fence=fence,
    )


def _unfenced() -> Term | None:
    return None


@dataclass(frozen=True, slots=True)
class EventPublisher:
    """Where one service replica's events leave: :func:`publish_event` with the replica's
    JetStream context, tracer, metrics and fencing term. ``fence`` is read at each publish,
    so the term a new leadership installs applies from then on."""

    js: JetStreamContext
    tracer: Tracer | None = None
    metrics: BusMetrics | None = None
    fence: Callable[[], Term | None] = _unfenced

    async def publish(self, event: Event, *, parent: Context | None = None) -> api.PubAck:
        return await publish_event(
            self.js,
            event,
            tracer=self.tracer,
            parent=parent,
            metrics=self.metrics,
            fence=self.fence(),
        )


async def _reprovision_for(
    js: JetStreamContext,
    subject: str,
    streams: Sequence[StreamSpec] | None,
    metrics: BusMetrics | None,
) -> None:
    """After "no stream answered": create the stream only if the server says it has none.

    In a cluster the same answer comes while an existing stream elects a leader; then the
    stream is left alone (re-creating it could only race the election) and the publish is
    simply retried with the same Msg-Id.
    """
    for spec in default_streams() if streams is None else streams:
        if not spec.covers(subject):
            continue
        try:
            found = await find_stream(js, spec.name)
            if found is not None:
                log.info(
                    "stream exists but no leader answered the publish; retrying, not re-creating",
                    extra={"stream": spec.name, "subject": subject},
                )
                note_placement(found)
                continue
            await ensure_stream(js, spec)
        except (TimeoutError, nats.errors.Error, StreamUnavailableError) as exc:
            log.info(
                "stream state unknown (no leader?); not re-provisioned, will retry",
                extra={"stream": spec.name, "error": f"{type(exc).__name__}: {exc}"},
            )
        else:
            log.warning(
                "stream re-created after a no-stream answer to a publish",
                extra={"stream": spec.name, "subject": subject},
            )
            if metrics is not None:
                metrics.reprovisions.labels(spec.name).inc()


async def _note_recovery(js: JetStreamContext, stream: str) -> None:
    """After a publish that needed retries: log the stream's (possibly new) leader."""
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1.0):
            found = await find_stream(js, stream)
        if found is not None:
            note_placement(found)


_POLICIES: weakref.WeakKeyDictionary[object, RetryPolicy] = weakref.WeakKeyDictionary()


def set_publish_retry(nc: object, policy: RetryPolicy) -> None:
    """The retry policy of every publish on ``nc`` that names none (set by ``connect``)."""
    _POLICIES[nc] = policy


def publish_retry(js: JetStreamContext) -> RetryPolicy:
    return _POLICIES.get(js._nc, DEFAULT_PUBLISH_RETRY)
