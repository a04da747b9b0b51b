"""The three PATCH flavours: JSON merge (RFC 7386), JSON patch (RFC 6902), strategic merge.

Pure functions over plain JSON values. Strategic merge reads its merge keys and strategies
from the real schemas (`x-kubernetes-patch-merge-key` / `-strategy`), so e.g.
`metadata.finalizers` (strategy merge, primitives) is unioned and `[]` removes nothing
(reference §0.6).
"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch

from kubesim import schemas

MAX_JSON_PATCH_OPS = 10_000


class PatchError(Exception):
    """A patch that cannot be applied. `code` is the HTTP status (400 or 422)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# ---- JSON merge patch --------------------------------------------------------------------


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result: dict[str, Any] = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            result[key] = merge_patch(result.get(key), value)
        else:
            result[key] = copy.deepcopy(value)
    return result


# ---- JSON patch --------------------------------------------------------------------------


def json_patch(target: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        kind = "object" if isinstance(ops, dict) else type(ops).__name__
        raise PatchError(
            400, f"json: cannot unmarshal {kind} into Go value of type jsonpatch.Patch"
        )
    if len(ops) > MAX_JSON_PATCH_OPS:
        raise PatchError(
            422,
            f"The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPS}, got "
            f"{len(ops)}",
        )
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise PatchError(400, "Unexpected kind: <nil>")
        if op["op"] not in ("add", "remove", "replace", "move", "copy", "test"):
            raise PatchError(422, f"Unexpected kind: {op['op']}")
    try:
        patch = jsonpatch.JsonPatch(ops)
        return patch.apply(copy.deepcopy(target))
    except jsonpatch.JsonPatchTestFailed as exc:
        path = _failed_test_path(ops, target)
        raise PatchError(422, f"testing value {path} failed: test failed") from exc
    except jsonpatch.JsonPatchConflict as exc:
        raise PatchError(422, str(exc)) from exc
    except jsonpatch.InvalidJsonPatch as exc:
        raise PatchError(400, str(exc)) from exc
    except Exception as exc:  # JsonPointerException and friends
        raise PatchError(422, str(exc)) from exc


def _failed_test_path(ops: list[Any], target: Any) -> str:
    doc = copy.deepcopy(target)
    for op in ops:
        if op.get("op") == "test":
            try:
                jsonpatch.JsonPatch([op]).apply(doc)
            except Exception:
                return str(op.get("path", ""))
        else:
            try:
                doc = jsonpatch.JsonPatch([op]).apply(doc)
            except Exception:
                return str(op.get("path", ""))
    return ""


# ---- strategic merge patch ---------------------------------------------------------------

_DIRECTIVE_PATCH = "$patch"
_RETAIN_KEYS = "$retainKeys"
_DELETE_FROM_PRIMITIVE = "$deleteFromPrimitiveList/"
_SET_ELEMENT_ORDER = "$setElementOrder/"


def strategic_merge_patch(original: Any, patch: Any, schema: schemas.Node | None) -> Any:
    """Apply an SMP to `original` using the schema node of the object's type."""
    if not isinstance(patch, dict):
        raise PatchError(400, "invalid patch: strategic merge patch must be a JSON object")
    result = _merge_map(original if isinstance(original, dict) else {}, patch, schema)
    return {} if result is None else result


def _merge_map(
    original: dict[str, Any], patch: dict[str, Any], schema: schemas.Node | None
) -> dict[str, Any] | None:
    directive = patch.get(_DIRECTIVE_PATCH)
    if directive == "delete":
        return None
    if directive == "replace":
        replaced: dict[str, Any] = _clean(
            {k: v for k, v in patch.items() if k != _DIRECTIVE_PATCH}, schema
        )
        return replaced
    if directive not in (None, "merge"):
        raise PatchError(400, f"Unknown patch type: {directive} in map: {patch}")
    result = dict(original)
    retain = patch.get(_RETAIN_KEYS)
    for key, value in patch.items():
        if key in (_DIRECTIVE_PATCH, _RETAIN_KEYS) or key.startswith(_SET_ELEMENT_ORDER):
            continue
        if key.startswith(_DELETE_FROM_PRIMITIVE):
            field = key[len(_DELETE_FROM_PRIMITIVE) :]
            if not isinstance(value, list):
                raise PatchError(400, "invalid patch: $deleteFromPrimitiveList must be a list")
            current = result.get(field)
            if isinstance(current, list):
                result[field] = [v for v in current if v not in value]
            continue
        child_schema = schemas.property_schema(schema, key)
        if value is None:
            result.pop(key, None)
            continue
        current = result.get(key)
        if isinstance(value, dict):
            merged = _merge_map(current if isinstance(current, dict) else {}, value, child_schema)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
        elif isinstance(value, list):
            result[key] = _merge_list(
                current if isinstance(current, list) else [], value, child_schema
            )
        else:
            result[key] = copy.deepcopy(value)
    if isinstance(retain, list):
        keep = set(retain)
        result = {k: v for k, v in result.items() if k in keep or k not in original}
    return result


def _clean(value: Any, schema: schemas.Node | None) -> Any:
    """A patch fragment inserted as-is, with directives stripped."""
    if isinstance(value, dict):
        merged = _merge_map({}, value, schema)
        return {} if merged is None else merged
    if isinstance(value, list):
        return _merge_list([], value, schema)
    return copy.deepcopy(value)


def _strategy(schema: schemas.Node | None) -> tuple[str, str | None]:
    if schema is None:
        return "", None
    strategy = schema.get("x-kubernetes-patch-strategy", "")
    key = schema.get("x-kubernetes-patch-merge-key")
    return str(strategy), (str(key) if key else None)


def _merge_list(original: list[Any], patch: list[Any], schema: schemas.Node | None) -> list[Any]:
    strategy, merge_key = _strategy(schema)
    item_schema = schemas.items_schema(schema)
    replace = any(
        isinstance(p, dict) and p.get(_DIRECTIVE_PATCH) == "replace" and len(p) == 1 for p in patch
    )
    if replace:
        original = []
        patch = [
            p
            for p in patch
            if not (isinstance(p, dict) and p.get(_DIRECTIVE_PATCH) == "replace" and len(p) == 1)
        ]
    if "merge" not in strategy.split(","):
        return [
            _clean(p, item_schema)
            for p in patch
            if not (isinstance(p, dict) and p.get(_DIRECTIVE_PATCH))
        ]
    if merge_key is None:
        # Primitive list with merge strategy: union, original order first.
        result = list(original)
        for p in patch:
            if isinstance(p, dict):
                continue
            if p not in result:
                result.append(copy.deepcopy(p))
        return result
    result = [copy.deepcopy(o) for o in original]
    for p in patch:
        if not isinstance(p, dict):
            raise PatchError(400, f"invalid patch: list element {p!r} is not a map")
        if merge_key not in p:
            raise PatchError(400, f"map: {p} does not contain declared merge key: {merge_key}")
        index = next(
            (
                i
                for i, o in enumerate(result)
                if isinstance(o, dict) and o.get(merge_key) == p[merge_key]
            ),
            None,
        )
        directive = p.get(_DIRECTIVE_PATCH)
        if directive == "delete":
            if index is not None:
                result = [
                    o
                    for o in result
                    if not (isinstance(o, dict) and o.get(merge_key) == p[merge_key])
                ]
            continue
        if index is None:
            result.append(_clean(p, item_schema))
        else:
            merged = _merge_map(result[index], p, item_schema)
            if merged is None:
                del result[index]
            else:
                result[index] = merged
    return result
