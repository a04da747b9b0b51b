"""Benchmark of issue #5 acceptance 1: latency from the last DELETED to `cleared`.

Not collected by pytest (the file name does not start with `test_`). Run it with

    uv run --frozen --no-sync python tests/bench/bench_tracker.py [--cycles 100] [--pods 8]

It starts a private nats-server, a kubesim cluster (in this process), the real
`clearance-watcher` and `clearance-tracker` as subprocesses (`--watcher standin` publishes
the watch events from this process instead), then runs `--cycles` teardowns of one
AppWrapper, each attempt a batch/v1 Job of `--pods` running pods: delete the Job
(propagationPolicy Background, as the dispatcher does), publish `teardown.started` with the
Job in the inventory, wait for `cleared`.

Latency of one cycle = JetStream store time of `cleared` - store time of the last `DELETED`
kube event of any object the cycle confirmed (both stamped by the same nats-server clock).
Printed as one JSON document on stdout; progress goes to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "tracker"))

from nats.aio.msg import Msg  # noqa: E402
from nats.js import api  # noqa: E402

from clearance import bus, labels  # noqa: E402
from clearance.events import (  # noqa: E402
    AppWrapperRef,
    CycleCleared,
    CycleDeletionConfirmed,
    CycleTeardownStarted,
    ObjectRef,
    TeardownPolicy,
    decode,
    encode,
)
from clearance.kube import JOBS, PODS, Kube, KubeConfig, Resource  # noqa: E402
from clearance.natsserver import NatsServer  # noqa: E402
from clearance.settings import CommonSettings  # noqa: E402
from support.processes import ServiceProcess, free_port, venv_script  # noqa: E402

NAMESPACE = "bench"
AW = "bench"
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
APPWRAPPERS = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")
CRDS = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CRD", False)
CRD_FILE = ROOT / "deploy" / "crd" / "appwrapper-crd.yaml"


def cpu_seconds(proc: ServiceProcess) -> float:
    """utime + stime of a child process, from /proc (Linux)."""
    assert proc.process is not None
    fields = Path(f"/proc/{proc.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def log(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], pct: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    index = min(len(ordered) - 1, max(0, round(pct / 100 * len(ordered) + 0.5) - 1))
    return ordered[index]


def summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 2),
        "p95": round(percentile(values, 95), 2),
        "p99": round(percentile(values, 99), 2),
        "max": round(max(values), 2) if values else float("nan"),
        "mean": round(statistics.fmean(values), 2) if values else float("nan"),
    }


class Streams:
    """DELETED kube events and cleared events with their JetStream store times."""

    def __init__(self) -> None:
        self.deleted: dict[str, datetime] = {}
        self.cleared: dict[int, tuple[CycleCleared, datetime]] = {}
        self.confirmed: dict[str, datetime] = {}

    async def start(self, js: Any) -> None:
        async def on_kube(msg: Msg) -> None:
            with contextlib.suppress(Exception):
                event = decode(msg.data)
                if getattr(event, "action", None) == "DELETED":
                    uid = event.object.metadata.uid  # type: ignore[union-attr]
                    self.deleted.setdefault(uid, msg.metadata.timestamp)

        async def on_cycle(msg: Msg) -> None:
            with contextlib.suppress(Exception):
                event = decode(msg.data)
                if isinstance(event, CycleCleared):
                    self.cleared.setdefault(event.attempt, (event, msg.metadata.timestamp))
                elif isinstance(event, CycleDeletionConfirmed):
                    for confirmed in event.confirmed:
                        self.confirmed.setdefault(confirmed.object.uid, event.occurred_at)

        await js.subscribe("clearance.kube.v1.>", cb=on_kube, ordered_consumer=True)
        await js.subscribe(
            "clearance.cycle.v1.>",
            cb=on_cycle,
            ordered_consumer=True,
            deliver_policy=api.DeliverPolicy.ALL,
        )


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from tracker_support import StandInWatcher

    from kubesim.cluster import Cluster, ClusterConfig

    tmp = Path(tempfile.mkdtemp(prefix="bench-tracker-"))
    nats = NatsServer(tmp / "nats").start()
    cluster = Cluster(
        ClusterConfig(
            nodes=3,
            node_cpu="64",
            node_memory="256Gi",
            pod_start_delay=0.05,
            pod_run_time=3600.0,
            kubelet_termination_delay=0.05,
            crd_files=(str(CRD_FILE),),
        ),
        kubeconfig_path=tmp / "kubeconfig",
    )
    await cluster.start()
    processes: list[ServiceProcess] = []
    standin: StandInWatcher | None = None
    nc = await bus.connect(CommonSettings(nats_url=nats.url, nats_reconnect_wait=0.1), name="bench")
    js = nc.jetstream(timeout=5)
    kube = await Kube.connect(KubeConfig(kubeconfig=str(cluster.kubeconfig_path)))
    try:
        await bus.ensure_topology(js)
        for name in (NAMESPACE, "default"):
            with contextlib.suppress(Exception):
                await kube.create(
                    NAMESPACES,
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}},
                )
        aw_body = {
            "apiVersion": "workload.codeflare.dev/v1beta1",
            "kind": "AppWrapper",
            "metadata": {"name": AW, "namespace": NAMESPACE},
            "spec": {
                "resources": {
                    "GenericItems": [
                        {
                            "generictemplate": {
                                "apiVersion": "batch/v1",
                                "kind": "Job",
                                "metadata": {"name": AW},
                            }
                        }
                    ]
                }
            },
        }
        aw = json.loads(await kube.create(APPWRAPPERS, aw_body, namespace=NAMESPACE))
        streams = Streams()
        await streams.start(js)
        common = {
            "CLEARANCE_NATS_URL": nats.url,
            "CLEARANCE_HTTP_HOST": "127.0.0.1",
            "CLEARANCE_NATS_RECONNECT_WAIT": "100ms",
            "CLEARANCE_LOG_LEVEL": "WARNING",
            "PYTHONDONTWRITEBYTECODE": "",
        }
        tracker_port = free_port()
        command = [venv_script("clearance-tracker")]
        if args.profile:
            command = [sys.executable, "-m", "cProfile", "-o", args.profile, *command]
        tracker = ServiceProcess(
            command,
            env={
                **common,
                "CLEARANCE_KUBECONFIG": str(cluster.kubeconfig_path),
                "CLEARANCE_HTTP_PORT": str(tracker_port),
                "CLEARANCE_REPLICA_ID": "bench-tracker",
            },
            log_path=tmp / "tracker.log",
            http_port=tracker_port,
        ).start()
        processes.append(tracker)
        if args.watcher == "real":
            watcher_port = free_port()
            watcher = ServiceProcess(
                [venv_script("clearance-watcher")],
                env={
                    **common,
                    "KUBECONFIG": str(cluster.kubeconfig_path),
                    "CLEARANCE_HTTP_PORT": str(watcher_port),
                    "CLEARANCE_LEASE_NAMESPACE": "default",
                    "CLEARANCE_LEASE_IDENTITY": "bench-watcher",
                },
                log_path=tmp / "watcher.log",
                http_port=watcher_port,
            ).start()
            processes.append(watcher)
        for proc in processes:
            await asyncio.to_thread(proc.wait_ready, timeout=60)
        if args.watcher == "standin":
            standin = await StandInWatcher(kube, js, namespace=NAMESPACE).start()
        log(f"ready: watcher={args.watcher}; {args.cycles} cycles of a Job with {args.pods} pods")

        wall: list[float] = []
        cpu_before = {proc.command[0]: cpu_seconds(proc) for proc in processes}
        for attempt in range(1, args.cycles + 1):
            job = await create_job(kube, attempt=attempt, pods=args.pods)
            await wait_running(kube, attempt, args.pods)
            started_wall = time.monotonic()
            await kube.delete(JOBS, job["metadata"]["name"], namespace=NAMESPACE)
            event = CycleTeardownStarted(
                appwrapper=AppWrapperRef(namespace=NAMESPACE, name=AW, uid=aw["metadata"]["uid"]),
                attempt=attempt,
                occurred_at=datetime.now(UTC),
                inventory=(
                    ObjectRef(
                        kind="Job",
                        api_version="batch/v1",
                        namespace=NAMESPACE,
                        name=job["metadata"]["name"],
                        uid=job["metadata"]["uid"],
                    ),
                ),
                policy=TeardownPolicy(pause_seconds=0),
                cycle_traceparent=f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01",
            )
            await bus.publish(js, event.subject(), encode(event), msg_id=event.msg_id())
            deadline = time.monotonic() + 30
            while attempt not in streams.cleared:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"no cleared for attempt {attempt}:\n{tracker.output()}")
                await asyncio.sleep(0.005)
            wall.append((time.monotonic() - started_wall) * 1000)
            if attempt % 10 == 0:
                log(f"{attempt} cycles done")
        await asyncio.sleep(0.5)  # the last DELETED events of the last cycle
        cpu_ms_per_cycle = {
            Path(proc.command[0]).name: round(
                (cpu_seconds(proc) - cpu_before[proc.command[0]]) * 1000 / args.cycles, 2
            )
            for proc in processes
        }

        latencies: list[float] = []
        pickup: list[float] = []
        to_publish: list[float] = []
        early: list[float] = []
        missing_deleted = 0
        for attempt in range(1, args.cycles + 1):
            cleared, cleared_at = streams.cleared[attempt]
            times = [streams.deleted[o.uid] for o in cleared.confirmed if o.uid in streams.deleted]
            missing_deleted += len(cleared.confirmed) - len(times)
            if not times:
                continue
            last = max(times)
            delta = (cleared_at - last).total_seconds() * 1000
            (latencies if delta >= 0 else early).append(delta)
            last_uid = next(o.uid for o in cleared.confirmed if streams.deleted.get(o.uid) == last)
            if last_uid in streams.confirmed:
                seen = streams.confirmed[last_uid]
                pickup.append((seen - last).total_seconds() * 1000)
                to_publish.append((cleared_at - seen).total_seconds() * 1000)
        _status, metrics = tracker.http_get("/metrics")
        confirmations = {
            line.split('how="')[1].split('"')[0]: float(line.rsplit(" ", 1)[1])
            for line in metrics.splitlines()
            if line.startswith("clearance_tracker_confirmations_total{")
        }
        result = {
            "benchmark": "tracker_cleared_latency",
            "watcher": args.watcher,
            "cycles": args.cycles,
            "pods_per_cycle": args.pods,
            "objects_per_cycle": args.pods + 1,
            "latency_last_deleted_to_cleared_ms": summary(latencies),
            "target_p99_ms": 100.0,
            "meets_target": bool(latencies) and percentile(latencies, 99) <= 100.0,
            "cycles_measured": len(latencies),
            "cycles_cleared_before_last_deleted_event": len(early),
            "objects_without_deleted_event": missing_deleted,
            "breakdown_ms": {
                "last_deleted_stored_to_tracker_confirms": summary(pickup),
                "tracker_confirms_to_cleared_stored": summary(to_publish),
            },
            "teardown_wall_ms": summary(wall),
            "cpu_ms_per_cycle": cpu_ms_per_cycle,
            "host": {"cpus": os.cpu_count(), "load_average_1m": round(os.getloadavg()[0], 2)},
            "confirmations_by_method": confirmations,
        }
        return result
    finally:
        if standin is not None:
            await standin.stop()
        for proc in processes:
            proc.terminate(timeout=60)
        await kube.close()
        with contextlib.suppress(Exception):
            await nc.close()
        await cluster.stop()
        nats.stop()


async def create_job(kube: Kube, *, attempt: int, pods: int) -> dict[str, Any]:
    stamp = labels.stamp(appwrapper=AW, namespace=NAMESPACE, attempt=attempt)
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{AW}-{attempt}", "namespace": NAMESPACE, "labels": stamp},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {"labels": stamp},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            },
        },
    }
    return dict(json.loads(await kube.create(JOBS, body, namespace=NAMESPACE)))


async def wait_running(kube: Kube, attempt: int, pods: int) -> None:
    selector = f"{labels.MCAD_APPWRAPPER}={AW},{labels.ATTEMPT}={attempt}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        result = await kube.list(PODS, namespace=NAMESPACE, label_selector=selector)
        running = [
            p
            for p in (json.loads(bytes(raw)) for raw in result.items)
            if (p.get("status") or {}).get("phase") == "Running"
        ]
        if len(running) >= pods:
            return
        await asyncio.sleep(0.02)
    raise RuntimeError(f"pods of attempt {attempt} not running")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=100)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument("--watcher", choices=("real", "standin"), default="real")
    parser.add_argument("--profile", help="run the tracker under cProfile, stats to FILE")
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args)), indent=2))


if __name__ == "__main__":
    main()
