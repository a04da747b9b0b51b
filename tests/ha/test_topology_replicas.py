"""Topology that keeps its replicas on a real 3-node cluster (issue 12, Build 1).

The defect: every service provisioned streams with default (R1) specs from its consumers and
its publish-time recovery, and "drift correction" updated R3 streams down to R1 — so one node
held each stream and losing it lost the stream. Here services (as connections) declare their
topology with different settings and in any order; every stream must end R3 on three peers,
and stay R3 when a node is lost and a service provisions again meanwhile. The same checks
against the ``r1-streams`` fault (the old behaviour) fail, proving they can.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Awaitable, Callable

import pytest
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from clearance import bus, subjects, testfaults
from clearance.natscluster import NatsCluster
from clearance.settings import CommonSettings

pytestmark = pytest.mark.timeout(120)

STREAMS = tuple(s.name for s in bus.default_streams())

Connect = Callable[[], Awaitable[NatsClient]]


@pytest.fixture
async def connect(nats_cluster: NatsCluster) -> AsyncIterator[Connect]:
    opened: list[NatsClient] = []

    async def open_one() -> NatsClient:
        settings = CommonSettings(nats_url=nats_cluster.url, nats_reconnect_wait=0.1)
        nc = await bus.connect(settings, name=f"svc-{len(opened)}", first_connect_timeout=10)
        opened.append(nc)
        return nc

    yield open_one
    for nc in opened:
        await nc.close()


async def provision_like_three_services(connect: Connect) -> None:
    """Tracker and dispatcher ask R3; a third service was started without the setting (R1)
    and then provisions a consumer and recovers a publish with the default specs."""
    tracker, dispatcher, stale = await connect(), await connect(), await connect()
    await bus.ensure_topology(tracker.jetstream(timeout=10), replicas=3)
    await bus.ensure_topology(dispatcher.jetstream(timeout=10), replicas=3)
    js = stale.jetstream(timeout=10)
    await bus.ensure_topology(js, replicas=1)
    [cycle] = [s for s in bus.default_streams() if s.name == subjects.CYCLE_STREAM]
    await bus.ensure_consumer(js, bus.ConsumerSpec(stream=cycle, durable="stale"))
    await bus.ensure_stream(js, cycle)  # what the consumer's re-provisioning does


async def replicas_by_stream(connect: Connect) -> dict[str, int]:
    js = (await connect()).jetstream(timeout=10)
    return {name: (await js.stream_info(name)).config.num_replicas or 1 for name in STREAMS}


async def test_streams_stay_r3_whatever_order_and_settings_services_start_with(
    nats_cluster: NatsCluster, connect: Connect
) -> None:
    await provision_like_three_services(connect)
    assert await replicas_by_stream(connect) == dict.fromkeys(STREAMS, 3)
    for name in STREAMS:
        placement = await asyncio.to_thread(nats_cluster.placement, name)
        assert placement is not None and sorted(placement.peers) == list(nats_cluster.names)


async def test_streams_stay_r3_after_a_node_loss_and_a_service_restart(
    nats_cluster: NatsCluster, connect: Connect
) -> None:
    await provision_like_three_services(connect)
    lost = await nats_cluster.await_stream_leader(subjects.CYCLE_STREAM)
    nats_cluster.kill(lost)
    await nats_cluster.await_stream_leader(subjects.CYCLE_STREAM, other_than=lost)
    # A service restarting now provisions again with its (stale, R1) settings.
    js = (await connect()).jetstream(timeout=10)
    for spec in bus.default_streams():
        await eventually_ensured(js, spec)
    assert await replicas_by_stream(connect) == dict.fromkeys(STREAMS, 3)
    placement = await asyncio.to_thread(nats_cluster.placement, subjects.CYCLE_STREAM)
    assert placement is not None and placement.size == 3 and lost not in placement.current


async def eventually_ensured(js: JetStreamContext, spec: bus.StreamSpec) -> None:
    """Provisioning during an election may answer "unavailable"; it is retried, never forced."""
    for _ in range(100):
        try:
            await bus.ensure_stream(js, spec)
            return
        except bus.StreamUnavailableError:
            await asyncio.sleep(0.2)
    raise AssertionError(f"{spec.name} never became available")


async def test_the_r1_fault_is_caught_by_the_replica_check(
    connect: Connect, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(testfaults.ENV, "r1-streams")
    await provision_like_three_services(connect)
    monkeypatch.delenv(testfaults.ENV)
    assert os.environ.get(testfaults.ENV) is None
    assert await replicas_by_stream(connect) != dict.fromkeys(STREAMS, 3)
