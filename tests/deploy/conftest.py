"""Fixtures of the deploy/ acceptance tests (issue #8); helpers live in deploy_support.py.

`deployed_nats` is one nats-server (the venv's, v2.15.1) running the dev overlay's rendered NATS
config for the whole session; tests isolate themselves by the subjects they use.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from deploy_support import NatsProcess, nats_server_environment, render

from clearance.natsserver import find_nats_server, nats_server_version

NATS_SERVER_VERSION = "2.15.1"


@pytest.fixture(scope="session")
def deployed_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsProcess]:
    """nats-server with the dev overlay's rendered config on free loopback ports."""
    assert nats_server_version(find_nats_server()) == NATS_SERVER_VERSION
    objs = render("overlays/dev")
    server = NatsProcess(
        tmp_path_factory.mktemp("deployed-nats"), objs, nats_server_environment(objs)
    )
    server.start()
    try:
        server.wait_ready()
        yield server
    finally:
        server.stop()
