"""Benchmark 3: 1,000 concurrent teardowns of 8 pods each, and tracker memory per object.

Components: nats-server, ``kubesim serve --no-controllers`` (the API only: pods stay unbound,
nothing else writes) and the real ``clearance-tracker`` process; no watcher, no dispatcher.

1. 8,000 pods are created in kubesim (``--teardowns`` AppWrappers x ``--pods``, spread over
   50 namespaces, each pod labelled with its AppWrapper and attempt 1).
2. One ``teardown.started`` per AppWrapper is published with the 8 pods as inventory; the
   tracker records each (KV) and verifies it once against the API (LIST + GET).
   Tracker RSS is read before (idle) and once every teardown is recorded: the difference over
   the number of tracked objects is the memory per tracked object.
3. At once, every pod is deleted in the API (one DELETE-collection per namespace, grace 0),
   and the 8,000 pod DELETED events are injected straight into ``CLEARANCE_KUBE`` by this
   process (core NATS publish with ``Nats-Msg-Id``, flushed) - in production the watcher
   publishes them; here kubesim + a watcher would be the bottleneck of the burst, so the
   load generator replaces them.
4. Latency, on the servers' clocks: JetStream store time of the last ``cleared`` minus the
   commit time of the last pod removal in kubesim's write history. The tracker's final
   quorum LIST per teardown runs against kubesim, which is therefore part of the path.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client as NatsClient
from tests.support.serverclock import API_COMMIT, JETSTREAM_STORED, Intervals, interval

from clearance import bus, events, labels
from clearance.kube import PODS, Kube, KubeConfig, Resource
from clearance.settings import CommonSettings
from clearance.stack import LocalStack, StackConfig

from .common import CpuWindow, MiB, distribution, progress, rss_bytes
from .observing import CycleFollower, cycle_filter, fetch_history
from .profiling import ProfiledStack, hot_functions, hot_subtrees

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
SPREAD = 50
"""Namespaces the AppWrappers are spread over (kubesim scans a namespace per LIST)."""

TRACKER_ENV = {
    "CLEARANCE_LOG_LEVEL": "WARNING",
    "CLEARANCE_NATS_RECONNECT_WAIT": "250ms",
    # The scale test measures the tracker's own work: its client-side API rate limit (50/s by
    # default) would turn 1,000 verifications into 20 s of waiting. Stated in the report.
    "CLEARANCE_KUBE_QPS": "0",
}


class _Meta(msgspec.Struct):
    name: str
    namespace: str
    uid: str
    resourceVersion: str  # Kubernetes wire name
    labels: dict[str, str] = {}


class _Pod(msgspec.Struct):
    metadata: _Meta


_POD = msgspec.json.Decoder(_Pod)


def pod_body(aw: str, namespace: str, index: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{aw}-{index}",
            "labels": labels.stamp(appwrapper=aw, namespace=namespace, attempt=1),
        },
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/trainer:1.0",
                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                }
            ],
        },
    }


async def gather_limited(coros: list[Any], *, limit: int) -> list[Any]:
    slots = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with slots:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


async def tracker_counter(process: Any, name: str) -> float:
    _status, text = await asyncio.to_thread(process.http_get, "/metrics", timeout=5.0)
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def run(*, teardowns: int, pods: int, profile: bool = False) -> dict[str, Any]:
    """One measured run; with ``profile`` the tracker runs under pyinstrument instead."""
    workdir = Path(tempfile.mkdtemp(prefix="clearance-bench-tracker-"))
    config = StackConfig(
        workdir=workdir,
        nodes=0,
        kubesim_flags=("--no-controllers",),
        env=TRACKER_ENV,
        services=("tracker",),
        traces=False,
    )
    stack: LocalStack = (
        ProfiledStack(config, profiled=("tracker",), outdir=workdir / "profiles")
        if profile
        else LocalStack(config)
    )
    what = " under pyinstrument" if profile else ""
    progress(f"tracker: starting nats-server, kubesim (API only) and clearance-tracker{what}")
    async with stack:
        tracker = stack.services["tracker"]
        assert tracker.pid is not None
        kube = await Kube.connect(KubeConfig(kubeconfig=str(stack.kubeconfig)))
        nc = await bus.connect(
            CommonSettings(nats_url=stack.nats_url), name="bench", first_connect_timeout=10
        )
        js = nc.jetstream(timeout=30)
        follower = await CycleFollower(nc, cycle_filter(event="cleared")).start()
        try:
            result = await _drive(stack, tracker, kube, nc, js, follower, teardowns, pods)
        finally:
            await follower.stop()
            await kube.close()
            try:
                await asyncio.wait_for(nc.drain(), 5)
            except Exception:
                with contextlib.suppress(Exception):
                    await nc.close()
    if isinstance(stack, ProfiledStack):
        session = stack.session_path("tracker")
        result["profile"] = {
            "session": str(session),
            "hot_functions": hot_functions(session) if session.exists() else [],
            "hot_project_functions": hot_subtrees(
                session, prefixes=("clearance_tracker", "clearance/", "nats/", "msgspec")
            )
            if session.exists()
            else [],
        }
    return result


async def _drive(
    stack: LocalStack,
    tracker: Any,
    kube: Kube,
    nc: NatsClient,
    js: Any,
    follower: CycleFollower,
    teardowns: int,
    pods: int,
) -> dict[str, Any]:
    # 20 teardowns (160 pods) per namespace at every size: kubesim scans a namespace per
    # LIST, so a fixed namespace count would make each LIST grow with the size.
    spread = max(SPREAD, teardowns // 20)
    namespaces = [f"scale-{i:03d}" for i in range(spread)]
    for ns in namespaces:
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}
        with contextlib.suppress(Exception):
            await kube.create(NAMESPACES, body)
    aws = [(f"aw-{i:05d}", namespaces[i % spread]) for i in range(teardowns)]
    progress(f"tracker: creating {teardowns * pods} pods in kubesim")
    created = await gather_limited(
        [
            kube.create(PODS, pod_body(aw, ns, i), namespace=ns)
            for aw, ns in aws
            for i in range(pods)
        ],
        limit=32,
    )
    metas = [_POD.decode(raw).metadata for raw in created]
    by_aw: dict[tuple[str, str], list[_Meta]] = {}
    for meta in metas:
        by_aw.setdefault((meta.namespace, meta.labels[labels.MCAD_APPWRAPPER]), []).append(meta)

    await asyncio.sleep(1.0)
    idle_rss = rss_bytes(tracker.pid)
    progress(f"tracker: idle RSS {idle_rss / MiB:.1f} MiB; publishing {teardowns} teardowns")
    now = datetime.now(UTC)
    recorded_at_start = await tracker_counter(tracker, "clearance_tracker_teardowns_started_total")
    started = time.monotonic()
    publishes = []
    for index, (aw, ns) in enumerate(aws):
        event = events.CycleTeardownStarted(
            appwrapper=events.AppWrapperRef(namespace=ns, name=aw, uid=f"aw-uid-{index:04d}"),
            attempt=1,
            occurred_at=now,
            inventory=tuple(
                events.ObjectRef(kind="Pod", api_version="v1", namespace=ns, name=m.name, uid=m.uid)
                for m in by_aw[(ns, aw)]
            ),
            policy=events.TeardownPolicy(
                stuck_alert_seconds=600, force_deletion_seconds=0, pause_seconds=0
            ),
        )
        publishes.append(
            bus.publish(js, event.subject(), events.encode(event), msg_id=event.msg_id())
        )
    await gather_limited(publishes, limit=64)
    unanswered = 0
    while True:
        try:
            recorded = (
                await tracker_counter(tracker, "clearance_tracker_teardowns_started_total")
                - recorded_at_start
            )
        except TimeoutError:
            # The tracker's /metrics did not answer in 5 s (its event loop is busy): reported
            # as `metrics_unanswered_while_recording`, and the wait goes on.
            unanswered += 1
            recorded = 0
        if recorded >= teardowns:
            break
        if time.monotonic() - started > max(240.0, teardowns * 0.05):
            raise RuntimeError(f"the tracker recorded only {recorded}/{teardowns} teardowns")
        await asyncio.sleep(0.5)
    record_seconds = time.monotonic() - started
    await asyncio.sleep(1.0)
    loaded_rss = rss_bytes(tracker.pid)
    tracked = teardowns * pods
    progress(
        f"tracker: {teardowns} teardowns recorded in {record_seconds:.1f}s; RSS "
        f"{loaded_rss / MiB:.1f} MiB ({(loaded_rss - idle_rss) / tracked:.0f} B/object)"
    )

    # The burst: every pod goes from the API, then its DELETED event reaches NATS.
    deleted_events = [
        events.KubePodEvent(
            action="DELETED",
            observed_at=datetime.now(UTC),
            object=events.PodObject(
                metadata=events.ObjectMeta(
                    name=m.name,
                    namespace=m.namespace,
                    uid=m.uid,
                    resource_version=m.resourceVersion,
                    labels=m.labels,
                )
            ),
        )
        for m in metas
    ]
    encoded = [(e.subject(), events.encode(e), e.msg_id()) for e in deleted_events]
    cpu = CpuWindow(tracker.pid).start()
    progress(f"tracker: deleting {tracked} pods in the API and injecting their DELETED events")
    t_delete = time.time()
    await gather_limited(
        [
            kube.request(
                "DELETE",
                PODS.path(namespace=ns),
                query={"labelSelector": labels.ANY_APPWRAPPER},
                body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            )
            for ns in namespaces
        ],
        limit=8,
    )
    t_last_deletion = time.time()
    for subject, data, msg_id in encoded:
        await nc.publish(subject, data, headers={bus.MSG_ID: msg_id})
    await nc.flush()
    t_injected = time.time()
    ok = await follower.wait_until(
        lambda: len(follower.seen) >= teardowns, timeout=max(120.0, teardowns * 0.03)
    )
    cpu_seconds = cpu.cpu_used()
    # Server clocks only: the commit of the last pod removal (kubesim's write history) and
    # the JetStream store time of each cleared.
    history = await fetch_history(stack.kubesim_url, kind="Pod")
    removals = [c for c in history if c.type == "DELETED"]
    last_removal = max(removals, key=lambda c: c.rv)
    stored = sorted(s.stored for s in follower.seen)
    timed = Intervals()
    for at in stored:
        timed.add(interval(last_removal.time, at), what=f"cleared stored at {at}")
    per_teardown = timed.values
    last_cleared_ms = interval(last_removal.time, stored[-1]) if stored else None
    peak_rss = rss_bytes(tracker.pid)
    return {
        "teardowns": teardowns,
        "pods_per_teardown": pods,
        "tracked_objects": tracked,
        "all_cleared": ok,
        "cleared": len(stored),
        "api_deletion_seconds": round(t_last_deletion - t_delete, 3),
        "injection_seconds": round(t_injected - t_last_deletion, 3),
        "pod_removals_committed": len(removals),
        "last_deletion_to_last_cleared_s": None
        if last_cleared_ms is None
        else round(last_cleared_ms / 1000, 3),
        "clock_order_errors": len(timed.out_of_order),
        "clock_sources": {
            "last_deletion": API_COMMIT + ": the last pod DELETED (highest rv)",
            "cleared": JETSTREAM_STORED + " of each cycle.cleared",
        },
        "last_deletion_to_cleared_ms": distribution(per_teardown, digits=0),
        "tracker_cpu_seconds_during_burst": round(cpu_seconds, 2),
        "record_seconds": round(record_seconds, 1),
        "metrics_unanswered_while_recording": unanswered,
        "tracker_rss_idle_mib": round(idle_rss / MiB, 1),
        "tracker_rss_tracking_mib": round(loaded_rss / MiB, 1),
        "tracker_rss_after_burst_mib": round(peak_rss / MiB, 1),
        "rss_bytes_per_tracked_object": round((loaded_rss - idle_rss) / tracked),
        "rss_bytes_per_teardown": round((loaded_rss - idle_rss) / teardowns),
    }


async def growth(*, sizes: tuple[int, ...], pods: int, base: dict[str, Any]) -> dict[str, Any]:
    """The same benchmark at larger sizes: time and memory per tracked object, and how they
    grow against the ``base`` run (factor 1.0 = per-object cost constant = linear total)."""
    runs = [base]
    for teardowns in sizes:
        progress(f"tracker growth: {teardowns} teardowns x {pods} pods")
        runs.append(await run(teardowns=teardowns, pods=pods))
    rows = []
    first = None
    for r in runs:
        if "last_deletion_to_last_cleared_s" not in r or not r.get("tracked_objects"):
            rows.append({"teardowns": r.get("teardowns"), "error": "incomplete"})
            continue
        per_object_us = (r["last_deletion_to_last_cleared_s"] or 0) * 1e6 / r["tracked_objects"]
        row = {
            "teardowns": r["teardowns"],
            "tracked_objects": r["tracked_objects"],
            "all_cleared": r["all_cleared"],
            "last_deletion_to_last_cleared_s": r["last_deletion_to_last_cleared_s"],
            "us_per_object": round(per_object_us, 1),
            "cpu_us_per_object": round(
                r["tracker_cpu_seconds_during_burst"] * 1e6 / r["tracked_objects"], 1
            ),
            "rss_bytes_per_tracked_object": r["rss_bytes_per_tracked_object"],
        }
        if first is None:
            first = row
        row["per_object_time_growth"] = round(row["us_per_object"] / first["us_per_object"], 2)
        row["per_object_cpu_growth"] = round(
            row["cpu_us_per_object"] / first["cpu_us_per_object"], 2
        )
        rows.append(row)
    return {"by_size": rows}
