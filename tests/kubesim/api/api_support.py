"""Helpers for the API-server tests: object builders and error capture."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

from kubernetes_asyncio.client.rest import ApiException

AW_GROUP = "workload.codeflare.dev"
AW_VERSION = "v1beta1"
AW_PLURAL = "appwrappers"


def pod_body(name: str, *, node: str | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}], **spec},
    }
    if node:
        body["spec"]["nodeName"] = node
    return body


def appwrapper_crd(*, scope: str = "Namespaced", status: bool = True) -> dict[str, Any]:
    version: dict[str, Any] = {
        "name": AW_VERSION,
        "served": True,
        "storage": True,
        "schema": {
            "openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": {
                        "type": "object",
                        "properties": {
                            "priority": {"type": "integer"},
                            "resources": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            },
                        },
                    },
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                },
            }
        },
    }
    if status:
        version["subresources"] = {"status": {}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{AW_PLURAL}.{AW_GROUP}"},
        "spec": {
            "group": AW_GROUP,
            "names": {
                "kind": "AppWrapper",
                "listKind": "AppWrapperList",
                "plural": AW_PLURAL,
                "singular": "appwrapper",
            },
            "scope": scope,
            "versions": [version],
        },
    }


def appwrapper(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": f"{AW_GROUP}/{AW_VERSION}",
        "kind": "AppWrapper",
        "metadata": {"name": name},
        "spec": {"priority": 1, **spec},
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


async def api_error(call: Awaitable[Any]) -> tuple[int, dict[str, Any]]:
    """Await a client call that must fail; return (HTTP status, Status body)."""
    try:
        await call
    except ApiException as exc:
        return exc.status, status_of(exc)
    raise AssertionError("call succeeded but an ApiException was expected")
