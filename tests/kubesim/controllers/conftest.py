"""Fixtures for the fake-cluster tests: a started `Cluster` with fast timings, real clients.

Timings are shortened (node monitor grace 1 s instead of 40 s, default toleration 1 s instead of
300 s, pod start 0.1 s…) so a node-loss scenario runs in about two seconds. Clients are the real
ones: kubernetes-asyncio over HTTP, kubectl and the `kubesim` CLI as subprocesses.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import config as k8s_config

sys.path.insert(0, str(Path(__file__).parent))

from cluster_support import FAST

from kubesim.cluster import Cluster, ClusterConfig


@pytest.fixture
def fast_config() -> ClusterConfig:
    return FAST


@pytest.fixture
async def cluster_factory() -> AsyncIterator[Callable[..., Awaitable[Cluster]]]:
    started: list[Cluster] = []

    async def start(**overrides: Any) -> Cluster:
        cluster = Cluster(dataclasses.replace(FAST, **overrides))
        await cluster.start()
        started.append(cluster)
        return cluster

    yield start
    for cluster in started:
        await cluster.stop()


@pytest.fixture
async def cluster(cluster_factory: Callable[..., Awaitable[Cluster]]) -> Cluster:
    return await cluster_factory()


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[k8s.ApiClient]:
    configuration = k8s.Configuration()
    await k8s_config.load_kube_config(
        config_file=str(cluster.kubeconfig_path), client_configuration=configuration
    )
    async with k8s.ApiClient(configuration) as api_client:
        yield api_client


@pytest.fixture
def core(api: k8s.ApiClient) -> k8s.CoreV1Api:
    return k8s.CoreV1Api(api)


@pytest.fixture
def batch(api: k8s.ApiClient) -> k8s.BatchV1Api:
    return k8s.BatchV1Api(api)
