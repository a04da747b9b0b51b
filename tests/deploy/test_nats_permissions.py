"""Acceptance 2 of issue #8: the NATS users and permissions the overlays ship, proven with a real
nats-server (the venv's, v2.15.1) and real nats-py clients.

The server runs the files of the rendered `nats-config` ConfigMap unchanged (nats.conf includes
auth.conf and tls.conf); a wrapper config in the temp dir only moves the listeners to free
loopback ports and the JetStream store to the temp dir. Passwords come from the dev overlay's
Secret through the environment, exactly as the StatefulSet passes them.

Each service connects through `clearance.bus.connect` with settings parsed from its rendered
Deployment env (`CLEARANCE_NATS_USER` / `CLEARANCE_NATS_PASSWORD` from the Secret), then does
what it does in production through the bus: provision its streams and durable consumers, publish
its subjects with `Nats-Msg-Id` and wait for the PubAck, fetch and ack (synchronously, so a
refused ack would fail), the tracker its KV bucket with compare-and-set. Refusals are asserted
on the server's `Permissions Violation` error, and nothing refused may reach a stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import subprocess
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import nats.errors
import nats.js.errors
import pytest
from deploy_support import (
    NATS_SECRET,
    NATS_USERS,
    OVERLAYS,
    SERVICES,
    NatsProcess,
    container_environment,
    nats_config_files,
    nats_server_environment,
    one,
    render,
    secret_values,
    write_nats_config,
)
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext, api

from clearance import bus, events, subjects
from clearance.explaining import ExplainError, ExplainRequest, read_history, stored_events
from clearance.natsserver import find_nats_server
from clearance.settings import CommonSettings
from clearance.tailing import TailRequest, tail
from clearance_dispatcher.service import ALERTS_DURABLE, CLEARED_DURABLE, KUBE_DURABLE
from clearance_dispatcher.settings import DispatcherSettings
from clearance_tracker.service import consumer_specs
from clearance_tracker.settings import TrackerSettings
from clearance_tracker.store import bucket_spec, ensure_bucket
from clearance_watcher.seeding import read_seed
from clearance_watcher.settings import WatcherSettings

STREAMS = {spec.name: spec for spec in bus.default_streams()}
KUBE, CYCLE, ALERTS, DLQ = (
    STREAMS[subjects.KUBE_STREAM],
    STREAMS[subjects.CYCLE_STREAM],
    STREAMS[subjects.ALERT_STREAM],
    STREAMS[subjects.DLQ_STREAM],
)


def durables(service: str) -> tuple[bus.ConsumerSpec, ...]:
    """The durable pull consumers the service runs, from the service's own code and settings."""
    if service == "tracker":
        settings = service_settings("tracker", "nats://unused:4222")
        assert isinstance(settings, TrackerSettings)
        return consumer_specs(settings)
    if service == "dispatcher":  # as clearance_dispatcher.service.Service._lead builds them
        return (
            bus.ConsumerSpec(
                KUBE,
                KUBE_DURABLE,
                tuple(subjects.kube_filter(kind=k) for k in ("appwrapper", "pod", "node")),
                deliver_policy=api.DeliverPolicy.NEW,
            ),
            bus.ConsumerSpec(CYCLE, CLEARED_DURABLE, (subjects.cycle_filter(event="cleared"),)),
            bus.ConsumerSpec(
                ALERTS, ALERTS_DURABLE, (subjects.alert_filter(alert="deletion.stuck"),)
            ),
        )
    return ()


# What each service publishes (DESIGN §3 and the issue): cycle events and alerts by name.
CYCLE_EVENTS = {
    "dispatcher": (
        "dispatched",
        "requeued",
        "teardown.started",
        "redispatched",
        "failed",
        "completed",
    ),
    "tracker": ("deletion.confirmed", "deletion.forced", "finalizers.removed", "cleared"),
}
ALERT_NAMES = {
    "dispatcher": ("requeue.limit", "dispatch.failed"),
    "tracker": ("deletion.stuck", "deletion.forced", "node.lost"),
}
Connect = Callable[[str], Awaitable[NatsClient]]
"""Open a client as one of the NATS users (closed at test teardown)."""


# ---------------------------------------------------------------------------------- server


SETTINGS: dict[str, type[CommonSettings]] = {
    "watcher": WatcherSettings,
    "tracker": TrackerSettings,
    "dispatcher": DispatcherSettings,
}


def service_settings(service: str, url: str) -> CommonSettings:
    """The service's own settings class, parsed from its rendered Deployment's environment
    (ConfigMaps, Secret keys and fieldRefs resolved); only the NATS URL points at the test
    server."""
    objs = render("overlays/dev")
    env = container_environment(objs, one(objs, "Deployment", f"clearance-{service}"))
    assert env["CLEARANCE_NATS_URL"] == "nats://nats:4222"
    env["CLEARANCE_NATS_URL"] = url
    env["CLEARANCE_NATS_RECONNECT_WAIT"] = "100ms"
    return SETTINGS[service].from_env(env)


def dev_password(user: str) -> str:
    return secret_values(render("overlays/dev"), NATS_SECRET)[f"{user}-password"]


@pytest.fixture
async def connect(deployed_nats: NatsProcess) -> AsyncIterator[Connect]:
    opened: list[NatsClient] = []

    async def open_as(user: str) -> NatsClient:
        if user in SERVICES:
            settings = service_settings(user, deployed_nats.url)
        else:
            settings = CommonSettings(
                nats_url=deployed_nats.url,
                nats_user=user,
                nats_password=secret_values(render("overlays/dev"), NATS_SECRET)[
                    f"{user}-password"
                ],
            )
        client = await bus.connect(settings, name=f"test-{user}", first_connect_timeout=5)
        opened.append(client)
        return client

    yield open_as
    for client in opened:
        if not client.is_closed:
            await client.close()


async def refused(nc: NatsClient, subject: str, *, what: str = "Publish") -> bool:
    """True when the server answered `Permissions Violation for <what> to "<subject>"`."""
    expected = f'permissions violation for {what} to "{subject}"'.lower()
    await nc.flush(timeout=2)
    # The server may send the -ERR just after the PONG of the flush, so poll briefly.
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        if expected in str(nc.last_error).lower():
            return True
        await asyncio.sleep(0.01)
    return False


async def stream_count(nc: NatsClient, stream: str) -> int:
    info = await nc.jetstream(timeout=2).stream_info(stream)
    return int(info.state.messages)


def body(**fields: object) -> bytes:
    return msgspec.json.encode({"test": True, **fields})


async def publish_acked(js: JetStreamContext, subject: str, stream: bus.StreamSpec) -> int:
    ack = await bus.publish(
        js,
        subject,
        body(subject=subject),
        msg_id=f"{subject}:{time.monotonic_ns()}",
        streams=(stream,),
        retry=bus.RetryPolicy(attempts=1),
    )
    assert ack.stream == stream.name
    return int(ack.seq)


# ------------------------------------------------------------------------- config checks


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_nats_config_passes_nats_server_check(overlay: str, tmp_path: Path) -> None:
    objs = render(f"overlays/{overlay}")
    config = write_nats_config(objs, tmp_path)
    env = (
        nats_server_environment(objs)
        if overlay == "dev"
        else {
            "POD_NAME": "nats-0",
            **{f"CLEARANCE_NATS_{u.upper()}_PASSWORD": "x" for u in NATS_USERS},
        }
    )
    result = subprocess.run(
        [str(find_nats_server()), "-t", "-c", str(config)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "is valid" in result.stdout + result.stderr


def test_both_overlays_share_one_user_and_permission_file() -> None:
    dev, prod = (nats_config_files(render(f"overlays/{o}")) for o in OVERLAYS)
    assert dev["auth.conf"] == prod["auth.conf"]
    assert re.search(r"^cluster {", prod["nats.conf"], re.M)
    assert not re.search(r"^cluster {", dev["nats.conf"], re.M)


def test_config_refuses_to_start_without_the_password_variables(tmp_path: Path) -> None:
    config = write_nats_config(render("overlays/dev"), tmp_path)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CLEARANCE_NATS_")}
    result = subprocess.run(
        [str(find_nats_server()), "-t", "-c", str(config)],
        env={**clean, "POD_NAME": "nats-0"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode != 0
    assert "PASSWORD" in result.stdout + result.stderr


# ------------------------------------------------------------------------ what is allowed


async def test_watcher_provisions_publishes_and_seeds_like_the_service(connect: Connect) -> None:
    nc = await connect("watcher")
    js = nc.jetstream(timeout=5)
    await bus.ensure_topology(js, streams=[KUBE], buckets=())  # as WatcherService.run does
    before = await stream_count(nc, KUBE.name)
    for kind in subjects.KUBE_KINDS:
        await publish_acked(js, subjects.kube_subject(kind, "team-a", "job.v2"), KUBE)
    assert await stream_count(nc, KUBE.name) == before + len(subjects.KUBE_KINDS)
    # Takeover seeding: ephemeral pull consumers, fetch, consumer info, delete.
    for kind in ("pod", "item"):
        seed = await read_seed(js, kind, timeout=5)
        assert seed.events >= 1
    assert nc.last_error is None


async def test_tracker_provisions_and_consumes_like_the_service(connect: Connect) -> None:
    nc = await connect("tracker")
    js = nc.jetstream(timeout=5)
    settings = service_settings("tracker", "nats://unused:4222")
    assert isinstance(settings, TrackerSettings)
    await bus.ensure_topology(js, buckets=())  # as clearance_tracker.service.run does
    await ensure_bucket(js, settings)
    await consume_one_of_each(connect, js, durables("tracker"))
    assert nc.last_error is None


async def test_dispatcher_provisions_and_consumes_like_the_service(connect: Connect) -> None:
    nc = await connect("dispatcher")
    js = nc.jetstream(timeout=5)
    await bus.ensure_topology(js, buckets=())  # as clearance_dispatcher.service.Service.run does
    with contextlib.suppress(nats.js.errors.NotFoundError):
        await js.delete_consumer(KUBE.name, KUBE_DURABLE)  # re-created at NEW on takeover
    await consume_one_of_each(connect, js, durables("dispatcher"))
    assert nc.last_error is None


async def consume_one_of_each(
    connect: Connect, js: JetStreamContext, specs: tuple[bus.ConsumerSpec, ...]
) -> None:
    """Create/bind each durable, then fetch, heartbeat and ack (synchronously) a fresh message."""
    producers = {
        KUBE.name: ("watcher", subjects.kube_subject("pod", "team-a", "p-1")),
        CYCLE.name: ("tracker", subjects.cycle_subject("team-a", "aw", "cleared")),
        ALERTS.name: (
            "tracker",
            subjects.alert_subject("warning", "team-a", "aw", "deletion.stuck"),
        ),
    }
    for spec in specs:
        await bus.ensure_consumer(js, spec)
        await bus.ensure_consumer(js, spec)  # idempotent create-or-update, as every replica does
        sub = await js.pull_subscribe_bind(consumer=spec.durable, stream=spec.stream.name)
        producer, subject = producers[spec.stream.name]
        if spec.stream.name == CYCLE.name and "teardown.started" in spec.filter_subjects[0]:
            producer, subject = (
                "dispatcher",
                subjects.cycle_subject("team-a", "aw", "teardown.started"),
            )
        pjs = (await connect(producer)).jetstream(timeout=5)
        await publish_acked(pjs, subject, spec.stream)
        [msg] = await sub.fetch(1, timeout=5)
        await msg.in_progress()
        await msg.ack_sync(timeout=2)  # a refused ack would time out here
        await sub.unsubscribe()


@pytest.mark.parametrize("service", ["tracker", "dispatcher"])
async def test_service_publishes_its_cycle_events_alerts_and_dead_letters(
    connect: Connect, service: str
) -> None:
    nc = await connect(service)
    js = nc.jetstream(timeout=5)
    for stream in (CYCLE, ALERTS, DLQ):
        await bus.ensure_stream(js, stream)
    for event in CYCLE_EVENTS[service]:
        await publish_acked(js, subjects.cycle_subject("team-a", "aw.1", event), CYCLE)
    for alert in ALERT_NAMES[service]:
        await publish_acked(js, subjects.alert_subject("warning", "team-a", "aw.1", alert), ALERTS)
    for spec in durables(service):
        await publish_acked(js, subjects.dlq_subject(spec.stream.name), DLQ)
    assert nc.last_error is None


async def test_tracker_uses_its_teardown_bucket_with_compare_and_set(connect: Connect) -> None:
    nc = await connect("tracker")
    js = nc.jetstream(timeout=5)
    settings = service_settings("tracker", "nats://unused:4222")
    assert isinstance(settings, TrackerSettings)
    kv_spec = bucket_spec(settings)
    assert kv_spec.bucket == "clearance-teardowns"
    kv = await bus.ensure_kv(js, kv_spec)
    kv = await bus.ensure_kv(js, kv_spec)  # the second replica finds it
    key = f"team-a.aw-{time.monotonic_ns()}"
    revision = await kv.create(key, b'{"attempt":1}')
    revision = await kv.update(key, b'{"attempt":1,"step":"stuck"}', last=revision)
    with pytest.raises(nats.js.errors.KeyWrongLastSequenceError):
        await kv.update(key, b"stale", last=revision - 1)
    assert (await kv.get(key)).value == b'{"attempt":1,"step":"stuck"}'
    assert key in await kv.keys()
    watcher = await kv.watchall()  # as the tracker follows replica heartbeats
    entry = await watcher.updates(timeout=5)
    assert entry is not None
    await watcher.stop()
    await kv.delete(key, last=revision)
    assert nc.last_error is None


async def test_alerts_user_tails_alerts_and_cycle_events(connect: Connect) -> None:
    tracker = (await connect("tracker")).jetstream(timeout=5)
    for stream in (CYCLE, ALERTS):
        await bus.ensure_stream(tracker, stream)
    await publish_acked(
        tracker, subjects.alert_subject("warning", "tail-ns", "aw", "node.lost"), ALERTS
    )
    await publish_acked(tracker, subjects.cycle_subject("tail-ns", "aw", "cleared"), CYCLE)
    nc = await connect("alerts")
    for alerts in (True, False):
        lines: list[str] = []
        request = TailRequest(
            alerts=alerts, namespace="tail-ns", since=timedelta(hours=1), follow=False
        )
        await asyncio.wait_for(tail(nc, request, emit=lines.append, idle_exit=1.0), 10)
        assert len(lines) == 1, lines
    # A plain core subscription works too (live alerts for a pager bridge).
    sub = await nc.subscribe("clearance.alert.v1.>")
    await sub.unsubscribe()
    assert nc.last_error is None


async def test_alerts_user_reads_what_clearance_explain_needs(connect: Connect) -> None:
    """`clearance explain` reads one AppWrapper's cycle events and alerts (stream info with a
    subject filter, then an ordered consumer) with nothing more than the alerts user."""
    tracker = (await connect("tracker")).jetstream(timeout=5)
    for stream in (CYCLE, ALERTS):
        await bus.ensure_stream(tracker, stream)
    now = datetime.now(UTC)
    ref = events.AppWrapperRef(namespace="explain-ns", name="aw", uid="aw-uid")
    cleared = events.CycleCleared(appwrapper=ref, attempt=1, occurred_at=now, cleared_at=now)
    lost = events.AlertNodeLost(
        appwrapper=ref,
        attempt=1,
        occurred_at=now,
        summary="node n1 is lost",
        node="n1",
        reasons=(events.NodeMissing(node="n1"),),
    )
    for event in (cleared, lost):
        await bus.publish(
            tracker,
            event.subject(),
            events.encode(event),
            msg_id=event.msg_id(),
            streams=(STREAMS[event.stream],),
            retry=bus.RetryPolicy(attempts=1),
        )
    nc = await connect("alerts")
    found = [
        await stored_events(nc, stream=stream, subject_filter=subject_filter, timeout=5)
        for stream, subject_filter in (
            (CYCLE.name, subjects.cycle_filter(namespace="explain-ns", appwrapper="aw")),
            (ALERTS.name, subjects.alert_filter(namespace="explain-ns", appwrapper="aw")),
        )
    ]
    assert found == [[cleared], [lost]]
    assert nc.last_error is None


async def test_explain_says_in_one_line_when_the_nats_user_may_not_read_the_streams(
    connect: Connect,
) -> None:
    tracker = (await connect("tracker")).jetstream(timeout=5)
    for stream in (CYCLE, ALERTS):
        await bus.ensure_stream(tracker, stream)
    nc = await connect("watcher")  # publishes kube events; may not read cycle events
    request = ExplainRequest(
        namespace="explain-ns", name="aw", settings=CommonSettings(), timeout=1.0
    )
    with pytest.raises(ExplainError) as raised:
        await read_history(nc, request, "aw-uid")
    message = str(raised.value)
    assert message.startswith(
        "NATS did not answer reading CLEARANCE_CYCLE within 1s: no permission"
    )
    assert "\n" not in message


# ------------------------------------------------------------------------ what is refused


REFUSED_PUBLISH: list[tuple[str, str]] = [
    ("watcher", subjects.cycle_subject("team-a", "aw", "cleared")),
    ("watcher", subjects.cycle_subject("team-a", "aw", "dispatched")),
    ("watcher", subjects.alert_subject("critical", "team-a", "aw", "deletion.stuck")),
    ("watcher", "$KV.clearance-teardowns.team-a.aw"),
    ("watcher", "$JS.API.STREAM.CREATE.CLEARANCE_CYCLE"),
    ("watcher", "$JS.API.STREAM.DELETE.CLEARANCE_KUBE"),
    ("watcher", "$JS.API.STREAM.PURGE.CLEARANCE_KUBE"),
    (
        "watcher",
        "$JS.API.CONSUMER.CREATE.CLEARANCE_KUBE.clearance-tracker-kube.clearance.kube.v1.>",
    ),
    ("watcher", "$JS.API.CONSUMER.CREATE.CLEARANCE_KUBE.clearance-dispatcher-kube"),
    ("watcher", "$JS.API.CONSUMER.CREATE.CLEARANCE_KUBE.seed.clearance.cycle.v1.>"),
    ("watcher", "$JS.API.CONSUMER.DELETE.CLEARANCE_KUBE.clearance-dispatcher-kube"),
    ("watcher", "$JS.API.CONSUMER.MSG.NEXT.CLEARANCE_KUBE.clearance-tracker-kube"),
    ("watcher", "$JS.API.CONSUMER.CREATE.CLEARANCE_CYCLE.x.clearance.kube.v1.>"),
    ("dispatcher", "$JS.API.STREAM.MSG.GET.KV_clearance-teardowns"),
    ("dispatcher", "$JS.API.STREAM.CREATE.KV_clearance-teardowns"),
    ("dispatcher", "$JS.API.DIRECT.GET.KV_clearance-teardowns.$KV.clearance-teardowns.k"),
    ("dispatcher", subjects.cycle_subject("team-a", "aw", "cleared")),
    ("dispatcher", subjects.cycle_subject("team-a", "aw", "deletion.confirmed")),
    ("dispatcher", subjects.cycle_subject("team-a", "aw", "deletion.forced")),
    ("dispatcher", subjects.alert_subject("warning", "team-a", "aw", "deletion.stuck")),
    ("dispatcher", subjects.kube_subject("pod", "team-a", "p")),
    ("dispatcher", "$KV.clearance-teardowns.team-a.aw"),
    ("dispatcher", "$JS.API.CONSUMER.CREATE.CLEARANCE_CYCLE.clearance-tracker-teardowns"),
    ("dispatcher", "$JS.API.CONSUMER.DELETE.CLEARANCE_CYCLE.clearance-tracker-teardowns"),
    ("dispatcher", "$JS.API.STREAM.DELETE.CLEARANCE_CYCLE"),
    ("tracker", subjects.cycle_subject("team-a", "aw", "dispatched")),
    ("tracker", subjects.cycle_subject("team-a", "aw", "requeued")),
    ("tracker", subjects.cycle_subject("team-a", "aw", "teardown.started")),
    ("tracker", subjects.cycle_subject("team-a", "aw", "redispatched")),
    ("tracker", subjects.alert_subject("warning", "team-a", "aw", "requeue.limit")),
    ("tracker", subjects.kube_subject("pod", "team-a", "p")),
    ("tracker", "$JS.API.CONSUMER.MSG.NEXT.CLEARANCE_CYCLE.clearance-dispatcher-cleared"),
    ("tracker", "$JS.ACK.CLEARANCE_CYCLE.clearance-dispatcher-cleared.1.1.1.1.1"),
    ("tracker", "$JS.API.STREAM.DELETE.KV_clearance-teardowns"),
    ("alerts", subjects.alert_subject("critical", "team-a", "aw", "deletion.stuck")),
    ("alerts", subjects.cycle_subject("team-a", "aw", "cleared")),
    ("alerts", subjects.kube_subject("pod", "team-a", "p")),
    ("alerts", subjects.dlq_subject("CLEARANCE_CYCLE")),
    ("alerts", "$KV.clearance-teardowns.team-a.aw"),
    ("alerts", "$JS.API.STREAM.CREATE.CLEARANCE_ALERTS"),
    ("alerts", "$JS.API.STREAM.PURGE.CLEARANCE_ALERTS"),
    ("alerts", "$JS.API.CONSUMER.CREATE.CLEARANCE_CYCLE.clearance-dispatcher-cleared"),
    ("alerts", "$JS.API.CONSUMER.DELETE.CLEARANCE_CYCLE.clearance-dispatcher-cleared"),
    ("alerts", "$JS.API.CONSUMER.MSG.NEXT.CLEARANCE_CYCLE.clearance-dispatcher-cleared"),
]


@pytest.mark.parametrize(("user", "subject"), REFUSED_PUBLISH)
async def test_publish_outside_the_allow_list_is_refused(
    connect: Connect, user: str, subject: str
) -> None:
    nc = await connect(user)
    await nc.publish(subject, body(by=user))
    assert await refused(nc, subject), f"{user} could publish to {subject}: {nc.last_error}"


async def test_refused_jetstream_publish_gets_no_ack_and_stores_nothing(connect: Connect) -> None:
    tracker = await connect("tracker")
    await bus.ensure_stream(tracker.jetstream(timeout=5), CYCLE)
    before = await stream_count(tracker, CYCLE.name)
    dispatcher = await connect("dispatcher")
    subject = subjects.cycle_subject("team-a", "forged", "cleared")
    with pytest.raises(nats.errors.TimeoutError):
        await dispatcher.jetstream(timeout=0.5).publish(subject, body(forged=True))
    assert await refused(dispatcher, subject)
    assert await stream_count(tracker, CYCLE.name) == before


@pytest.mark.parametrize(
    ("user", "subject"),
    [
        ("watcher", "clearance.cycle.v1.>"),
        ("watcher", "clearance.kube.v1.>"),
        ("tracker", "clearance.alert.v1.>"),
        ("dispatcher", "$KV.clearance-teardowns.>"),
        ("alerts", "clearance.kube.v1.>"),
        ("alerts", "$KV.clearance-teardowns.>"),
        ("alerts", "clearance.dlq.v1.>"),
        ("alerts", ">"),
    ],
)
async def test_subscribe_outside_the_allow_list_is_refused(
    connect: Connect, user: str, subject: str
) -> None:
    nc = await connect(user)
    await nc.subscribe(subject)
    assert await refused(nc, subject, what="Subscription")


async def test_alerts_user_cannot_take_over_a_service_durable(connect: Connect) -> None:
    """The ephemeral-create subject the alerts user may use must not create or change durables."""
    dispatcher = await connect("dispatcher")
    djs = dispatcher.jetstream(timeout=5)
    await bus.ensure_stream(djs, CYCLE)
    [spec] = [s for s in durables("dispatcher") if s.stream is CYCLE]
    await bus.ensure_consumer(djs, spec)
    nc = await connect("alerts")
    request = {
        "stream_name": CYCLE.name,
        "config": {
            "durable_name": spec.durable,
            "name": spec.durable,
            "deliver_subject": "_INBOX.hijack",
            "ack_policy": "none",
            "filter_subject": "clearance.cycle.v1.>",
        },
    }
    reply = await nc.request(
        f"$JS.API.CONSUMER.CREATE.{CYCLE.name}", msgspec.json.encode(request), timeout=2
    )
    assert "error" in msgspec.json.decode(reply.data), reply.data
    info = await djs.consumer_info(CYCLE.name, spec.durable)
    assert info.config.deliver_subject is None and info.config.ack_policy == api.AckPolicy.EXPLICIT


@pytest.mark.parametrize("password", ["", "wrong"])
async def test_unknown_or_anonymous_clients_are_refused(
    deployed_nats: NatsProcess, password: str
) -> None:
    nc = NatsClient()
    with pytest.raises((nats.errors.NoServersError, nats.errors.Error, OSError)):
        await nc.connect(
            deployed_nats.url,
            user="watcher" if password else None,
            password=password or None,
            allow_reconnect=False,
            connect_timeout=2,
        )
    assert not nc.is_connected
    await nc.close()


def test_the_permission_file_names_exactly_the_durables_the_services_run() -> None:
    auth = nats_config_files(render("overlays/dev"))["auth.conf"]
    allow = auth.split("deny: [")[0] + "".join(auth.split("deny: [")[1:]).split("]", 1)[-1]
    named = set(re.findall(r"\$JS\.API\.CONSUMER\.CREATE\.CLEARANCE_\w+\.([\w-]+)\"", allow))
    assert named == {spec.durable for s in SERVICES for spec in durables(s)}
