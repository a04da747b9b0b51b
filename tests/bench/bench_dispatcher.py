"""Dispatcher benchmark (not collected by pytest): queue decisions and capacity checks.

    uv run --frozen --no-sync python tests/bench/bench_dispatcher.py [--queued 5000]

Prints one JSON object:

* ``dispatch_decisions_per_s``: queue scans over ``--queued`` AppWrappers (order + capacity
  plan, the pure part of a scan) → AppWrappers decided per second;
* ``capacity_check``: for 500 / 1,000 / 5,000 pods (one node per 10 pods), the cost of one
  free-capacity computation plus one fit check, in microseconds (median of repeats), cold
  (requests parsed from the pod snapshots) and as the service runs it (requests cached per
  pod version in the state);
* ``service_scan``: one whole ``Dispatcher.scan`` of the running service over 5,000 queued
  AppWrappers and 5,000 pods (status parsing, reservations, capacity, plan);
* ``validate_per_s``: AppWrapper validations (parse + quantity parsing) per second.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.dispatcher.conftest import job_appwrapper

from clearance.events import (
    Condition,
    Container,
    NodeObject,
    NodeStatus,
    ObjectMeta,
    PodObject,
    PodSpec,
    PodStatus,
    ResourceList,
    ResourceRequirements,
)
from clearance_dispatcher.appwrapper import parse_appwrapper
from clearance_dispatcher.capacity import fits, free_capacity
from clearance_dispatcher.queueing import Candidate, plan
from clearance_dispatcher.state import ClusterState

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _nodes(n: int) -> list[NodeObject]:
    return [
        NodeObject(
            metadata=ObjectMeta(name=f"n{i}", uid=f"n{i}", resource_version="1"),
            status=NodeStatus(
                conditions=(Condition(type="Ready", status="True"),),
                allocatable=ResourceList(cpu="64", memory="256Gi", nvidia_gpu="8"),
            ),
        )
        for i in range(n)
    ]


def _pods(n: int, nodes: int) -> list[PodObject]:
    return [
        PodObject(
            metadata=ObjectMeta(
                name=f"p{i}",
                uid=f"p{i}",
                resource_version="1",
                deletion_timestamp=T0 if i % 20 == 0 else None,
            ),
            spec=PodSpec(
                node_name=f"n{i % nodes}",
                containers=(
                    Container(
                        name="c",
                        resources=ResourceRequirements(
                            requests=ResourceList(cpu="500m", memory="1Gi")
                        ),
                    ),
                ),
            ),
            status=PodStatus(phase="Running" if i % 7 else "Succeeded"),
        )
        for i in range(n)
    ]


def bench_decisions(queued: int, rounds: int) -> dict[str, float]:
    cands = [
        Candidate(
            ("ns", f"aw-{i}"),
            i % 10,
            T0 + timedelta(seconds=i),
            {"cpu": 500 * (1 + i % 8), "memory": 2**30 * (1 + i % 4)},
        )
        for i in range(queued)
    ]
    free = {"cpu": 200_000, "memory": 2**40, "nvidia.com/gpu": 16}
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        plan(cands, free)
        times.append(time.perf_counter() - start)
    best = statistics.median(times)
    return {
        "queued": queued,
        "scan_ms": round(best * 1000, 3),
        "dispatch_decisions_per_s": round(queued / best),
    }


def bench_capacity(pods: int, rounds: int) -> dict[str, float]:
    nodes = _nodes(max(1, pods // 10))
    pod_list = _pods(pods, len(nodes))
    state = ClusterState()
    for pod in pod_list:
        state.apply_pod(pod)
    out: dict[str, float] = {"pods": pods, "nodes": len(nodes)}
    for label, requests_of in (("cold_us", None), ("cached_us", state.requests_of)):
        times = []
        for _ in range(rounds):
            start = time.perf_counter()
            free = free_capacity(nodes, pod_list, requests_of=requests_of)
            fits({"cpu": 4000, "memory": 2**33}, free)
            times.append(time.perf_counter() - start)
        out[label] = round(statistics.median(times) * 1e6, 1)
    return out


def bench_scan(queued: int, pods: int, rounds: int) -> dict[str, float]:
    """A full ``Dispatcher.scan`` (status parsing, reservations, capacity, plan) over the
    service's own state, no I/O: what one queue scan costs the running dispatcher."""
    from opentelemetry import trace
    from prometheus_client import CollectorRegistry

    from clearance_dispatcher.controller import Dispatcher
    from clearance_dispatcher.metrics import DispatcherMetrics
    from clearance_dispatcher.settings import DispatcherSettings

    dispatcher = Dispatcher(
        DispatcherSettings(),
        kube=None,  # type: ignore[arg-type]  # scan() does no I/O
        js=None,  # type: ignore[arg-type]
        tracer=trace.get_tracer("bench"),
        metrics=DispatcherMetrics(CollectorRegistry()),
    )
    nodes = _nodes(max(1, pods // 10))
    for node in nodes:
        dispatcher.state.apply_node(node)
    for pod in _pods(pods, len(nodes)):
        dispatcher.state.apply_pod(pod)
    for i in range(queued):
        raw = job_appwrapper(f"aw-{i}", "ns", parallelism=1 + i % 8, priority=i % 10)
        raw["metadata"].update(
            uid=f"u-{i}",
            generation=1,
            resourceVersion=str(i + 1),
            creationTimestamp="2026-01-01T00:00:00Z",
        )
        raw["status"] = {"clearance": {"phase": "Queued", "attempt": 0}}
        dispatcher.state.apply_appwrapper(raw)
    times = []
    for _ in range(rounds):
        dispatcher.admitted.clear()
        start = time.perf_counter()
        dispatcher.scan()
        times.append(time.perf_counter() - start)
    best = statistics.median(times)
    return {
        "queued": queued,
        "pods": pods,
        "scan_ms": round(best * 1000, 2),
        "decisions_per_s": round(queued / best),
        "admitted": len(dispatcher.admitted),
    }


def bench_validation(count: int) -> float:
    raws = [job_appwrapper(f"aw-{i}", "ns", parallelism=1 + i % 8) for i in range(count)]
    start = time.perf_counter()
    for raw in raws:
        parse_appwrapper(raw)
    return round(count / (time.perf_counter() - start))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queued", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    result = {
        "benchmark": "dispatcher",
        "decisions": bench_decisions(args.queued, args.rounds),
        "capacity_check": [bench_capacity(n, args.rounds) for n in (500, 1000, 5000)],
        "service_scan": bench_scan(args.queued, 5000, max(3, args.rounds // 4)),
        "validate_per_s": bench_validation(2000),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
