"""Fixtures of the tracker suite: a `Stack` per test (kubesim cluster, private nats-server,
recorder of cycle events and alerts, OTLP receiver); trackers are started by the tests."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clearance import bus
from clearance.kube import Kube, KubeConfig, Resource
from clearance.natsserver import NatsServer

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


@pytest.fixture
async def stack(
    tmp_path: Path,
    nats_server_factory: Callable[[], NatsServer],
    connect_nats,  # type: ignore[no-untyped-def]
) -> AsyncIterator[object]:
    from tracker_support import OtlpReceiver, Recorder, Stack

    from kubesim.cluster import Cluster, ClusterConfig

    server = nats_server_factory()
    cluster = Cluster(
        ClusterConfig(
            nodes=3,
            node_monitor_grace=1.0,
            node_monitor_period=0.2,
            heartbeat_interval=0.2,
            pod_start_delay=0.05,
            kubelet_termination_delay=0.1,
            default_toleration=300.0,
            podgc_period=3600.0,
        ),
        kubeconfig_path=tmp_path / "kubeconfig",
    )
    await cluster.start()
    nc = await connect_nats(server.url)
    js = nc.jetstream(timeout=5)
    await bus.ensure_topology(js)
    kube = await Kube.connect(KubeConfig(kubeconfig=str(cluster.kubeconfig_path)))
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    )
    recorder = await Recorder(js).start()
    otlp = await OtlpReceiver().start()
    the_stack = Stack(
        tmp=tmp_path,
        nats_url=server.url,
        kubeconfig=cluster.kubeconfig_path,
        nc=nc,
        js=js,
        kube=kube,
        recorder=recorder,
        otlp=otlp,
        cluster=cluster,
        nats=server,
    )
    try:
        yield the_stack
    finally:
        for proc in the_stack.trackers.values():
            proc.kill()
        await recorder.stop()
        await otlp.stop()
        await kube.close()
        await cluster.stop()


def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> None:
    """Print the trackers' logs when a test fails (the processes are gone by then)."""
    if call.when == "call" and call.excinfo is not None:
        the_stack = getattr(item, "funcargs", {}).get("stack")
        if the_stack is not None and hasattr(the_stack, "logs"):
            item.add_report_section("call", "tracker logs", the_stack.logs())
