"""The real Kubernetes v1.32 JSON schemas shipped by the `kubernetes-validate` package.

One loaded copy serves three users: strategic merge patch (merge keys and strategies),
server-side field validation (unknown fields), and the OpenAPI v3 documents kubectl reads.
"""

from __future__ import annotations

import functools
import json
from importlib import resources as importlib_resources
from typing import Any

SCHEMA_VERSION = "v1.32.0-local"
Node = dict[str, Any]


@functools.cache
def definitions() -> dict[str, Node]:
    root = importlib_resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", SCHEMA_VERSION, "_definitions.json"
    )
    data: dict[str, Any] = json.loads(root.read_text(encoding="utf-8"))
    defs: dict[str, Node] = data["$defs"]
    return defs


def resolve(node: Node | None) -> Node | None:
    """Follow a `$ref` (one level; definitions never chain refs directly)."""
    if node is None:
        return None
    ref = node.get("$ref")
    if isinstance(ref, str):
        return definitions().get(ref.rsplit("/", 1)[-1])
    if "allOf" in node and isinstance(node["allOf"], list) and len(node["allOf"]) == 1:
        return resolve(node["allOf"][0])
    return node


def definition(name: str | None) -> Node | None:
    if not name:
        return None
    return definitions().get(name)


def property_schema(node: Node | None, key: str) -> Node | None:
    """Schema of child `key` of an object schema (resolved), or None if unknown."""
    node = resolve(node)
    if node is None:
        return None
    props = node.get("properties")
    if isinstance(props, dict) and key in props:
        child: Node = props[key]
        return child
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        return extra
    return None


def items_schema(node: Node | None) -> Node | None:
    node = resolve(node)
    if node is None:
        return None
    items = node.get("items")
    return items if isinstance(items, dict) else None


def has_type(node: Node, name: str) -> bool:
    t = node.get("type")
    if isinstance(t, list):
        return name in t
    return t == name
