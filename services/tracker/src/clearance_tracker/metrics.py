"""Prometheus metrics of the tracker (DESIGN §6 names; no per-object or per-AppWrapper labels).

Counters move in the replica that did the work; gauges describe the teardowns this replica
owns, so summing a gauge over replicas gives the cluster-wide figure.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from clearance_tracker.deferral import REASONS as DEFERRAL_REASONS

DURATION_BUCKETS: Final = (
    1,
    2,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
    3600,
    7200,
    14400,
    28800,
    43200,
    86400,
)
LATENCY_BUCKETS: Final = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class TrackerMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.teardowns_started = Counter(
            "clearance_tracker_teardowns_started",
            "Teardowns recorded from teardown.started (a redelivery is not counted twice).",
            registry=registry,
        )
        self.cleared = Counter(
            "clearance_cleared",
            "cleared events published (one per teardown).",
            registry=registry,
        )
        self.teardown_duration = Histogram(
            "clearance_teardown_duration_seconds",
            "From teardownStartedAt to cleared.",
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.cleared_latency = Histogram(
            "clearance_tracker_cleared_latency_seconds",
            "From the last confirmation of a teardown to its cleared publish (PubAck).",
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self.objects_stuck = Gauge(
            "clearance_objects_stuck",
            "Objects of owned teardowns still present after the stuck-alert deadline.",
            registry=registry,
        )
        self.objects_stuck_diagnosed = Gauge(
            "clearance_objects_stuck_diagnosed",
            "Stuck objects of owned teardowns by a cause of their latest diagnosis (an object "
            "with several causes, e.g. a lost node and a finalizer, counts under each).",
            ["cause"],
            registry=registry,
        )
        self.teardowns_open = Gauge(
            "clearance_tracker_teardowns_open",
            "Teardowns owned by this replica and not yet cleared.",
            registry=registry,
        )
        self.escalations = Counter(
            "clearance_escalations",
            "Escalation steps carried out, by step.",
            ["step"],
            registry=registry,
        )
        self.confirmations = Counter(
            "clearance_tracker_confirmations",
            "Objects confirmed gone, by evidence.",
            ["how"],
            registry=registry,
        )
        self.verifications = Counter(
            "clearance_tracker_verifications",
            "Verification passes (quorum LIST + GETs) run.",
            registry=registry,
        )
        self.takeovers = Counter(
            "clearance_tracker_takeovers",
            "Teardowns taken over from a replica whose heartbeat stopped.",
            registry=registry,
        )
        self.kube_errors = Counter(
            "clearance_tracker_kube_errors",
            "Kubernetes API calls that failed (the work is retried).",
            ["operation"],
            registry=registry,
        )
        self.evaluations_deferred = Counter(
            "clearance_tracker_evaluations_deferred",
            "Evaluations that failed while NATS, the API server or this replica's term was "
            "unavailable, by reason (term, nats, api, timeout); the next scan does them again.",
            ["reason"],
            registry=registry,
        )
        for step in ("stuck_alert", "force_deletion", "finalizer_removal"):
            self.escalations.labels(step)
        for reason in DEFERRAL_REASONS:
            self.evaluations_deferred.labels(reason)
        for how in ("watch_deleted", "get_404", "uid_changed", "list_absent"):
            self.confirmations.labels(how)
