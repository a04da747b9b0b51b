"""Fixtures for the watcher suite: a private kubesim API server and NATS server per test,
and the watcher as a real subprocess configured through env exactly as deployed.

kubesim runs on its own event-loop thread, so the tests may block (HTTP calls, waiting
for /readyz) without starving it. Each test gets fresh servers: nodes are cluster-scoped
and the stream name is fixed, so sharing either would couple tests.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import yaml
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext

from clearance.natsserver import NatsServer

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from watcher_support import CRD_FILE, KubeSim

from support.processes import ServiceProcess, free_port, venv_script

# -- fixtures --------------------------------------------------------------------------


@pytest.fixture
def kubesim(tmp_path: Path) -> Iterator[KubeSim]:
    sim = KubeSim(tmp_path / "kubesim", bookmark_interval=1.0)
    sim.tmp.mkdir()
    sim.start()
    try:
        sim.register_crd(yaml.safe_load(CRD_FILE.read_text()))
        yield sim
    finally:
        sim.stop()


@pytest.fixture
def nats_private(nats_server_factory: Callable[[], NatsServer]) -> NatsServer:
    return nats_server_factory()


@pytest.fixture
async def js(nats_private: NatsServer) -> AsyncIterator[JetStreamContext]:
    nc = NatsClient()
    await nc.connect(nats_private.url, max_reconnect_attempts=-1, reconnect_time_wait=0.1)
    try:
        yield nc.jetstream(timeout=5)
    finally:
        await nc.close()


WATCHER_ENV_DEFAULTS = {
    "CLEARANCE_HTTP_HOST": "127.0.0.1",
    "CLEARANCE_LEASE_NAMESPACE": "default",
    "CLEARANCE_LEASE_DURATION": "2s",
    "CLEARANCE_LEASE_RETRY_PERIOD": "200ms",
    "CLEARANCE_WATCH_TIMEOUT": "30s",
    "CLEARANCE_INACTIVITY_TIMEOUT": "5s",
    "CLEARANCE_RETRY_DELAY": "100ms",
    "CLEARANCE_DISCOVERY_RETRY": "1s",
    "CLEARANCE_KIND_LINGER": "3s",
    "CLEARANCE_NATS_RECONNECT_WAIT": "100ms",
    "CLEARANCE_SHUTDOWN_TIMEOUT": "5s",
    "CLEARANCE_LOG_LEVEL": "INFO",
    "CLEARANCE_LOG_FORMAT": "json",
    # The environment disables bytecode caching; the watcher imports kubernetes-asyncio's
    # thousand model modules, so let it cache them (start-up 6 s → 2 s on a busy machine).
    "PYTHONDONTWRITEBYTECODE": "",
}

StartWatcher = Callable[..., ServiceProcess]


@pytest.fixture
def start_watcher(
    kubesim: KubeSim, nats_private: NatsServer, tmp_path: Path
) -> Iterator[StartWatcher]:
    """Start ``clearance-watcher`` subprocesses (ready when returned); all stopped at teardown."""
    started: list[ServiceProcess] = []

    def start(*, identity: str = "watcher-a", wait: bool = True, **env: str) -> ServiceProcess:
        port = free_port()
        process = ServiceProcess(
            [venv_script("clearance-watcher")],
            env={
                **WATCHER_ENV_DEFAULTS,
                "KUBECONFIG": str(kubesim.kubeconfig),
                "CLEARANCE_NATS_URL": nats_private.url,
                "CLEARANCE_HTTP_PORT": str(port),
                "CLEARANCE_LEASE_IDENTITY": identity,
                **env,
            },
            log_path=tmp_path / f"watcher-{identity}-{len(started)}.log",
            http_port=port,
        )
        started.append(process)
        process.start()
        if wait:
            process.wait_ready(timeout=30)
        return process

    yield start
    for process in started:
        process.kill()
