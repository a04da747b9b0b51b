"""What the API server does to a custom resource's JSON between decoding and validation.

After pruning unknown fields (:func:`kubesim.validation.unknown_fields_custom`), the real
decoder for custom resources (apiextensions-apiserver `unstructuredSchemaCoercer.apply` and
the defaulting decoder; pkg/apiserver/schema/defaulting) does two more things, both ported
here as pure functions over the CRD's `openAPIV3Schema`:

* :func:`drop_nulls` — `PruneNonNullableNullsWithoutDefaults`: an object field whose value
  is `null` is removed when its schema is neither `nullable` nor has a `default` (so
  `{"spec": {"priority": null}}` means "unset", not "wrong type"). Nulls in lists stay and
  are then reported by validation.
* :func:`apply_defaults` — `defaulting.Default`: every declared property with a `default`
  that is absent (or a non-nullable null) gets a deep copy of the default; defaults apply
  inside objects that exist, never create the parent, and nest (a defaulted object gets its
  own properties' defaults).

Not ported: defaulting on read from storage (the real server also defaults stored objects
when they are read, so a default added to a CRD later shows up without a write).
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["apply_defaults", "coerce", "drop_nulls"]

Schema = dict[str, Any]
_ROOT_SKIP = frozenset({"metadata"})


def _child(node: Schema, key: str) -> Schema | None:
    props = node.get("properties")
    if isinstance(props, dict) and key in props:
        child = props[key]
        return child if isinstance(child, dict) else None
    extra = node.get("additionalProperties")
    return extra if isinstance(extra, dict) else None


def drop_nulls(value: Any, node: Schema | None, *, skip: frozenset[str] = frozenset()) -> None:
    """Remove `null` object fields that are neither nullable nor defaulted (in place)."""
    if not node:
        return
    if isinstance(value, dict):
        for key in list(value):
            child = None if key in skip else _child(node, key)
            if child is None:
                continue
            item = value[key]
            if item is None:
                if "default" not in child and not child.get("nullable"):
                    del value[key]
            else:
                drop_nulls(item, child)
    elif isinstance(value, list):
        items = node.get("items")
        if isinstance(items, dict):
            for item in value:
                drop_nulls(item, items)


def _non_nullable_null(value: Any, node: Schema | None) -> bool:
    return value is None and node is not None and not node.get("nullable")


def apply_defaults(value: Any, node: Schema | None, *, skip: frozenset[str] = frozenset()) -> None:
    """Fill in schema defaults inside `value` (in place)."""
    if not node:
        return
    if isinstance(value, dict):
        props = node.get("properties")
        if isinstance(props, dict):
            for key, prop in props.items():
                if key in skip or not isinstance(prop, dict) or "default" not in prop:
                    continue
                if key not in value or _non_nullable_null(value[key], prop):
                    value[key] = copy.deepcopy(prop["default"])
        else:
            props = {}
        extra = node.get("additionalProperties")
        for key, item in value.items():
            if key in skip:
                continue
            if key in props:
                apply_defaults(item, props[key])
            elif isinstance(extra, dict):
                if _non_nullable_null(item, extra) and "default" in extra:
                    value[key] = item = copy.deepcopy(extra["default"])
                apply_defaults(item, extra)
    elif isinstance(value, list):
        items = node.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                if _non_nullable_null(item, items) and "default" in items:
                    value[i] = item = copy.deepcopy(items["default"])
                apply_defaults(item, items)


def coerce(schema: Schema | None, obj: dict[str, Any]) -> None:
    """Null pruning then defaulting of a whole custom resource (metadata left alone)."""
    if not schema:
        return
    drop_nulls(obj, schema, skip=_ROOT_SKIP)
    apply_defaults(obj, schema, skip=_ROOT_SKIP)
