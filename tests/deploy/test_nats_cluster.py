"""The prod overlay's NATS (issue #8): three nodes forming one JetStream cluster with R3 streams,
which keep accepting events with one node down (why the PodDisruptionBudget allows exactly one).

Three nats-servers run the rendered prod config files unchanged (users, permissions, JetStream,
`server_name: $POD_NAME`, the cluster name); the wrapper config only moves listeners to loopback
and replaces the Kubernetes DNS route URLs with loopback ones. The R3 stream is created by a
service user, so the permission file is also proven in clustered mode.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from deploy_support import (
    NATS_USERS,
    NatsProcess,
    nats_config_files,
    nats_server_environment,
    render,
)
from nats.js import api

from clearance import bus, subjects
from clearance.natsserver import free_port
from clearance.settings import CommonSettings

NODES = 3


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[NatsProcess]]:
    objs = render("overlays/prod")
    [statefulset] = [o for o in objs if o["kind"] == "StatefulSet"]
    assert statefulset["spec"]["replicas"] == NODES
    conf = nats_config_files(objs)["nats.conf"]
    name = re.search(r"cluster \{\s*name: (\S+)", conf)
    assert name is not None
    routes = [free_port() for _ in range(NODES)]
    # In prod the operator creates this Secret; stand one in.
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "clearance-nats-auth", "namespace": "clearance"},
        "stringData": {f"{u}-password": f"prod-{u}" for u in NATS_USERS},
    }  # fmt: skip
    nodes = []
    for index in range(NODES):
        env = nats_server_environment([*objs, secret], pod_name=f"nats-{index}")
        route_urls = ", ".join(f"nats://127.0.0.1:{p}" for p in routes)
        extra = (
            f"cluster {{ name: {name.group(1)}, listen: 127.0.0.1:{routes[index]}, "
            f"routes: [{route_urls}] }}\n"
        )
        tmp = tmp_path_factory.mktemp(f"nats-{index}")
        nodes.append(NatsProcess(tmp, objs, env, extra=extra).start())
    try:
        for node in nodes:
            node.wait_ready(path="/healthz", timeout=30)
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def tracker_settings(url: str) -> CommonSettings:
    return CommonSettings(nats_url=url, nats_user="tracker", nats_password="prod-tracker")


async def test_three_nodes_form_one_jetstream_cluster_with_r3_streams(
    cluster: list[NatsProcess],
) -> None:
    nc = await bus.connect(tracker_settings(cluster[0].url), name="r3", first_connect_timeout=10)
    try:
        js = nc.jetstream(timeout=10)
        [spec] = [s for s in bus.default_streams() if s.name == subjects.CYCLE_STREAM]
        config = spec.to_config()
        config.num_replicas = NODES
        info = await js.add_stream(config)
        assert info.config.num_replicas == NODES
        assert info.cluster is not None and info.cluster.name == "clearance"
        assert len(info.cluster.replicas or []) == NODES - 1
        ack = await js.publish(subjects.cycle_subject("ns", "aw", "cleared"), b"{}")
        assert ack.stream == subjects.CYCLE_STREAM
    finally:
        await nc.close()


async def test_r3_stream_keeps_accepting_events_with_one_node_down(
    cluster: list[NatsProcess],
) -> None:
    cluster[2].stop()  # a drained node (the PDB allows exactly one)
    urls = ",".join(node.url for node in cluster[:2])
    nc = await bus.connect(tracker_settings(urls), name="r3-degraded", first_connect_timeout=10)
    try:
        js = nc.jetstream(timeout=10)
        for attempt in range(3):
            ack = await bus.publish(
                js, subjects.cycle_subject("ns", "aw", "cleared"), b"{}",
                msg_id=f"degraded-{attempt}", retry=bus.RetryPolicy(attempts=10, maximum=1.0),
            )  # fmt: skip
            assert ack.stream == subjects.CYCLE_STREAM
        info = await js.stream_info(subjects.CYCLE_STREAM)
        assert info.state.messages >= 4
        assert info.config.retention == api.RetentionPolicy.LIMITS
    finally:
        await nc.close()


def test_every_node_gets_its_own_server_name(cluster: list[NatsProcess]) -> None:
    for index, node in enumerate(cluster):  # logs outlive the node stopped above
        assert f"nats-{index}" in Path(node.log).read_text()
