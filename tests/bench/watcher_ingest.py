"""Benchmark 2: pod watch events per second through the watcher's decode + publish path.

Same input for every path: ``--events`` MODIFIED watch lines of realistic pods (managedFields,
annotations, env, volumes, container statuses; ~4.5 KB each, as a kubelet-updated pod is).

* **decode** - the watcher's per-line work (``clearance_watcher.watching`` → ``decoding``):
  ``WatchLine`` decode keeping the object raw, msgspec decode of the raw object straight into
  the slim ``PodObject`` (``Codec.decode``), the ``KubePodEvent`` and its JSON bytes;
* **decode + publish** - the same, then each event handed to the watcher's own ``Publisher``
  (per-subject ordering, bounded in flight, ``Nats-Msg-Id``, PubAck awaited) against a real
  ``nats-server -js`` child process, timed until the last PubAck;
* **model** - kubernetes-asyncio's own per-line watch decode of the same lines,
  ``Watch.unmarshal_event(line, "V1Pod")``: ``json.loads`` + ``ApiClient.deserialize`` into
  ``V1Pod`` model objects (what a kubernetes-asyncio informer does per event).

Everything runs in this one single-threaded process, so events per CPU-second of this
process are events per second per core; nats-server's own CPU is reported beside it. The
input is generated up front (no kubesim: it cannot produce thousands of pod changes per second,
it would be the bottleneck).
"""

from __future__ import annotations

import json
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
from prometheus_client import CollectorRegistry

from clearance import bus, subjects
from clearance.kube import PODS, WatchLine
from clearance.natsserver import NatsServer
from clearance.settings import CommonSettings
from clearance_watcher.decoding import Codec, encode_event
from clearance_watcher.metrics import WatcherMetrics
from clearance_watcher.publishing import Progress, Publisher

from .common import CpuWindow, progress, spread


def pod_line(index: int) -> bytes:
    """One MODIFIED watch line of a fully populated, running pod of a gang job."""
    job = f"job-{index // 8}"
    now = "2026-12-02T10:00:00Z"
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-worker-{index % 8}",
            "namespace": f"team-{index % 16}",
            "uid": f"{index:08d}-1111-2222-3333-444455556666",
            "resourceVersion": str(100_000 + index),
            "generation": 1,
            "creationTimestamp": now,
            "labels": {
                "appwrapper.mcad.ibm.com": job,
                "workload.codeflare.dev/appwrapper": job,
                "clearance.dev/namespace": f"team-{index % 16}",
                "clearance.dev/attempt": "1",
                "batch.kubernetes.io/job-name": job,
                "batch.kubernetes.io/controller-uid": "aaaa-bbbb-cccc",
            },
            "annotations": {
                "kubectl.kubernetes.io/last-applied-configuration": "x" * 600,
                "batch.kubernetes.io/job-completion-index": str(index % 8),
            },
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job,
                    "uid": "aaaa-bbbb-cccc",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "finalizers": ["batch.kubernetes.io/job-tracking"],
            "managedFields": [
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": now,
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {f"f:field{i}": {} for i in range(20)},
                }
                for manager in ("kube-controller-manager", "kubelet")
            ],
        },
        "spec": {
            "nodeName": f"node-{index % 50}",
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 30,
            "serviceAccountName": "default",
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1.0",
                    "command": ["python", "-m", "train"],
                    "args": ["--epochs", "10"],
                    "env": [{"name": f"VAR_{i}", "value": str(i)} for i in range(10)],
                    "resources": {
                        "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                        "limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                    },
                    "volumeMounts": [
                        {"name": "data", "mountPath": "/data"},
                        {"name": "token", "mountPath": "/var/run/secrets", "readOnly": True},
                    ],
                    "imagePullPolicy": "IfNotPresent",
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                }
            ],
            "volumes": [
                {"name": "data", "emptyDir": {}},
                {
                    "name": "token",
                    "projected": {
                        "sources": [{"serviceAccountToken": {"path": "token"}}],
                        "defaultMode": 420,
                    },
                },
            ],
            "tolerations": [
                {
                    "key": key,
                    "operator": "Exists",
                    "effect": "NoExecute",
                    "tolerationSeconds": 300,
                }
                for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
            ],
        },
        "status": {
            "phase": "Running",
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "podIPs": [{"ip": "10.1.0.1"}],
            "qosClass": "Guaranteed",
            "startTime": now,
            "conditions": [
                {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [
                {
                    "name": "main",
                    "image": "registry.example.com/train:1.0",
                    "imageID": "registry.example.com/train@sha256:" + "0" * 64,
                    "containerID": "containerd://" + "1" * 64,
                    "ready": True,
                    "restartCount": 0,
                    "started": True,
                    "state": {"running": {"startedAt": now}},
                    "lastState": {},
                }
            ],
        },
    }
    return json.dumps({"type": "MODIFIED", "object": obj}).encode() + b"\n"


_WATCH_LINE = msgspec.json.Decoder(WatchLine)


def run_decode(lines: list[bytes]) -> tuple[float, float]:
    """(wall s, CPU s) of the watcher's decode path over ``lines``."""
    codec = Codec(PODS, "pod")
    wall, cpu = time.perf_counter(), time.process_time()
    for line in lines:
        watch_line = _WATCH_LINE.decode(line)
        snapshot = codec.decode(watch_line.object)
        encode_event(codec.event("MODIFIED", snapshot, observed_at=datetime.now(UTC)))
    return time.perf_counter() - wall, time.process_time() - cpu


async def run_model(lines: list[bytes]) -> tuple[float, float]:
    """(wall s, CPU s) of kubernetes-asyncio's per-line watch decode into V1Pod."""
    from kubernetes_asyncio import watch

    w = watch.Watch()
    try:
        wall, cpu = time.perf_counter(), time.process_time()
        for line in lines:
            event = w.unmarshal_event(line, "V1Pod")
            assert event["object"].metadata.name
        return time.perf_counter() - wall, time.process_time() - cpu
    finally:
        await w.close()


async def run_publish(lines: list[bytes], *, repeat: int) -> dict[str, Any]:
    """decode + publish through ``Publisher`` to a real nats-server, ``repeat`` times."""
    rates: list[float] = []
    per_core: list[float] = []
    nats_cpu: list[float] = []
    stored = 0
    with tempfile.TemporaryDirectory() as tmp:
        server = NatsServer(Path(tmp) / "store").start()
        try:
            nc = await bus.connect(CommonSettings(nats_url=server.url), name="bench-watcher")
            js = nc.jetstream(timeout=10)
            kube_stream = [s for s in bus.default_streams() if s.name == subjects.KUBE_STREAM]
            await bus.ensure_topology(js, streams=kube_stream, buckets=())
            codec = Codec(PODS, "pod")
            assert server.pid is not None
            for run in range(repeat):
                # Each run republishes new object versions (new resourceVersions, so new
                # Msg-Ids): every event is stored, none is dropped as a duplicate.
                batch = [line.replace(b'"resourceVersion": "', b'"resourceVersion": "%d' % run)
                         for line in lines]  # fmt: skip
                publisher = Publisher(
                    js,
                    max_in_flight=256,
                    publish_timeout=10,
                    metrics=WatcherMetrics(CollectorRegistry()),
                    bus_metrics=bus.BusMetrics(CollectorRegistry()),
                )
                prog = Progress("core/v1/pods@*")
                window = CpuWindow(server.pid).start()
                wall, cpu = time.perf_counter(), time.process_time()
                for line in batch:
                    snapshot = codec.decode(_WATCH_LINE.decode(line).object)
                    event = codec.event("MODIFIED", snapshot, observed_at=datetime.now(UTC))
                    await publisher.submit(
                        event, progress=prog, rv=snapshot.metadata.resource_version
                    )
                assert await publisher.flush(timeout=120)
                elapsed = time.perf_counter() - wall
                used = time.process_time() - cpu
                rates.append(len(batch) / elapsed)
                per_core.append(len(batch) / used)
                nats_cpu.append(window.cpu_used())
            info = await js.stream_info(subjects.KUBE_STREAM)
            stored = info.state.messages
            await nc.drain()
        finally:
            server.stop()
    return {
        "events_per_s": spread(rates, digits=0),
        "events_per_cpu_s_watcher_side": spread(per_core, digits=0),
        "nats_server_cpu_s_per_run": spread(nats_cpu, digits=2),
        "stored_in_jetstream": stored,
        "expected_stored": len(lines) * repeat,
    }


async def run(*, events: int, model_events: int, repeat: int) -> dict[str, Any]:
    """``model_events``: the model path is ~60x slower, so it runs on the first lines only
    (rates are per event, from the same input)."""
    lines = [pod_line(i) for i in range(events)]
    progress(f"watcher: {events} pod watch lines, {repeat} runs per path")
    decode_runs = [run_decode(lines) for _ in range(repeat)]
    progress(f"watcher: decode path done; kubernetes-asyncio model path ({model_events} lines)")
    model_lines = lines[:model_events]
    model_runs = [await run_model(model_lines) for _ in range(repeat)]
    progress("watcher: model path done; decode + publish to nats-server")
    publish = await run_publish(lines, repeat=repeat)
    decode_rate = [events / w for w, _ in decode_runs]
    decode_core = [events / c for _, c in decode_runs]
    model_rate = [len(model_lines) / w for w, _ in model_runs]
    model_core = [len(model_lines) / c for _, c in model_runs]
    ratio = sorted(d / m for d, m in zip(decode_core, model_core, strict=True))
    return {
        "events": events,
        "model_events": len(model_lines),
        "line_bytes_avg": round(sum(map(len, lines)) / len(lines)),
        "decode_events_per_s": spread(decode_rate, digits=0),
        "decode_events_per_cpu_s": spread(decode_core, digits=0),
        "model_events_per_s": spread(model_rate, digits=0),
        "model_events_per_cpu_s": spread(model_core, digits=0),
        "decode_vs_model_per_core": spread(ratio, digits=1),
        "decode_publish": publish,
    }


async def profile_publish(*, events: int) -> dict[str, Any]:
    """pyinstrument over one decode + publish run in this process (asyncio-aware)."""
    from pyinstrument import Profiler

    from .profiling import hot_from_session, hot_subtrees

    lines = [pod_line(i) for i in range(events)]
    profiler = Profiler(interval=0.0005, async_mode="disabled")
    profiler.start()
    await run_publish(lines, repeat=1)
    session = profiler.stop()
    return {
        "events": events,
        "hot_functions": hot_from_session(session),
        "hot_project_functions": hot_subtrees(
            session,
            prefixes=("clearance_watcher", "clearance/", "nats/", "opentelemetry", "msgspec"),
        ),
    }
