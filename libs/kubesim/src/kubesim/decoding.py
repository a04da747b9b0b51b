"""Decoding a built-in object's JSON into its Go type: the wrong-type errors a real API server
gives before any validation runs.

A built-in kind is decoded into its Go struct (sigs.k8s.io/json, a fork of encoding/json),
so a JSON value of the wrong type never reaches validation: create and update answer
`400 BadRequest` with the decoder's error behind the handler's prefix
(apiserver endpoints/handlers/rest.go `transformDecodeError`):

    Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string into Go
    struct field PodSpec.spec.terminationGracePeriodSeconds of type int64

and a patch whose result does not decode answers `422 Invalid` on the field `patch`
(handlers/patch.go; see :func:`kubesim.statuses.patch_invalid`). The decoder reports the first
error only, in document order; the message names the innermost Go struct, the JSON field path
from the root (no list indexes, no map keys) and the Go type. `null` is never an error (it
leaves the field unset). Custom unmarshalers: `resource.Quantity` (string or number, a string
must parse), `intstr.IntOrString` (string or int32), `metav1.Time`/`MicroTime` (string),
`RawExtension`/`JSON`/`FieldsV1` (anything).

The Go types come from the v1.32 schemas (:mod:`kubesim.schemas`): `$ref` → `v1.PodSpec`,
arrays → `[]…`, maps → `map[string]…`, integer formats → `int32`/`int64`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kubesim import schemas, statuses
from kubesim.resources import ResourceType

__all__ = ["DecodeError", "check_create", "check_patch", "first_error"]

Node = schemas.Node
_QUANTITY = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"
_TIMES = frozenset(
    {"io.k8s.apimachinery.pkg.apis.meta.v1.Time", "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"}
)
_ANY = frozenset(
    {
        "io.k8s.apimachinery.pkg.runtime.RawExtension",
        "io.k8s.apimachinery.pkg.apis.meta.v1.FieldsV1",
        "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSON",
    }
)
QUANTITY_MESSAGE = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


class DecodeError(Exception):
    """The first decoding error, worded like Go's encoding/json."""


def _ref_name(node: Node) -> str | None:
    ref = node.get("$ref")
    if isinstance(ref, str):
        return ref.rsplit("/", 1)[-1]
    all_of = node.get("allOf")
    if isinstance(all_of, list) and len(all_of) == 1 and isinstance(all_of[0], dict):
        return _ref_name(all_of[0])
    return None


def _go_short(definition: str) -> str:
    """`io.k8s.api.core.v1.PodSpec` → `v1.PodSpec` (Go package name + type)."""
    parts = definition.split(".")
    return f"{parts[-2]}.{parts[-1]}" if len(parts) >= 2 else definition


def _types(node: Node) -> list[str]:
    t = node.get("type")
    if isinstance(t, str):
        return [t]
    if isinstance(t, list):
        return [x for x in t if x != "null"]
    return []


def _go_type(node: Node) -> str:
    ref = _ref_name(node)
    if ref is not None:
        special = {
            _QUANTITY: "resource.Quantity",
            _INT_OR_STRING: "intstr.IntOrString",
        }
        return special.get(ref, _go_short(ref))
    types = _types(node)
    kind = types[0] if types else ""
    fmt = node.get("format")
    if kind == "integer":
        return fmt if fmt in ("int32", "int64") else "int"
    if kind == "number":
        return "float32" if fmt == "float" else "float64"
    if kind == "boolean":
        return "bool"
    if kind == "string":
        return "[]uint8" if fmt == "byte" else "string"
    if kind == "array":
        items = node.get("items")
        return "[]" + (_go_type(items) if isinstance(items, dict) else "interface {}")
    if kind == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict) and not node.get("properties"):
            return "map[string]" + _go_type(extra)
        return "map[string]interface {}"
    return "interface {}"


_INT32: Node = {"type": "integer", "format": "int32"}
# id(node) -> (node, $ref name, first JSON type); the node is kept so its id stays unique.
# Only persistent nodes (the loaded definitions, _INT32) are ever looked up.
_INFO: dict[int, tuple[Node, str | None, str]] = {}


def _info(node: Node) -> tuple[str | None, str]:
    hit = _INFO.get(id(node))
    if hit is None:
        types = _types(node)
        hit = _INFO[id(node)] = (node, _ref_name(node), types[0] if types else "")
    return hit[1], hit[2]


def _json_kind(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


class _Decoder:
    def __init__(self) -> None:
        self.struct = ""
        self.fields: list[str] = []

    def fail(self, value_kind: str, go_type: str) -> DecodeError:
        if self.struct or self.fields:
            where = f"Go struct field {self.struct}.{'.'.join(self.fields)}"
        else:
            where = "Go value"
        return DecodeError(f"json: cannot unmarshal {value_kind} into {where} of type {go_type}")

    def value(self, value: Any, node: Node) -> None:
        if value is None:
            return
        ref, kind = _info(node)
        if ref is not None:
            self.reference(value, ref, node)
            return
        if kind == "integer":
            self.integer(value, node)
        elif kind == "number":
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise self.fail(_json_kind(value), _go_type(node))
        elif kind == "boolean":
            if not isinstance(value, bool):
                raise self.fail(_json_kind(value), "bool")
        elif kind == "string":
            if not isinstance(value, str):
                raise self.fail(_json_kind(value), _go_type(node))
        elif kind == "array":
            if not isinstance(value, list):
                raise self.fail(_json_kind(value), _go_type(node))
            items = node.get("items")
            if isinstance(items, dict):
                for item in value:
                    self.value(item, items)
        elif kind == "object":
            if not isinstance(value, dict):
                raise self.fail(_json_kind(value), _go_type(node))
            self.mapping(value, node)

    def integer(self, value: Any, node: Node) -> None:
        go_type = _go_type(node)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.fail(_json_kind(value), go_type)
        bits = 32 if go_type == "int32" else 64
        if isinstance(value, float) or not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise self.fail(f"number {value!r}", go_type)

    def reference(self, value: Any, ref: str, node: Node) -> None:
        if ref in _ANY:
            return
        if ref in _TIMES:
            if not isinstance(value, str):
                raise self.fail(_json_kind(value), "string")
            return
        if ref == _INT_OR_STRING:
            if isinstance(value, str):
                return
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.fail(_json_kind(value), "int32")
            self.integer(value, _INT32)
            return
        if ref == _QUANTITY:
            self.quantity(value)
            return
        resolved = schemas.definition(ref)
        if resolved is None:
            return
        if "properties" in resolved:
            if not isinstance(value, dict):
                raise self.fail(_json_kind(value), _go_short(ref))
            outer = self.struct
            self.struct = ref.rsplit(".", 1)[-1]
            try:
                self.mapping(value, resolved)
            finally:
                self.struct = outer
            return
        self.value(value, resolved)

    def quantity(self, value: Any) -> None:
        from kubesim.controllers.quantity import QuantityError, parse_quantity

        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise DecodeError(QUANTITY_MESSAGE)
        try:
            parse_quantity(value.strip() if isinstance(value, str) else value)
        except (QuantityError, ValueError) as exc:
            raise DecodeError(QUANTITY_MESSAGE) from exc

    def mapping(self, value: dict[str, Any], node: Node) -> None:
        props = node.get("properties")
        extra = node.get("additionalProperties")
        for key, item in value.items():
            if isinstance(props, dict) and key in props:
                self.fields.append(key)
                try:
                    self.value(item, props[key])
                finally:
                    self.fields.pop()
            elif isinstance(extra, dict):
                self.value(item, extra)


def first_error(rt: ResourceType, obj: dict[str, Any]) -> str | None:
    """The decoder's first error for a built-in object, or None if it decodes."""
    root = schemas.definition(rt.definition)
    if root is None:
        return None
    decoder = _Decoder()
    decoder.struct = rt.kind
    try:
        decoder.mapping(obj, root)
    except DecodeError as exc:
        return str(exc)
    return None


def check_create(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Create/update body: 400 `<Kind> in version "<v>" cannot be handled as a <Kind>: …`."""
    if rt.custom:
        return
    error = first_error(rt, obj)
    if error is not None:
        raise statuses.bad_request(
            f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {error}'
        )


def check_patch(rt: ResourceType, patched: dict[str, Any], bad_value: Callable[[], str]) -> None:
    """Patched object: 422 Invalid on `patch` with the handler's bad value (made on demand)."""
    if rt.custom:
        return
    error = first_error(rt, patched)
    if error is not None:
        raise statuses.patch_invalid(bad_value(), error)


def go_map_repr(value: Any) -> str:
    """Go's `%+v` of a decoded JSON map (the bad value of a failed strategic-merge patch)."""
    if isinstance(value, dict):
        inner = " ".join(f"{k}:{go_map_repr(value[k])}" for k in sorted(value))
        return f"map[{inner}]"
    if isinstance(value, list):
        return "[" + " ".join(go_map_repr(v) for v in value) + "]"
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return statuses.go_float(value)
    return str(value)
