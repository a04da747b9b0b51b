"""Fixtures for kubesim tests: a started ApiServer on a free loopback port (one per test,
so tests cannot see each other's objects), its kubeconfig, and kubernetes_asyncio clients.

Override `apiserver_options` (a fixture returning ApiServer keyword arguments) in a module or
with `@pytest.mark.parametrize("apiserver_options", [...], indirect=True)` for short timings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

from kubesim.apiserver import ApiServer


@pytest.fixture
def apiserver_options(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(getattr(request, "param", {}) or {})


@pytest_asyncio.fixture
async def apiserver(apiserver_options: dict[str, Any]) -> AsyncIterator[ApiServer]:
    options: dict[str, Any] = {"history_limit": 10_000, "bookmark_interval": 60.0}
    options.update(apiserver_options)
    server = ApiServer(**options)
    await server.start(host="127.0.0.1", port=0)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
def kubeconfig(apiserver: ApiServer, tmp_path: Path) -> Path:
    return apiserver.write_kubeconfig(tmp_path / "kubeconfig")


@pytest_asyncio.fixture
async def api_client(kubeconfig: Path) -> AsyncIterator[k8s.ApiClient]:
    cfg = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    async with k8s.ApiClient(cfg) as api:
        yield api


@pytest.fixture
def core_api(api_client: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api_client)


@pytest.fixture
def batch_api(api_client: k8s.ApiClient) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(api_client)


@pytest.fixture
def custom_api(api_client: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api_client)


@pytest_asyncio.fixture
async def http(apiserver: ApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    """A raw HTTP session against the server (base_url set), for wire-level assertions."""
    async with aiohttp.ClientSession(base_url=apiserver.url) as session:
        yield session
