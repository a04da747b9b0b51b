"""The watcher's Prometheus metrics (``clearance_watcher_`` prefix).

Labels stay bounded: ``kind`` is the subject kind (appwrapper, pod, node, item) and
``action`` the watch event type. Object names never become labels; they are in the
events and the logs.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge
from prometheus_client.metrics_core import HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from clearance import bus
from clearance.events import KubeEvent

_go_float: Callable[[float], str] = floatToGoString  # unannotated upstream
"""The ``le`` spelling ``Histogram`` uses (``+Inf``, ``2.5``, ``30.0``)."""

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
        self.publish_latency = LoopHistogram(
            "clearance_watcher_publish_latency_seconds",
            "From handing an event to the publisher to its PubAck (queueing included).",
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self.lag = LoopHistogram(
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


_CREATED: bool = os.environ.get("PROMETHEUS_DISABLE_CREATED_SERIES", "False").lower() not in (
    "true",
    "1",
    "t",
)
"""Whether histograms export ``_created``: prometheus_client's own switch, read the same way."""


class LoopHistogram(Collector):
    """An unlabelled histogram observed from the event loop's thread only, without a lock.

    ``Histogram.observe`` takes a lock twice (bucket and sum, ~0.8 µs); the publisher
    observes two histograms per acknowledged event. Here an observation is a bisect and two
    plain additions; a scrape (another thread) reads a copy of the counts. The exposition is
    ``Histogram``'s: ``_bucket`` (cumulative, same ``le`` spelling), ``_count``, ``_sum`` and
    ``_created``; tests/watcher/test_watcher_units.py compares the two.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        *,
        buckets: Sequence[float],
        registry: CollectorRegistry,
    ) -> None:
        self.name = name
        self.documentation = documentation
        bounds = [float(bound) for bound in buckets]
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self._bounds = bounds
        self._le = [_go_float(bound) for bound in bounds]
        self._counts = [0] * len(bounds)
        self._sum = 0.0
        self._created = time.time()
        registry.register(self)

    def observe(self, amount: float) -> None:
        # First bucket whose upper bound is >= amount, as Histogram.observe picks it.
        self._counts[bisect_left(self._bounds, amount)] += 1
        self._sum += amount

    def collect(self) -> Iterator[Metric]:
        counts, total = list(self._counts), self._sum
        family = HistogramMetricFamily(
            self.name,
            self.documentation,
            buckets=list(zip(self._le, accumulate(counts), strict=True)),
            sum_value=total,
        )
        if _CREATED:
            family.samples.append(Sample(self.name + "_created", {}, self._created, None, None))
        yield family


class AckTally:
    """The counters of acknowledged events, added up and applied once per event-loop turn.

    A labelled ``Counter.inc`` takes a lock (~0.5 µs); the watcher acknowledges tens of
    thousands of events per second, mostly a whole burst of them in one turn of the event
    loop (one socket read of PubAcks). Each ack adds 1 to a plain dict here; the first one
    of a turn schedules :meth:`flush` (``call_soon``), which applies one ``inc(n)`` per
    label set. A scrape therefore sees an ack at most one loop turn late; totals are exact.
    """

    def __init__(
        self, metrics: WatcherMetrics, bus_metrics: bus.BusMetrics | None, *, stream: str
    ) -> None:
        self.metrics = metrics
        self.bus_metrics = bus_metrics
        self.stream = stream
        self._events: dict[tuple[str, str], int] = {}
        self._partial: dict[str, int] = {}
        self._published: dict[str, int] = {}
        self._duplicates = 0
        self._scheduled = False
        self._children: dict[tuple[object, ...], Any] = {}

    def acknowledged(self, event: KubeEvent) -> None:
        """``event`` is stored (watcher counters)."""
        key = (event.kube_kind, event.action)
        self._events[key] = self._events.get(key, 0) + 1
        if event.problem is not None:
            self._partial[event.kube_kind] = self._partial.get(event.kube_kind, 0) + 1
        self._schedule()

    def published(self, event_type: str, *, duplicate: bool) -> None:
        """A pipelined send was acknowledged (the bus counters ``bus.publish`` keeps itself)."""
        if self.bus_metrics is None:
            return
        self._published[event_type] = self._published.get(event_type, 0) + 1
        if duplicate:
            self._duplicates += 1
        self._schedule()

    def _schedule(self) -> None:
        if not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Apply what was added up (also called directly when the publisher stops)."""
        self._scheduled = False
        for (kind, action), count in self._events.items():
            self._child(self.metrics.events, kind, action).inc(count)
        for kind, count in self._partial.items():
            self._child(self.metrics.partial_events, kind).inc(count)
        self._events.clear()
        self._partial.clear()
        if self.bus_metrics is None:
            return
        for event_type, count in self._published.items():
            self._child(self.bus_metrics.published, self.stream, event_type).inc(count)
        if self._duplicates:
            self.bus_metrics.duplicates.labels(self.stream).inc(self._duplicates)
        self._published.clear()
        self._duplicates = 0

    def _child(self, counter: Counter, *labels: str) -> Any:
        key = (id(counter), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = counter.labels(*labels)
        return child
