"""Prometheus metrics of the dispatcher (prefix ``clearance_dispatcher_``, no per-object labels)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class DispatcherMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.dispatches = Counter(
            "clearance_dispatcher_dispatches",
            "Attempts whose generic items were all created (kind: first or redispatch).",
            ["kind"],
            registry=registry,
        )
        self.requeues = Counter(
            "clearance_dispatcher_requeues",
            "Requeue decisions (too few running pods after the wait).",
            registry=registry,
        )
        self.failures = Counter(
            "clearance_dispatcher_failures",
            "AppWrappers turned Failed or refused, by reason.",
            ["reason"],
            registry=registry,
        )
        # Exported at 0, so that the first requeue-limit failure is an increase to alert on.
        self.failures.labels("MaxNumRequeuingsReached")
        self.completions = Counter(
            "clearance_dispatcher_completions",
            "AppWrappers that reached Completed.",
            registry=registry,
        )
        self.cleared = Counter(
            "clearance_dispatcher_cleared",
            "cleared events handled, by outcome (accepted, stale, unknown).",
            ["outcome"],
            registry=registry,
        )
        self.queue_length = Gauge(
            "clearance_dispatcher_queue_length",
            "AppWrappers waiting for dispatch (Queued, spec valid).",
            registry=registry,
        )
        self.appwrappers = Gauge(
            "clearance_dispatcher_appwrappers",
            "AppWrappers known, by phase.",
            ["phase"],
            registry=registry,
        )
        self.redispatch_latency = Histogram(
            "clearance_dispatcher_redispatch_latency_seconds",
            "From clearedAt to the redispatch of the next attempt (the pause included).",
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 90, 120, 300, 600, 1800, 3600),
            registry=registry,
        )
        self.capacity_check = Histogram(
            "clearance_dispatcher_queue_scan_seconds",
            "Duration of one queue scan (free capacity + dispatch plan).",
            buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
            registry=registry,
        )
        self.status_conflicts = Counter(
            "clearance_dispatcher_status_conflicts",
            "Status writes that gave up after repeated 409 Conflicts.",
            registry=registry,
        )
        self.leader = Gauge(
            "clearance_dispatcher_leader",
            "1 while this replica holds the dispatcher Lease.",
            registry=registry,
        )
