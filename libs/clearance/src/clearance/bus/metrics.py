"""The bus's Prometheus metrics, held by one `BusMetrics` per collector registry: events
published, deduplicated, retried and failed (with the failure reasons) and publish
latency; events consumed, redelivered and dead-lettered, messages in flight and pending,
delivery lag; and stream re-provisions. The other bus modules update these; nothing else
in the bus touches prometheus_client.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

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
