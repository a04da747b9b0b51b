"""Fixtures of the shared-library tests that talk to a real API: an in-process kubesim
(on the test's own loop), a :class:`~clearance.kube.Kube` client of it, and its admin API."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest

from clearance.kube import Kube, KubeConfig
from kubesim.apiserver import ApiServer

USER_AGENT = "clearance-tests"
"""The tests' client names itself so kubesim's request log tells its requests apart."""

Admin = Callable[..., Awaitable[None]]


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    server = ApiServer(bookmark_interval=0.2)
    await server.start(host="127.0.0.1", port=0)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def kube(apiserver: ApiServer, tmp_path: Path) -> AsyncIterator[Kube]:
    path = tmp_path / "kubeconfig"
    apiserver.write_kubeconfig(path)
    client = await Kube.connect(KubeConfig(kubeconfig=str(path), user_agent=USER_AGENT))
    try:
        yield client
    finally:
        await client.close()


@pytest.fixture
def admin(apiserver: ApiServer) -> Admin:
    """``await admin("POST", "compact")``: kubesim's fault injection under ``/kubesim/v1/``."""

    async def call(verb: str, path: str, body: object = None) -> None:
        async with (
            aiohttp.ClientSession() as session,
            session.request(verb, f"{apiserver.url}/kubesim/v1/{path}", json=body) as response,
        ):
            assert response.status < 300, await response.text()

    return call
