"""Custom-resource validation against a CRD's structural schema, the way kube-apiserver does it.

Ported from apiextensions-apiserver (pkg/apiserver/validation/validation.go
`kubeOpenAPIResultToFieldErrors`, pkg/apiserver/schema/objectmeta/validation.go,
pkg/apiserver/schema/listtype) and kube-openapi's validators (pkg/validation/validate:
type.go, schema.go, object_validator.go, slice_validator.go, schema_messages.go; message
formats in pkg/validation/errors/schema.go). Each failure is a `status.details.causes` entry
with the real reason and wording, e.g. for `spec.priority: "high"` under `type: integer`:

    {"reason": "FieldValueTypeInvalid", "field": "spec.priority", "message":
     "Invalid value: \"string\": spec.priority in body must be of type integer: \"string\""}

Checked: `type` (with `nullable` and `x-kubernetes-int-or-string`), `enum`, `required`,
`format` (:mod:`kubesim.formats`), `pattern`, `minLength`/`maxLength`, `minimum`/`maximum`
(+ exclusive), `multipleOf`, `minItems`/`maxItems`, `uniqueItems`, `minProperties`/
`maxProperties`, `allOf`/`anyOf`/`oneOf`/`not`, `x-kubernetes-list-type` set/map
duplicates and `x-kubernetes-embedded-resource` (apiVersion, kind, metadata).
Not checked: CEL `x-kubernetes-validations`.

Paths are kube-openapi's: `a.b` for properties and map keys, `a[0]` for list items.
Updates ratchet (CRDValidationRatcheting, on by default since 1.30): a value equal to the
correlated old value (same property or map key; list items only in `set`/`map` lists) is
not validated again, so a CRD tightened under existing objects does not block their writes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from kubesim import formats, statuses, validation
from kubesim.statuses import Cause

__all__ = ["validate_custom"]

Schema = dict[str, Any]
_MISSING: Any = object()
_NIL = "<nil>"  # field.Path(nil).String(): composite errors carry no path
_DNS1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or "
    "'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
)


def validate_custom(schema: Schema | None, obj: dict[str, Any], old: Any = None) -> list[Cause]:
    """Causes for `obj` (an update ratchets against `old`, the stored object)."""
    if not schema:
        return []
    out: list[Cause] = []
    _node(obj, schema, "", _MISSING if old is None else old, out)
    return out


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _types(node: Schema) -> list[str]:
    if node.get("x-kubernetes-int-or-string"):
        return ["integer", "string"]
    t = node.get("type")
    if isinstance(t, str) and t:
        return [t]
    if isinstance(t, list):
        return [str(x) for x in t]
    return []


def _in(path: str) -> str:
    return f"{path} in body"


def _number(value: float, *, integral: bool) -> str:
    if integral and float(value).is_integer():
        return str(int(value))
    return statuses.go_float(float(value))


def _same(a: Any, b: Any) -> bool:
    """Enum membership: equal JSON values of the same JSON type (True is not 1)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    return type(a) is type(b) and bool(a == b)


def _child_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def _node(value: Any, node: Schema, path: str, old: Any, out: list[Cause]) -> None:
    if old is not _MISSING and old == value:
        return  # ratcheting: unchanged since the stored object
    types = _types(node)
    if value is None:
        if types and "null" not in types and not node.get("nullable"):
            out.append(
                statuses.type_invalid(
                    path, "null", f'{_in(path)} must be of type {",".join(types)}: "null"'
                )
            )
        _enum(value, node, path, out)
        return
    actual = _json_type(value)
    ok = (
        not types
        or actual in types
        or (actual == "integer" and "number" in types)
        or (actual == "number" and float(value).is_integer() and "integer" in types)
    )
    if not ok:
        detail = f'{_in(path)} must be of type {",".join(types)}: "{actual}"'
        out.append(statuses.type_invalid(path, actual, detail))
    _composites(value, node, path, out)
    if isinstance(value, str):
        _string(value, node, path, out)
    elif actual in ("integer", "number"):
        _numeric(value, node, path, out)
    elif isinstance(value, list):
        _array(value, node, path, old, out)
    _enum(value, node, path, out)
    if isinstance(value, dict):
        _object(value, node, path, old, out)


def _enum(value: Any, node: Schema, path: str, out: list[Cause]) -> None:
    allowed = node.get("enum")
    if not isinstance(allowed, list) or not allowed:
        return
    if any(_same(value, a) for a in allowed):
        return
    shown = [a if isinstance(a, str) else statuses.go_value(a) for a in allowed]
    out.append(statuses.not_supported(path, value, shown))


def _string(value: str, node: Schema, path: str, out: list[Cause]) -> None:
    max_len = node.get("maxLength")
    if isinstance(max_len, int) and len(value) > max_len:
        out.append(statuses.too_long(path, max_len))
    min_len = node.get("minLength")
    if isinstance(min_len, int) and len(value) < min_len:
        detail = f"{_in(path)} should be at least {min_len} chars long"
        out.append(statuses.invalid_value(path, value, detail))
    pattern = node.get("pattern")
    if isinstance(pattern, str):
        try:
            matched = re.search(pattern, value) is not None
        except re.error:
            matched = True  # the CRD would not have been accepted with a bad pattern
        if not matched:
            detail = f"{_in(path)} should match '{pattern}'"
            out.append(statuses.invalid_value(path, value, detail))
    fmt = node.get("format")
    if isinstance(fmt, str) and formats.supported(fmt) and not formats.is_valid(fmt, value):
        detail = f"{_in(path)} must be of type {fmt}: {statuses.go_quote(value)}"
        out.append(statuses.type_invalid(path, value, detail))


def _numeric(value: float, node: Schema, path: str, out: list[Cause]) -> None:
    integral = isinstance(value, int)
    factor = node.get("multipleOf")
    if isinstance(factor, (int, float)) and factor > 0:
        quotient = value / factor
        if not math.isclose(quotient, round(quotient), rel_tol=0, abs_tol=1e-9):
            shown = _number(factor, integral=integral)
            detail = f"{_in(path)} should be a multiple of {shown}"
            out.append(statuses.invalid_value(path, value, detail))
    maximum = node.get("maximum")
    if isinstance(maximum, (int, float)) and not isinstance(maximum, bool):
        exclusive = bool(node.get("exclusiveMaximum"))
        if value > maximum or (exclusive and value == maximum):
            words = "less than" if exclusive else "less than or equal to"
            detail = f"{_in(path)} should be {words} {_number(maximum, integral=integral)}"
            out.append(statuses.invalid_value(path, value, detail))
    minimum = node.get("minimum")
    if isinstance(minimum, (int, float)) and not isinstance(minimum, bool):
        exclusive = bool(node.get("exclusiveMinimum"))
        if value < minimum or (exclusive and value == minimum):
            words = "greater than" if exclusive else "greater than or equal to"
            detail = f"{_in(path)} should be {words} {_number(minimum, integral=integral)}"
            out.append(statuses.invalid_value(path, value, detail))


def _array(value: list[Any], node: Schema, path: str, old: Any, out: list[Cause]) -> None:
    items = node.get("items")
    if isinstance(items, dict):
        correlate = _correlator(node, old)
        for i, item in enumerate(value):
            _node(item, items, f"{path}[{i}]", correlate(item), out)
    min_items = node.get("minItems")
    if isinstance(min_items, int) and len(value) < min_items:
        detail = f"{_in(path)} should have at least {min_items} items"
        out.append(statuses.invalid_value(path, len(value), detail))
    max_items = node.get("maxItems")
    if isinstance(max_items, int) and len(value) > max_items:
        out.append(statuses.too_many(path, len(value), max_items))
    if node.get("uniqueItems") and _has_duplicates(value):
        detail = f"{_in(path)} shouldn't contain duplicates"
        out.append(statuses.invalid_value(path, "", detail))
    _list_type(value, node, path, out)


def _has_duplicates(value: list[Any]) -> bool:
    return any(value[i] in value[:i] for i in range(len(value)))


def _map_key(item: Any, keys: list[str], items: Schema) -> tuple[Any, ...] | None:
    if not isinstance(item, dict):
        return None
    props = items.get("properties") or {}
    return tuple(item.get(k, (props.get(k) or {}).get("default")) for k in keys)


def _correlator(node: Schema, old: Any) -> Callable[[Any], Any]:
    """Old value of a list item for ratcheting: only `set` and `map` lists correlate items."""
    list_type = node.get("x-kubernetes-list-type")
    if not isinstance(old, list) or list_type not in ("set", "map"):
        return lambda _item: _MISSING
    if list_type == "set":
        return lambda item: item if item in old else _MISSING
    keys = [str(k) for k in node.get("x-kubernetes-list-map-keys") or []]
    items = node.get("items") or {}
    by_key = {_map_key(o, keys, items): o for o in old}
    by_key.pop(None, None)
    return lambda item: by_key.get(_map_key(item, keys, items), _MISSING)


def _list_type(value: list[Any], node: Schema, path: str, out: list[Cause]) -> None:
    list_type = node.get("x-kubernetes-list-type")
    if list_type == "set":
        for i, item in enumerate(value):
            if item in value[:i]:
                out.append(statuses.duplicate(f"{path}[{i}]", item))
    elif list_type == "map":
        keys = [str(k) for k in node.get("x-kubernetes-list-map-keys") or []]
        items = node.get("items") or {}
        seen: set[str] = set()
        for i, item in enumerate(value):
            key = _map_key(item, keys, items)
            if key is None:
                continue
            marker = statuses.go_value(list(key))
            if marker in seen:
                out.append(statuses.duplicate(f"{path}[{i}]", dict(zip(keys, key, strict=True))))
            seen.add(marker)


def _object(value: dict[str, Any], node: Schema, path: str, old: Any, out: list[Cause]) -> None:
    count = len(value)
    min_props = node.get("minProperties")
    if isinstance(min_props, int) and count < min_props:
        detail = f"{_in(path)} should have at least {min_props} properties"
        out.append(statuses.invalid_value(path, count, detail))
        return
    max_props = node.get("maxProperties")
    if isinstance(max_props, int) and count > max_props:
        out.append(statuses.too_many(path, count, max_props))
        return
    declared = node.get("properties")
    props: dict[str, Any] = declared if isinstance(declared, dict) else {}
    extra = node.get("additionalProperties")
    old_map = old if isinstance(old, dict) else {}
    if isinstance(extra, dict):
        for key, item in value.items():
            if key not in props:
                _node(item, extra, f"{path}.{key}", old_map.get(key, _MISSING), out)
    for key, item in value.items():
        child = props.get(key)
        if isinstance(child, dict):
            _node(item, child, _child_path(path, key), old_map.get(key, _MISSING), out)
    for key in node.get("required") or []:
        if key not in value:
            out.append(statuses.required(_child_path(path, str(key))))
    if node.get("x-kubernetes-embedded-resource"):
        out.extend(_embedded(value, path))


def _composites(value: Any, node: Schema, path: str, out: list[Cause]) -> None:
    """allOf / anyOf / oneOf / not (kube-openapi schema_props.go)."""

    def run(sub: Any) -> list[Cause]:
        found: list[Cause] = []
        if isinstance(sub, dict):
            _node(value, sub, path, _MISSING, found)
        return found

    quoted = statuses.go_quote(path)
    all_of = node.get("allOf")
    if isinstance(all_of, list) and all_of:
        results = [run(s) for s in all_of]
        for r in results:
            out.extend(r)
        valid = sum(1 for r in results if not r)
        if valid != len(results):
            suffix = "Found none valid" if valid == 0 else ""
            out.append(_composite(f"{quoted} must validate all the schemas (allOf){suffix}"))
    any_of = node.get("anyOf")
    if isinstance(any_of, list) and any_of:
        results = [run(s) for s in any_of]
        if all(results):
            out.append(_composite(f"{quoted} must validate at least one schema (anyOf)"))
            out.extend(_fewest(results))
    one_of = node.get("oneOf")
    if isinstance(one_of, list) and one_of:
        results = [run(s) for s in one_of]
        valid = sum(1 for r in results if not r)
        if valid != 1:
            more = "Found none valid" if valid == 0 else f"Found {valid} valid alternatives"
            out.append(
                _composite(f"{quoted} must validate one and only one schema (oneOf). {more}")
            )
            if valid == 0:
                out.extend(_fewest(results))
    not_schema = node.get("not")
    if isinstance(not_schema, dict) and not run(not_schema):
        out.append(_composite(f"{quoted} must not validate the schema (not)"))


def _fewest(results: list[list[Cause]]) -> list[Cause]:
    """The alternative closest to passing (kube-openapi merges its best failure)."""
    return min(results, key=lambda r: len(r))


def _composite(message: str) -> Cause:
    # An errors.New(...) result is no *Validation: field.Invalid(nil path, "", err.Error()).
    return statuses.invalid_value(_NIL, "", message)


def _embedded(value: dict[str, Any], path: str) -> list[Cause]:
    """objectmeta.validateEmbeddedResource: apiVersion and kind, then metadata."""
    out: list[Cause] = []
    for key in ("apiVersion", "kind"):
        if key not in value:
            out.append(statuses.required(_child_path(path, key)))
    found = _nonempty_string(value, "apiVersion", path, out)
    if found is not None and found[0].count("/") > 1:
        api_version, where = found
        detail = f"unexpected GroupVersion string: {api_version}"
        out.append(statuses.invalid_value(where, api_version, detail))
    found = _nonempty_string(value, "kind", path, out)
    if found is not None:
        kind, where = found
        problems = []
        if len(kind) > 63:
            problems.append("must be no more than 63 characters")
        if not _DNS1035.match(kind.lower()):
            problems.append(_DNS1035_MSG)
        if problems:
            detail = "may have mixed case, but should otherwise match: " + ",".join(problems)
            out.append(statuses.invalid_value(where, kind, detail))
    meta = value.get("metadata")
    if isinstance(meta, dict):
        prefix = _child_path(path, "metadata")
        for cause in validation.validate_metadata(meta):
            field = cause["field"]
            out.append({**cause, "field": prefix + field[len("metadata") :]})
        name = meta.get("name")
        if isinstance(name, str) and name:
            out.extend(_path_segment(name, f"{prefix}.name"))
    return out


def _nonempty_string(
    value: dict[str, Any], key: str, path: str, out: list[Cause]
) -> tuple[str, str] | None:
    """`value[key]` and its path when it is a non-empty string; a cause in `out` when it is
    present but not one (absent: nothing, the caller says it is required)."""
    if key not in value:
        return None
    where = _child_path(path, key)
    text = value[key]
    if not isinstance(text, str):
        out.append(statuses.invalid_value(where, text, "must be a string"))
    elif not text:
        out.append(statuses.invalid_value(where, text, "must not be empty"))
    else:
        return text, where
    return None


def _path_segment(name: str, field: str) -> list[Cause]:
    """path.ValidatePathSegmentName (embedded objects' names)."""
    if name in (".", ".."):
        return [statuses.invalid_value(field, name, f"may not be '{name}'")]
    return [
        statuses.invalid_value(field, name, f"may not contain '{bad}'")
        for bad in ("/", "%")
        if bad in name
    ]
