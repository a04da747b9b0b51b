"""Benchmark 4: dispatch decisions per second and how the capacity check grows with the queue.

The dispatcher decides in one place, :meth:`Dispatcher.scan`: every queued AppWrapper is put
in order and checked against the cluster's free capacity (allocatable of usable nodes minus
every non-terminal pod and the reservations of dispatched AppWrappers), and each is either
admitted or given a "waiting" reason. This benchmark drives the real ``Dispatcher`` object
(no process, no API calls: ``scan`` is synchronous and pure over its in-memory state) with

* a cluster of 200 nodes (64 cpu, 256 Gi) and 4,000 running pods of other workloads;
* 500 / 5,000 / 20,000 queued AppWrappers (each a Job of 1-8 pods, one priority, so every
  one is capacity-checked - the worst case of the backfill policy), of which only the
  first few hundred fit.

A whole dispatch through the API (status writes, item creation) is kubesim-bound at a few
hundred requests per second, so it would measure kubesim; the decisions are measured here,
the API path is in the clearance-latency benchmark. Each figure is repeated; min / median /
max are reported, in CPU time of the scanning thread (a scan is pure CPU work, and CPU
time is what a shared machine does not inflate), i.e. per core.
"""

from __future__ import annotations

import gc
import statistics
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry import trace
from prometheus_client import CollectorRegistry

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
from clearance_dispatcher import capacity, queueing
from clearance_dispatcher.controller import Dispatcher
from clearance_dispatcher.metrics import DispatcherMetrics
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.settings import DispatcherSettings
from clearance_dispatcher.workqueue import WorkQueue

from .common import progress, spread

T0 = datetime(2026, 12, 1, tzinfo=UTC)
NODES = 200
SIZES = (500, 5_000, 20_000)
OTHER_PODS = 4_000


def node(i: int) -> NodeObject:
    return NodeObject(
        metadata=ObjectMeta(name=f"node-{i}", uid=f"node-uid-{i}", resource_version="1"),
        status=NodeStatus(
            conditions=(Condition(type="Ready", status="True"),),
            allocatable=ResourceList(cpu="64", memory="256Gi", nvidia_gpu="8"),
        ),
    )


def pod(i: int) -> PodObject:
    return PodObject(
        metadata=ObjectMeta(
            name=f"other-{i}", namespace="other", uid=f"pod-uid-{i}", resource_version="1"
        ),
        spec=PodSpec(
            node_name=f"node-{i % NODES}",
            containers=(
                Container(
                    name="main",
                    resources=ResourceRequirements(
                        requests=ResourceList(cpu="2500m", memory="8Gi")
                    ),
                ),
            ),
        ),
        status=PodStatus(phase="Running"),
    )


def queued_appwrapper(i: int) -> dict[str, Any]:
    pods = 1 + i % 8
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {
            "name": f"aw-{i:05d}",
            "namespace": f"team-{i % 20}",
            "uid": f"aw-uid-{i:05d}",
            "resourceVersion": str(1000 + i),
            "generation": 1,
            "creationTimestamp": (T0 + timedelta(seconds=i)).isoformat().replace("+00:00", "Z"),
        },
        "spec": {
            "priority": 5,
            "schedulingSpec": {"minAvailable": pods},
            "resources": {
                "GenericItems": [
                    {
                        "replicas": 1,
                        "custompodresources": [
                            {"replicas": pods, "requests": {"cpu": "4", "memory": "16Gi"}}
                        ],
                        "generictemplate": {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "metadata": {"name": f"aw-{i:05d}"},
                            "spec": {
                                "parallelism": pods,
                                "completions": pods,
                                "template": {
                                    "spec": {
                                        "restartPolicy": "Never",
                                        "containers": [
                                            {
                                                "name": "main",
                                                "image": "registry.example/train:1.0",
                                                "resources": {
                                                    "requests": {"cpu": "4", "memory": "16Gi"}
                                                },
                                            }
                                        ],
                                    }
                                },
                            },
                        },
                    }
                ]
            },
        },
        "status": {
            "state": "Pending",
            "clearance": {"phase": "Queued", "attempt": 0},
        },
    }


def dispatcher_with(queued: int) -> Dispatcher:
    dispatcher = Dispatcher(
        Runtime(
            DispatcherSettings(),
            kube=None,  # type: ignore[arg-type] - scan() never touches the API
            js=None,  # type: ignore[arg-type]
            tracer=trace.get_tracer("bench"),
            metrics=DispatcherMetrics(CollectorRegistry()),
        )
    )
    for i in range(NODES):
        dispatcher.on_node(node(i))
    for i in range(OTHER_PODS):
        dispatcher.on_pod(pod(i))
    for i in range(queued):
        dispatcher.on_appwrapper(queued_appwrapper(i))
    return dispatcher


def _reset(dispatcher: Dispatcher) -> None:
    # Every round starts from the same queue: nothing admitted yet, no reason recorded.
    for entry in dispatcher.state.appwrappers.values():
        entry.local.admitted = False
        entry.local.waiting = None
    dispatcher.rt.queue = WorkQueue()


def timed(fn: Any, rounds: int, *, reset: Dispatcher | None = None) -> list[float]:
    out = []
    for _ in range(rounds):
        if reset is not None:
            _reset(reset)
        # CPU time of this thread: the machine may be shared, and a scan is pure CPU work.
        started = time.thread_time()
        fn()
        out.append((time.thread_time() - started) * 1000)
    return out


def dispatcher_measured(queued: int) -> tuple[Dispatcher, int]:
    """The dispatcher of :func:`dispatcher_with` and the bytes its queued AppWrappers hold
    (tracemalloc: Python allocations made while they were added, still alive)."""
    d = dispatcher_with(0)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for i in range(queued):
        d.on_appwrapper(queued_appwrapper(i))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    return d, held


def measure(queued: int, rounds: int) -> dict[str, Any]:
    d, held = dispatcher_measured(queued)
    scan_ms = timed(d.scan, rounds, reset=d)
    _reset(d)
    d.scan()
    admitted = sum(e.local.admitted for e in d.state.appwrappers.values())
    _reset(d)
    cands = d.admission.candidates()
    free = capacity.free_capacity(
        d.state.nodes.values(), d.state.pods.values(), d.admission.reservations(),
        requests_of=d.state.requests_of,
    )  # fmt: skip
    parts = {
        "candidates_ms": spread(timed(d.admission.candidates, rounds), digits=2),
        "free_capacity_ms": spread(
            timed(
                lambda: capacity.free_capacity(
                    d.state.nodes.values(),
                    d.state.pods.values(),
                    d.admission.reservations(),
                    requests_of=d.state.requests_of,
                ),
                rounds,
            ),
            digits=2,
        ),
        "plan_ms": spread(timed(lambda: queueing.plan(cands, free), rounds), digits=2),
    }
    median = statistics.median(scan_ms)
    return {
        "queued": queued,
        "admitted_per_scan": admitted,
        "scan_ms": spread(scan_ms, digits=2),
        "decisions_per_s": spread([queued / (ms / 1000) for ms in scan_ms], digits=0),
        "us_per_queued_appwrapper": round(median * 1000 / queued, 2),
        "bytes_per_queued_appwrapper": round(held / queued),
        "breakdown": parts,
    }


def run(*, rounds: int) -> dict[str, Any]:
    results = []
    for queued in SIZES:
        progress(f"dispatcher: queue scans with {queued} queued AppWrappers ({rounds} rounds)")
        results.append(measure(queued, rounds))
    base = results[0]["scan_ms"]["median"]
    for r in results:
        r["scan_cost_vs_500"] = round(r["scan_ms"]["median"] / base, 2) if base else None
        # Growth of the per-item cost against the smallest queue (1.0 = linear total cost).
        r["per_item_growth_vs_500"] = round(
            r["us_per_queued_appwrapper"] / results[0]["us_per_queued_appwrapper"], 2
        )
    return {
        "cluster": {"nodes": NODES, "other_running_pods": OTHER_PODS},
        "by_queue_length": results,
    }


def profile_scan(*, queued: int = SIZES[-1], rounds: int = 10) -> dict[str, Any]:
    """pyinstrument over ``rounds`` decision passes at ``queued`` (each from a reset queue,
    after a first pass, as measured): where a pass spends its time, for the report."""
    from pyinstrument import Profiler

    from .profiling import hot_from_session, hot_subtrees

    d = dispatcher_with(queued)
    d.scan()  # warm, as the measured passes are: parsed statuses and candidates cached
    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    for _ in range(rounds):
        _reset(d)
        d.scan()
    session = profiler.stop()
    return {
        "queued": queued,
        "rounds": rounds,
        "hot_functions": hot_from_session(session),
        "hot_project_functions": hot_subtrees(
            session, prefixes=("clearance_dispatcher", "prometheus_client")
        ),
    }
