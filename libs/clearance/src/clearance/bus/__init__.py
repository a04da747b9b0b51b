"""The thin JetStream runtime every Clearance service talks to NATS through.

A package split by responsibility (errors, headers, topology, provisioning,
connection, metrics, backoff, publishing, consuming, dlq); this module re-exports
the public names so callers say ``bus.publish``, ``bus.Consumer`` and so on.

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

from clearance.bus.backoff import (
    DEFAULT_HANDLER_BACKOFF,
    DEFAULT_PUBLISH_RETRY,
    PUBLISH_RETRY_DEADLINE,
    RetryPolicy,
)
from clearance.bus.connection import connect, on_reconnect, shutdown
from clearance.bus.consuming import Consumer, consume
from clearance.bus.delivery import Decoder, Delivery, Handler
from clearance.bus.drift import StreamPlan, plan_stream
from clearance.bus.errors import (
    BusError,
    ConsumerDriftError,
    FencedPublish,
    PublishError,
    Retry,
    StreamUnavailableError,
)
from clearance.bus.headers import (
    DLQ_CONSUMER_HEADER,
    DLQ_ERROR_HEADER,
    DLQ_MSG_ID_HEADER,
    DLQ_SEQUENCE_HEADER,
    DLQ_STREAM_HEADER,
    DLQ_SUBJECT_HEADER,
    MSG_ID,
)
from clearance.bus.metrics import PUBLISH_FAILURE_REASONS, BusMetrics
from clearance.bus.placement import note_placement
from clearance.bus.provisioning import (
    declared,
    ensure_consumer,
    ensure_kv,
    ensure_stream,
    ensure_topology,
    find_stream,
    while_unavailable,
)
from clearance.bus.publishing import EventPublisher, producer_attributes, publish, publish_event
from clearance.bus.topology import (
    ConsumerSpec,
    KvSpec,
    StreamSpec,
    default_streams,
    dlq_stream,
    dlq_subject,
    stream_spec,
    subject_matches,
)

__all__ = [
    "DEFAULT_HANDLER_BACKOFF",
    "DEFAULT_PUBLISH_RETRY",
    "DLQ_CONSUMER_HEADER",
    "DLQ_ERROR_HEADER",
    "DLQ_MSG_ID_HEADER",
    "DLQ_SEQUENCE_HEADER",
    "DLQ_STREAM_HEADER",
    "DLQ_SUBJECT_HEADER",
    "MSG_ID",
    "PUBLISH_FAILURE_REASONS",
    "PUBLISH_RETRY_DEADLINE",
    "BusError",
    "BusMetrics",
    "Consumer",
    "ConsumerDriftError",
    "ConsumerSpec",
    "Decoder",
    "Delivery",
    "EventPublisher",
    "FencedPublish",
    "Handler",
    "KvSpec",
    "PublishError",
    "Retry",
    "RetryPolicy",
    "StreamPlan",
    "StreamSpec",
    "StreamUnavailableError",
    "connect",
    "consume",
    "declared",
    "default_streams",
    "dlq_stream",
    "dlq_subject",
    "ensure_consumer",
    "ensure_kv",
    "ensure_stream",
    "ensure_topology",
    "find_stream",
    "note_placement",
    "on_reconnect",
    "plan_stream",
    "producer_attributes",
    "publish",
    "publish_event",
    "shutdown",
    "stream_spec",
    "subject_matches",
    "while_unavailable",
]
