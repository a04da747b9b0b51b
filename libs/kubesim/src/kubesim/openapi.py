"""OpenAPI v3 documents (`/openapi/v3` index + one document per group/version).

kubectl (reference §2.13) needs, per GVK, paths whose operations carry
`x-kubernetes-group-version-kind` and `x-kubernetes-action`, and a `fieldValidation` query
parameter on POST/PUT/PATCH so it delegates validation to the server. The PATCH request
body lists strategic-merge-patch only for built-ins, so `kubectl apply` builds an SMP for
them and a JSON merge patch for custom resources. Schemas are the real v1.32 ones
(kubernetes-validate) for built-ins and the CRD's openAPIV3Schema for custom resources.
Documents are cached per registry generation; the index carries a content hash, so
clients refetch when CRDs change.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from kubesim import schemas
from kubesim.resources import ResourceRegistry, ResourceType

_OBJECT_META = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
_EXTRA_DEFS = (
    "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions",
    "io.k8s.apimachinery.pkg.apis.meta.v1.Status",
)


def _convert(node: Any) -> Any:
    """JSON-Schema (kubernetes-validate flavour) → OpenAPI 3.0 flavour."""
    if isinstance(node, list):
        return [_convert(n) for n in node]
    if not isinstance(node, dict):
        return node
    if "oneOf" in node and isinstance(node["oneOf"], list):
        types: set[str] = set()
        for alt in node["oneOf"]:
            t = alt.get("type") if isinstance(alt, dict) else None
            if isinstance(t, list):
                types.update(x for x in t if x != "null")
            elif isinstance(t, str):
                types.add(t)
        rest = {k: _convert(v) for k, v in node.items() if k != "oneOf"}
        if types == {"string", "integer"}:
            rest["x-kubernetes-int-or-string"] = True
            return rest
        rest["type"] = "string"
        return rest
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "$ref" and isinstance(value, str):
            out[key] = "#/components/schemas/" + value.rsplit("/", 1)[-1]
        elif key == "type" and isinstance(value, list):
            non_null = [t for t in value if t != "null"]
            if len(non_null) == 1 or non_null:
                out[key] = non_null[0]
        elif key in ("properties", "patternProperties") and isinstance(value, dict):
            out[key] = {k: _convert(v) for k, v in value.items()}
        elif (
            key == "enum"
            and node.get("type") in (["string", "null"], "string")
            and len(value) == 1
            and value[0] in ("v1",)
        ):
            continue
        else:
            out[key] = _convert(value)
    return out


def _refs(node: Any, found: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            found.add(ref.rsplit("/", 1)[-1])
        for v in node.values():
            _refs(v, found)
    elif isinstance(node, list):
        for v in node:
            _refs(v, found)


def _closure(roots: list[str]) -> dict[str, Any]:
    defs = schemas.definitions()
    out: dict[str, Any] = {}
    todo = [r for r in roots if r in defs]
    while todo:
        name = todo.pop()
        if name in out:
            continue
        node = defs[name]
        out[name] = node
        found: set[str] = set()
        _refs(node, found)
        todo.extend(f for f in found if f not in out and f in defs)
    return {k: _convert(v) for k, v in out.items()}


def _gvk(rt: ResourceType) -> dict[str, str]:
    return {"group": rt.group, "version": rt.version, "kind": rt.kind}


def _schema_name(rt: ResourceType) -> str:
    if rt.definition:
        return rt.definition
    reversed_group = ".".join(reversed(rt.group.split(".")))
    return f"{reversed_group}.{rt.version}.{rt.kind}"


def _query(name: str, description: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "query",
        "description": description,
        "schema": {"type": "string", "uniqueItems": True},
    }


_FIELD_VALIDATION = _query(
    "fieldValidation",
    "fieldValidation instructs the server on how to handle objects in the request (POST/PUT/PATCH) "
    "containing unknown or duplicate fields. Valid values are: Ignore, Warn (default), Strict.",
)
_FIELD_MANAGER = _query(
    "fieldManager",
    "fieldManager is a name associated with the actor or entity that is making these changes.",
)
_DRY_RUN = _query("dryRun", "When present, indicates that modifications should not be persisted.")


def _op(
    rt: ResourceType, action: str, op_id: str, *, body: bool = False, patch: bool = False
) -> dict[str, Any]:
    ref = {"$ref": f"#/components/schemas/{_schema_name(rt)}"}
    op: dict[str, Any] = {
        "operationId": op_id,
        "responses": {
            "200": {"description": "OK", "content": {"application/json": {"schema": ref}}}
        },
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": _gvk(rt),
    }
    if body or patch:
        op["parameters"] = [_DRY_RUN, _FIELD_MANAGER, _FIELD_VALIDATION]
    if body:
        op["requestBody"] = {"content": {"application/json": {"schema": ref}}, "required": True}
    if patch:
        types = [
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/apply-patch+yaml",
        ]
        if not rt.custom:
            types.insert(2, "application/strategic-merge-patch+json")
        op["requestBody"] = {
            "content": {t: {"schema": {"type": "object"}} for t in types},
            "required": True,
        }
    return op


def _path_params(rt: ResourceType, *, named: bool) -> list[dict[str, Any]]:
    params: list[dict[str, Any]] = []
    if named:
        params.append(
            {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
        )
    if rt.namespaced:
        params.append(
            {"name": "namespace", "in": "path", "required": True, "schema": {"type": "string"}}
        )
    return params


def _paths(rt: ResourceType) -> dict[str, Any]:
    prefix = "/api/v1" if not rt.group else f"/apis/{rt.group}/{rt.version}"
    base = (
        f"{prefix}/namespaces/{{namespace}}/{rt.plural}"
        if rt.namespaced
        else f"{prefix}/{rt.plural}"
    )
    kind = rt.kind
    paths: dict[str, Any] = {
        base: {
            "get": _op(rt, "list", f"list{kind}"),
            "post": _op(rt, "post", f"create{kind}", body=True),
            "delete": _op(rt, "deletecollection", f"deletecollection{kind}"),
            "parameters": _path_params(rt, named=False),
        },
        f"{base}/{{name}}": {
            "get": _op(rt, "get", f"read{kind}"),
            "put": _op(rt, "put", f"replace{kind}", body=True),
            "patch": _op(rt, "patch", f"patch{kind}", patch=True),
            "delete": _op(rt, "delete", f"delete{kind}"),
            "parameters": _path_params(rt, named=True),
        },
    }
    if rt.namespaced:
        paths[f"{prefix}/{rt.plural}"] = {"get": _op(rt, "list", f"list{kind}ForAllNamespaces")}
    if rt.has_status:
        paths[f"{base}/{{name}}/status"] = {
            "get": _op(rt, "get", f"read{kind}Status"),
            "put": _op(rt, "put", f"replace{kind}Status", body=True),
            "patch": _op(rt, "patch", f"patch{kind}Status", patch=True),
            "parameters": _path_params(rt, named=True),
        }
    return paths


def _custom_schema(rt: ResourceType) -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(
        json.dumps(rt.schema or {"type": "object", "x-kubernetes-preserve-unknown-fields": True})
    )
    props = schema.setdefault("properties", {})
    props["apiVersion"] = {"type": "string"}
    props["kind"] = {"type": "string"}
    props["metadata"] = {"$ref": f"#/components/schemas/{_OBJECT_META}"}
    schema.setdefault("type", "object")
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt)]
    return schema


class OpenApiDocuments:
    """Builds and caches the v3 index and per-group-version documents."""

    def __init__(self, resources: ResourceRegistry) -> None:
        self.resources = resources
        self._generation = -1
        self._docs: dict[str, bytes] = {}
        self._hashes: dict[str, str] = {}

    @staticmethod
    def _path_for(group: str, version: str) -> str:
        return "api/v1" if not group else f"apis/{group}/{version}"

    def _refresh(self) -> None:
        if self._generation == self.resources.generation:
            return
        self._docs.clear()
        self._hashes.clear()
        keys: set[tuple[str, str]] = {(rt.group, rt.version) for rt in self.resources}
        for group, version in sorted(keys):
            self._hashes[self._path_for(group, version)] = ""
        self._generation = self.resources.generation

    def _build(self, group: str, version: str) -> bytes:
        types = self.resources.in_group_version(group, version)
        paths: dict[str, Any] = {}
        roots: list[str] = [_OBJECT_META, *_EXTRA_DEFS]
        custom: dict[str, Any] = {}
        for rt in sorted(types, key=lambda t: t.plural):
            paths.update(_paths(rt))
            if rt.definition:
                roots.append(rt.definition)
                list_def = rt.definition + "List"
                if list_def in schemas.definitions():
                    roots.append(list_def)
            else:
                custom[_schema_name(rt)] = _custom_schema(rt)
        components = _closure(roots)
        components.update(custom)
        doc = {
            "openapi": "3.0.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": paths,
            "components": {"schemas": components},
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    def index(self) -> dict[str, Any]:
        self._refresh()
        out: dict[str, Any] = {}
        for path in self._hashes:
            doc = self.document(path)
            assert doc is not None
            out[path] = {"serverRelativeURL": f"/openapi/v3/{path}?hash={self._hashes[path]}"}
        return {"paths": out}

    def document(self, path: str) -> bytes | None:
        self._refresh()
        path = path.strip("/")
        if path not in self._hashes:
            return None
        if path not in self._docs:
            if path == "api/v1":
                group, version = "", "v1"
            else:
                _, group, version = path.split("/", 2)
            doc = self._build(group, version)
            self._docs[path] = doc
            self._hashes[path] = hashlib.sha512(doc).hexdigest()[:64].upper()
        return self._docs[path]
