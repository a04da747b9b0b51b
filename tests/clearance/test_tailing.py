"""`clearance events`: what people and scripts see when they subscribe to cycles and alerts."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest
from tests.support.processes import venv_script

from clearance import bus, events
from clearance.events import (
    AlertDeletionStuck,
    AppWrapperRef,
    CycleCleared,
    Finalizers,
    NodeUnreachable,
    ObjectRef,
    StuckObject,
)
from clearance.natsserver import NatsServer
from clearance.tailing import TailRequest, describe, tail

NOW = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
AW = AppWrapperRef(namespace="team-a", name="train", uid="aw-uid-1")
POD = ObjectRef(kind="Pod", api_version="v1", namespace="team-a", name="train-0", uid="pod-1")


def stuck_alert(*, appwrapper: AppWrapperRef = AW) -> AlertDeletionStuck:
    return AlertDeletionStuck(
        appwrapper=appwrapper,
        attempt=2,
        occurred_at=NOW,
        summary="1 object still present 60s after teardown",
        elapsed_seconds=60,
        stuck=(
            StuckObject(
                object=POD,
                node="node-1",
                reasons=(NodeUnreachable(node="node-1"), Finalizers(finalizers=("x.io/hold",))),
            ),
        ),
    )


def cleared() -> CycleCleared:
    return CycleCleared(appwrapper=AW, attempt=2, occurred_at=NOW, cleared_at=NOW, confirmed=(POD,))


def test_alert_line_names_the_appwrapper_attempt_object_and_causes() -> None:
    line = describe(stuck_alert())
    assert line.startswith("2026-12-02 12:00:00Z  WARNING  team-a/train #2  deletion.stuck")
    assert "pod train-0: node node-1 unreachable; held by finalizer x.io/hold" in line


def test_teardown_line_lists_an_object_listed_twice_once() -> None:
    started = events.CycleTeardownStarted(
        appwrapper=AW, attempt=1, occurred_at=NOW, inventory=(POD, POD)
    )
    assert "deleting pod train-0;" in describe(started)


def test_cycle_line_summarises_the_cleared_teardown() -> None:
    assert "1 object(s) confirmed gone" in describe(cleared())


@pytest.fixture
def private_nats(nats_server_factory: object) -> NatsServer:
    assert callable(nats_server_factory)
    server = nats_server_factory()
    assert isinstance(server, NatsServer)
    return server


async def publish_all(url: str, *items: events.Event) -> None:
    from tests.conftest import client_settings

    nc = await bus.connect(client_settings(url), name="test-publisher")
    try:
        js = nc.jetstream()
        await bus.ensure_topology(js)
        for item in items:
            await bus.publish(js, item.subject(), events.encode(item), msg_id=item.msg_id())
    finally:
        await nc.drain()


async def test_tail_without_follow_prints_stored_alerts_of_one_namespace_and_exits(
    private_nats: NatsServer,
) -> None:
    other = AppWrapperRef(namespace="team-b", name="eval", uid="aw-uid-2")
    await publish_all(private_nats.url, stuck_alert(), stuck_alert(appwrapper=other), cleared())
    from tests.conftest import client_settings

    nc = await bus.connect(client_settings(private_nats.url), name="test-tail")
    lines: list[str] = []
    try:
        request = TailRequest(alerts=True, namespace="team-a", follow=False)
        count = await tail(nc, request, emit=lines.append, idle_exit=0.5)
    finally:
        await nc.drain()
    assert count == 1
    assert "team-a/train" in lines[0]


def test_cli_json_output_is_one_decodable_event_per_line(private_nats: NatsServer) -> None:
    import asyncio

    asyncio.run(publish_all(private_nats.url, cleared()))
    result = subprocess.run(
        [venv_script("clearance"), "events", "--json", "--since", "1h", "--no-follow"],
        env={"CLEARANCE_NATS_URL": private_nats.url, "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    decoded = events.decode(lines[0])
    assert isinstance(decoded, CycleCleared)
    assert json.loads(lines[0])["type"] == "cycle.cleared"


def test_cli_rejects_a_bad_duration_with_a_usage_error() -> None:
    result = subprocess.run(
        [venv_script("clearance"), "events", "--since", "soon"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2
    assert "not a duration" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_reports_an_unreachable_server_in_one_line() -> None:
    result = subprocess.run(
        [venv_script("clearance"), "events", "--no-follow"],
        env={"CLEARANCE_NATS_URL": "nats://127.0.0.1:1", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("clearance events:")


_ = timedelta
