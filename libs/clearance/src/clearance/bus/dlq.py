"""The dead-letter copy: an undecodable message goes to ``clearance.dlq.v1.<stream>``.

The copy keeps the payload and headers (minus the Msg-Id, which would dedup against
the original) and adds where it came from and why it could not be decoded.
"""

from __future__ import annotations

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from opentelemetry.trace import Tracer

from clearance.bus.backoff import RetryPolicy
from clearance.bus.headers import (
    DLQ_CONSUMER_HEADER,
    DLQ_ERROR_HEADER,
    DLQ_MSG_ID_HEADER,
    DLQ_SEQUENCE_HEADER,
    DLQ_STREAM_HEADER,
    DLQ_SUBJECT_HEADER,
    MSG_ID,
)
from clearance.bus.metrics import BusMetrics
from clearance.bus.publishing import publish
from clearance.bus.topology import StreamSpec


async def copy_to_dlq(
    js: JetStreamContext,
    msg: Msg,
    *,
    headers: dict[str, str],
    stream: str,
    sequence: int,
    consumer: str,
    msg_id: str | None,
    error: str,
    dlq: StreamSpec,
    subject: str,
    tracer: Tracer,
    metrics: BusMetrics | None,
) -> None:
    """Publish the copy (confirmed by a PubAck); raises :class:`PublishError` if it fails."""
    copied = {k: v for k, v in headers.items() if k != MSG_ID}
    copied.update(
        {
            DLQ_ERROR_HEADER: error[:1024],
            DLQ_SUBJECT_HEADER: msg.subject,
            DLQ_STREAM_HEADER: stream,
            DLQ_SEQUENCE_HEADER: str(sequence),
            DLQ_CONSUMER_HEADER: consumer,
        }
    )
    if msg_id:
        copied[DLQ_MSG_ID_HEADER] = msg_id
    await publish(
        js,
        subject,
        msg.data,
        msg_id=f"dlq:{stream}:{sequence}",
        headers=copied,
        tracer=tracer,
        metrics=metrics,
        streams=(dlq,),
        event_type="dlq",
        retry=RetryPolicy(attempts=3),
    )
