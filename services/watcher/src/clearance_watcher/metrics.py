"""The watcher's Prometheus metrics (``clearance_watcher_`` prefix).

Labels stay bounded: ``kind`` is the subject kind (appwrapper, pod, node, item) and
``action`` the watch event type. Object names never become labels; they are in the
events and the logs.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

_LATENCY_BUCKETS = (
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
)
_LAG_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class WatcherMetrics:
    """Registered on the service's own registry (never the global one)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self.events = Counter(
            "clearance_watcher_events",
            "Kube events acknowledged by JetStream, by subject kind and watch action.",
            ["kind", "action"],
            registry=registry,
        )
        self.watch_restarts = Counter(
            "clearance_watcher_watch_restarts",
            "Watches resumed from their last resourceVersion (EOF, timeout, dropped).",
            ["kind"],
            registry=registry,
        )
        self.relists = Counter(
            "clearance_watcher_relists",
            "Consistent LISTs (initial, and after 410 Expired or a watch ERROR).",
            ["kind"],
            registry=registry,
        )
        self.resumes = Counter(
            "clearance_watcher_resumes",
            "Informers that started by resuming the watch from the last published position.",
            ["kind", "outcome"],
            registry=registry,
        )
        self.resyncs = Counter(
            "clearance_watcher_reannounced",
            "Known objects re-published so the stream holds an event younger than its "
            "retention for each (CLEARANCE_RESYNC_INTERVAL).",
            ["kind"],
            registry=registry,
        )
        self.tombstones = Counter(
            "clearance_watcher_tombstones",
            "Inferred DELETED events: objects gone from a relist that were known before.",
            ["kind"],
            registry=registry,
        )
        self.decode_failures = Counter(
            "clearance_watcher_decode_failures",
            "Objects from the API that did not decode whole into the event snapshot (each "
            "is published partially with a problem when its identity decodes).",
            ["kind"],
            registry=registry,
        )
        self.partial_events = Counter(
            "clearance_watcher_partial_events",
            "Events acknowledged with a problem: the object did not decode whole, so its "
            "identity and whatever else decoded was published.",
            ["kind"],
            registry=registry,
        )
        self.oversized = Counter(
            "clearance_watcher_oversized_events",
            "Events above the NATS max payload, by outcome (trimmed, identity, dropped).",
            ["kind", "outcome"],
            registry=registry,
        )
        self.publish_latency = Histogram(
            "clearance_watcher_publish_latency_seconds",
            "From handing an event to the publisher to its PubAck (queueing included).",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.lag = Histogram(
            "clearance_watcher_lag_seconds",
            "From reading a change off the API (observed_at) to its PubAck.",
            buckets=_LAG_BUCKETS,
            registry=registry,
        )
        self.oldest_pending = Gauge(
            "clearance_watcher_oldest_pending_seconds",
            "Age of the oldest event not yet acknowledged (0 when none): lag behind the API.",
            registry=registry,
        )
        self.in_flight = Gauge(
            "clearance_watcher_in_flight",
            "Publishes awaiting their PubAck (bounded by CLEARANCE_MAX_IN_FLIGHT).",
            registry=registry,
        )
        self.publish_stalls = Counter(
            "clearance_watcher_publish_stalls",
            "Publishes that exhausted one retry round and are being retried again.",
            registry=registry,
        )
        self.informers = Gauge(
            "clearance_watcher_informers",
            "Running informers (one per resource and namespace).",
            ["kind"],
            registry=registry,
        )
        self.unserved_kinds = Gauge(
            "clearance_watcher_unserved_kinds",
            "Kinds named in AppWrapper generic items that the API server does not serve.",
            registry=registry,
        )
        self.unserved_reports = Counter(
            "clearance_watcher_unserved_kind_reports",
            "Times an AppWrapper was found naming a kind the API server does not serve.",
            registry=registry,
        )
        self.leader = Gauge(
            "clearance_watcher_leader",
            "1 while this replica holds the Lease and publishes, else 0.",
            registry=registry,
        )
        self.synced = Gauge(
            "clearance_watcher_synced",
            "1 once every initial LIST (or watch resume) of this leadership is published.",
            registry=registry,
        )
