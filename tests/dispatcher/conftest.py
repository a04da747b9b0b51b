"""Fixtures for the dispatcher's integration tests: kubesim + a private nats-server + the
dispatcher as a subprocess (``clearance-dispatcher``, configured only through env).

By default the real services run next to it: ``clearance-watcher`` feeds the dispatcher over
NATS (``CLEARANCE_INTAKE=nats``) and ``clearance-tracker`` publishes ``cleared``.
``DISPATCHER_TESTS_STANDALONE=1`` (or either script missing) replaces them: the dispatcher
watches the API itself (``CLEARANCE_INTAKE=kube``) and a stand-in tracker in the test publishes
``cleared`` only after a quorum LIST and GETs in the API show that no pod and no item of the
attempt (or an older one) is left — the evidence the tracker must have — plus a
``deletion.stuck`` alert after 1 s like the tracker's.

The environment and the builders live in tests/support/dispatcher_env.py; this file keeps
the fixture and re-exports the names for the tests that still import them from here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from tests.support.dispatcher_env import (
    AW,
    CRD,
    EVENTS_RES,
    NAMESPACES,
    REAL_TRACKER,
    REAL_WATCHER,
    REPO,
    ClusterFactory,
    Env,
    Objects,
    condition,
    env_factory,
    job_appwrapper,
    phase_is,
    state_is,
)

__all__ = [
    "AW",
    "CRD",
    "EVENTS_RES",
    "NAMESPACES",
    "REAL_TRACKER",
    "REAL_WATCHER",
    "REPO",
    "ClusterFactory",
    "Env",
    "Objects",
    "condition",
    "env_factory",
    "job_appwrapper",
    "phase_is",
    "state_is",
]


@pytest.fixture
async def make_env(tmp_path: Path, nats_server_factory: Any) -> AsyncIterator[ClusterFactory]:
    """A factory of dispatcher test environments, all stopped when the test ends."""
    async with env_factory(tmp_path, nats_server_factory) as make:
        yield make
