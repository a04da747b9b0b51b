"""Fixtures for the kubesim fidelity suite: one ApiServer per test module (on its own loop thread,
on a free port), its kubeconfig, kubectl with a fresh cache dir, kubernetes_asyncio clients, a
fresh namespace per test, and the `client` fixture parametrized over typed / dynamic / kubectl.

A module may set `SERVER_OPTIONS = {...}` (ApiServer keyword arguments) and
`PRELOAD_CRD = False` (the AppWrapper CRD is registered over HTTP otherwise)."""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config
from kubernetes_asyncio.dynamic import DynamicClient

# Test modules import `fidelity_support` by name: with --import-mode=importlib there is no
# package to import it from.
sys.path.insert(0, str(Path(__file__).parent))

from fidelity_support import (
    Client,
    DynClient,
    Http,
    Kubectl,
    KubectlClient,
    ServerHandle,
    TypedClient,
    load_crd,
)

DEFAULT_SERVER_OPTIONS: dict[str, Any] = {"history_limit": 10_000, "bookmark_interval": 60.0}
_ns_counter = itertools.count(1)


@pytest.fixture(scope="module")
def server(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ServerHandle]:
    options = {**DEFAULT_SERVER_OPTIONS, **getattr(request.module, "SERVER_OPTIONS", {})}
    handle = ServerHandle(tmp_path_factory.mktemp("kubesim"), **options)
    handle.start()
    try:
        if getattr(request.module, "PRELOAD_CRD", True):
            handle.register_crd(load_crd())
        yield handle
    finally:
        handle.stop()


@pytest.fixture(scope="module")
def kubectl(server: ServerHandle) -> Kubectl:
    """kubectl bound to this module's server; a fresh --cache-dir since ports are reused."""
    cache = server.tmp / "kubectl-cache"
    cache.mkdir(exist_ok=True)
    return Kubectl(server.kubeconfig, cache)


@pytest.fixture
def ns(server: ServerHandle, request: pytest.FixtureRequest) -> str:
    """A fresh namespace per test, named after the test (DNS-1123 label, ≤ 63 chars)."""
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")
    name: str = server.make_namespace(f"t{next(_ns_counter)}-{slug}"[:63].rstrip("-"))
    return name


@pytest_asyncio.fixture
async def api(server: ServerHandle) -> AsyncIterator[k8s.ApiClient]:
    """A kubernetes_asyncio ApiClient configured from the kubeconfig the server wrote."""
    cfg = k8s.Configuration()
    await k8s_config.load_kube_config(config_file=str(server.kubeconfig), client_configuration=cfg)
    async with k8s.ApiClient(cfg) as api_client:
        yield api_client


@pytest_asyncio.fixture
async def dyn(api: k8s.ApiClient, tmp_path: Path) -> DynamicClient:
    """The dynamic client with discovery; its cache file is private to the test."""
    discovered: DynamicClient = await DynamicClient(
        api, cache_file=str(tmp_path / "discovery.json")
    )
    return discovered


@pytest_asyncio.fixture
async def http(server: ServerHandle) -> AsyncIterator[Http]:
    async with aiohttp.ClientSession() as session:
        yield Http(session, server.url)


@pytest.fixture
def core(api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api)


@pytest.fixture
def batch(api: k8s.ApiClient) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(api)


@pytest.fixture
def custom(api: k8s.ApiClient) -> k8s.CustomObjectsApi:
    return k8s.CustomObjectsApi(api)


@pytest_asyncio.fixture(params=["typed", "dynamic", "kubectl"])
async def client(
    request: pytest.FixtureRequest, api: k8s.ApiClient, kubectl: Kubectl, tmp_path: Path
) -> Client:
    """The same check through kubernetes_asyncio typed APIs, its dynamic client, and kubectl."""
    if request.param == "typed":
        return TypedClient(api)
    if request.param == "dynamic":
        return DynClient(await DynamicClient(api, cache_file=str(tmp_path / "discovery.json")))
    return KubectlClient(kubectl)
