"""Fixtures for the API-server tests: a fresh namespace per test, the AppWrapper CRD."""

from __future__ import annotations

import itertools
import sys
from pathlib import Path
from typing import Any

import pytest_asyncio
from kubernetes_asyncio import client as k8s

sys.path.insert(0, str(Path(__file__).parent))

from api_support import appwrapper_crd

_counter = itertools.count(1)


@pytest_asyncio.fixture
async def ns(core_api: k8s.CoreV1Api) -> str:
    name = f"t{next(_counter)}"
    await core_api.create_namespace({"metadata": {"name": name}})
    return name


@pytest_asyncio.fixture
async def aw_crd(api_client: k8s.ApiClient) -> dict[str, Any]:
    ext = k8s.ApiextensionsV1Api(api_client)
    await ext.create_custom_resource_definition(appwrapper_crd())
    return appwrapper_crd()
