"""The watcher's pipelined publishing: a bounded window, order per object, no loss, no copies.

Against a private ``nats-server -js`` (the watcher's ``Publisher`` in this process): many
objects' events are in flight at once, each object's events must be stored in the order
they were submitted, and an ack that does not come in time is sent again under the same
``Nats-Msg-Id`` (stored once).
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime

from nats.js import api
from prometheus_client import CollectorRegistry

from clearance import bus, events, subjects
from clearance.natsserver import NatsServer
from clearance_watcher.ackinbox import HEADER_END, HEADER_START, AckInbox, header_line
from clearance_watcher.metrics import WatcherMetrics
from clearance_watcher.publishing import Progress, Publisher

OBJECTS = 40
VERSIONS = 25


def pod_event(name: str, version: int) -> events.KubePodEvent:
    return events.KubePodEvent(
        action="MODIFIED",
        observed_at=datetime.now(UTC),
        object=events.PodObject(
            metadata=events.ObjectMeta(
                name=name, namespace="team", uid=f"uid-{name}", resource_version=str(version)
            )
        ),
    )


async def publish_all(
    server: NatsServer,
    connect_nats: Callable[..., object],
    *,
    timeout: float,
    window: int,
    freeze: float = 0.0,
) -> tuple[dict[str, list[int]], int, int, float]:
    """Submit VERSIONS events for each of OBJECTS pods, interleaved; return the stored
    resourceVersions per subject, the stored count, the peak window and the stalls.

    ``freeze``: halfway, stop nats-server (SIGSTOP) for that long with events in flight,
    so their acks come after the deadline."""
    nc = await connect_nats(server.url)  # type: ignore[operator]
    js = nc.jetstream(timeout=10)
    kube = [s for s in bus.default_streams() if s.name == subjects.KUBE_STREAM]
    await bus.ensure_topology(js, streams=kube, buckets=())
    metrics = WatcherMetrics(CollectorRegistry())
    publisher = Publisher(
        js, max_in_flight=window, publish_timeout=timeout, metrics=metrics, retry_pause=0.01
    )
    progress = Progress("core/v1/pods@*")
    peak = 0
    for version in range(1, VERSIONS + 1):
        if freeze and version == VERSIONS // 2:
            assert server.pid is not None
            os.kill(server.pid, signal.SIGSTOP)
            try:
                await asyncio.sleep(freeze)
            finally:
                os.kill(server.pid, signal.SIGCONT)
        for index in range(OBJECTS):
            event = pod_event(f"pod-{index}", version * 1000 + index)
            await publisher.submit(event, progress=progress, rv=str(version * 1000 + index))
            peak = max(peak, publisher.in_flight)
    assert await publisher.flush(timeout=60)
    sub = await js.subscribe(
        "clearance.kube.v1.pod.>",
        ordered_consumer=True,
        config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
    )
    stored: dict[str, list[int]] = {}
    info = await js.stream_info(subjects.KUBE_STREAM)
    for _ in range(info.state.messages):
        msg = await sub.next_msg(timeout=10)
        event = events.decode(msg.data)
        assert isinstance(event, events.KubePodEvent)
        rv = int(event.object.metadata.resource_version)
        stored.setdefault(msg.subject, []).append(rv)
    stalls = metrics.publish_stalls._value.get()
    await sub.unsubscribe()
    await publisher.abort()
    return stored, info.state.messages, peak, stalls


def in_order(stored: dict[str, list[int]]) -> bool:
    return all(rvs == sorted(rvs) for rvs in stored.values())


async def test_each_objects_events_are_stored_in_submission_order(
    nats_server_factory: Callable[[], NatsServer], connect_nats: Callable[..., object]
) -> None:
    stored, count, peak, _ = await publish_all(
        nats_server_factory(), connect_nats, timeout=5.0, window=64
    )
    assert count == OBJECTS * VERSIONS
    assert len(stored) == OBJECTS and in_order(stored)
    assert 1 < peak <= 64  # pipelined, and never more than the window


async def test_acks_that_time_out_are_sent_again_and_stored_once_in_order(
    nats_server_factory: Callable[[], NatsServer], connect_nats: Callable[..., object]
) -> None:
    # nats-server frozen for 0.3 s with up to 256 events in flight and a 50 ms ack
    # deadline: those events go out again (the one-by-one path, same Msg-Id) while later
    # events of other objects are pipelined.
    stored, count, _, stalls = await publish_all(
        nats_server_factory(), connect_nats, timeout=0.05, window=256, freeze=0.3
    )
    assert stalls > 0, "no ack timed out: the retry path was not exercised"
    assert count == OBJECTS * VERSIONS  # the stream dropped every re-sent copy
    assert in_order(stored)


async def test_sends_whose_acks_died_with_the_connection_go_again_at_the_reconnect(
    nats_server_factory: Callable[[], NatsServer], connect_nats: Callable[..., object]
) -> None:
    # Events sent to a frozen nats-server are never acked: it is killed and started again
    # on its store and port. The ack deadline is 60 s, so only the resend at the reconnect
    # can store them within the 15 s this test waits.
    server = nats_server_factory()
    nc = await connect_nats(server.url)  # type: ignore[operator]
    js = nc.jetstream(timeout=10)
    kube = [s for s in bus.default_streams() if s.name == subjects.KUBE_STREAM]
    await bus.ensure_topology(js, streams=kube, buckets=())
    publisher = Publisher(
        js,
        max_in_flight=64,
        publish_timeout=60.0,
        metrics=WatcherMetrics(CollectorRegistry()),
        retry_pause=0.05,
    )
    progress = Progress("core/v1/pods@*")
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    for index in range(OBJECTS):
        await publisher.submit(pod_event(f"pod-{index}", index + 1), progress=progress, rv="1")
    await asyncio.sleep(0.2)
    server.kill()
    await asyncio.to_thread(server.start)
    try:
        assert await publisher.flush(timeout=15), f"{publisher.in_flight} still unacknowledged"
        info = await js.stream_info(subjects.KUBE_STREAM)
        assert info.state.messages == OBJECTS
    finally:
        await publisher.abort()


async def test_the_pipelined_frame_is_byte_for_byte_what_nats_py_sends(
    nats_server_factory: Callable[[], NatsServer], connect_nats: Callable[..., object]
) -> None:
    # AckInbox builds the HPUB frame itself (pre-encoded headers); a nats-py upgrade that
    # changes the wire format or the header cleaning must show up here.
    nc = await connect_nats(nats_server_factory().url)  # type: ignore[operator]
    inbox = AckInbox(nc)
    frames: list[bytes] = []
    send_command = nc._send_command

    async def record(cmd: bytes, priority: bool = False) -> None:
        frames.append(cmd)
        await send_command(cmd, priority)

    headers = {"Clearance-Watch-Key": " core/v1/pods@* ", "Nats-Msg-Id": "pod:u\r\nPUB x 1:7"}
    header = HEADER_START
    for name, value in headers.items():
        header += header_line(name, value)
    header += HEADER_END
    await inbox.send("clearance.kube.v1.pod.team.p", b"{}", header=header, on_ack=lambda *_: None)
    nc._send_command = record
    token = await inbox.send(
        "clearance.kube.v1.pod.team.p", b'{"a":1}', header=header, on_ack=lambda *_: None
    )
    await nc.publish(
        "clearance.kube.v1.pod.team.p", b'{"a":1}', reply=inbox.prefix + token, headers=headers
    )
    assert len(frames) == 2 and frames[0] == frames[1]
    assert b"\r\nPUB" not in frames[0]
    await inbox.close()
