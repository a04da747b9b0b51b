"""The cluster fixture itself: it forms, reports who leads, and survives what the HA tests do.

Each behaviour the HA tests rely on is shown once on a real 3-node cluster: a meta leader
agreed by all nodes; an R3 stream placed on all three with a leader; kill -9 of that leader
elects another one while the stream keeps its data; SIGSTOP makes a node answer nothing until
SIGCONT; a node started again on its own store rejoins and reports healthy (caught up).
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest
from nats.js import api

from clearance import bus
from clearance.natscluster import ClusterError, NatsCluster
from clearance.settings import CommonSettings

pytestmark = [pytest.mark.timeout(90)]

STREAM = "HA_FIXTURE"


async def r3_stream(cluster: NatsCluster, *, messages: int = 3) -> None:
    nc = await bus.connect(
        CommonSettings(nats_url=cluster.url, nats_reconnect_wait=0.1),
        name="fixture",
        first_connect_timeout=10,
    )
    try:
        js = nc.jetstream(timeout=10)
        await js.add_stream(api.StreamConfig(name=STREAM, subjects=["ha.>"], num_replicas=3))
        for n in range(messages):
            # A stream just created may have no leader yet: "no responders" until it has one.
            await bus.publish(
                js,
                "ha.x",
                f"{n}".encode(),
                msg_id=f"x-{n}",
                streams=(),
                retry=bus.RetryPolicy(attempts=20),
            )
    finally:
        await nc.close()


async def test_nodes_agree_on_one_meta_leader(nats_cluster: NatsCluster) -> None:
    leader = nats_cluster.meta_leader()
    assert leader in nats_cluster.names
    assert all(nats_cluster.healthy(n) for n in nats_cluster.names)


async def test_an_r3_stream_is_placed_on_every_node(nats_cluster: NatsCluster) -> None:
    await r3_stream(nats_cluster)
    leader = await nats_cluster.await_stream_leader(STREAM)
    placement = nats_cluster.placement(STREAM)
    assert placement is not None and placement.leader == leader
    assert sorted(placement.peers) == sorted(nats_cluster.names)


async def test_killing_the_stream_leader_elects_another(nats_cluster: NatsCluster) -> None:
    await r3_stream(nats_cluster)
    old = await nats_cluster.await_stream_leader(STREAM)
    assert nats_cluster.kill(old) == old
    new = await nats_cluster.await_stream_leader(STREAM, other_than=old)
    assert new != old and nats_cluster.running(new)
    assert not nats_cluster.running(old)


async def test_a_frozen_node_answers_nothing_until_thawed(nats_cluster: NatsCluster) -> None:
    nats_cluster.freeze("n1")
    assert not nats_cluster.running("n1")
    assert await asyncio.to_thread(nats_cluster.monitor, "n1", "/healthz") == (0, {})
    nats_cluster.thaw("n1")
    await nats_cluster.await_healthy("n1", timeout=20)


async def test_a_restarted_node_rejoins_on_its_store_and_catches_up(
    nats_cluster: NatsCluster,
) -> None:
    await r3_stream(nats_cluster, messages=3)
    nats_cluster.kill("n2")
    await asyncio.sleep(0.2)
    await r3_stream_more(nats_cluster)  # written while n2 was down
    await nats_cluster.astart_node("n2")
    await nats_cluster.await_healthy("n2", timeout=30)
    await nats_cluster.await_caught_up("n2", STREAM, timeout=30)
    state = await asyncio.to_thread(nats_cluster.stream_state, "n2", STREAM)
    assert state is not None and state["messages"] == 4  # the one it missed included


async def r3_stream_more(cluster: NatsCluster) -> None:
    nc = await bus.connect(
        CommonSettings(nats_url=cluster.url, nats_reconnect_wait=0.1),
        name="fixture",
        first_connect_timeout=10,
    )
    try:
        js = nc.jetstream(timeout=10)
        await bus.publish(
            js, "ha.y", b"late", msg_id="late", streams=(), retry=bus.RetryPolicy(attempts=20)
        )
    finally:
        await nc.close()


def test_an_unknown_node_is_refused(tmp_path: Path) -> None:
    cluster = NatsCluster(tmp_path, size=3)  # not started: naming needs no process
    with pytest.raises(ClusterError):
        cluster.index("n9")


async def test_a_first_cluster_start_that_loses_a_port_race_draws_new_ports(
    tmp_path: Path,
) -> None:
    """CI saw a node's monitor port taken by another worker's listener between the draw and
    the bind: the whole cluster (routes name each other) is laid out again and starts."""
    cluster = NatsCluster(tmp_path, size=3)
    taken = cluster.nodes[1].monitor_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            await cluster.astart()
            assert cluster.nodes[1].monitor_port != taken
            assert cluster.meta_leader() in cluster.names
        finally:
            await cluster.astop()
