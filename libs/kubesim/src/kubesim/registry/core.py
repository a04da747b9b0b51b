"""The registry's shared ground: the patch content types, the default namespaces, the
write result, metadata normalisation, and the checks every verb applies before it
touches the store (namespace existence and agreement, kind/apiVersion, field
validation), plus how a stored object is presented to a client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubesim import (
    statuses,
    structural,
    validation,
)
from kubesim.registry.encodings import ItemEncodings
from kubesim.resources import (
    CRD_TYPE,
    NAMESPACE_TYPE,
    ResourceRegistry,
    ResourceType,
)
from kubesim.statuses import ApiError
from kubesim.store import Store

IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(slots=True)
class WriteResult:
    obj: dict[str, Any]
    code: int = 200
    warnings: list[str] = field(default_factory=list)


def _meta(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        meta = {}
        obj["metadata"] = meta
    return meta


_OMIT_EMPTY_META = (
    "labels",
    "annotations",
    "finalizers",
    "ownerReferences",
    "managedFields",
    "generateName",
)


def _normalize_meta(obj: dict[str, Any]) -> None:
    """ObjectMeta round-trips through Go structs: empty omitempty fields disappear."""
    meta = _meta(obj)
    for key in _OMIT_EMPTY_META:
        if key in meta and not meta[key]:
            del meta[key]


def _internal(message: str) -> ApiError:
    return ApiError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


class RegistryCore:
    """The store, the resource types and the checks shared by every verb."""

    def __init__(
        self,
        store: Store,
        resources: ResourceRegistry,
        *,
        default_toleration_seconds: int = 300,
    ) -> None:
        self.store = store
        self.resources = resources
        self.default_toleration_seconds = default_toleration_seconds
        self.on_crd_change: list[Callable[[], None]] = []
        self.list_items = ItemEncodings()
        store.listeners.append(self.list_items.on_change)

    # ---- presentation -----------------------------------------------------------------

    @staticmethod
    def present(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
        """The object as served at rt's version (CRD conversion strategy None)."""
        if obj.get("apiVersion") == rt.api_version:
            return obj
        out = dict(obj)
        out["apiVersion"] = rt.api_version
        return out

    # ---- namespace checks -------------------------------------------------------------

    def _check_namespace_for_create(self, rt: ResourceType, namespace: str, name: str) -> None:
        ns = self.store.get(NAMESPACE_TYPE.key, "", namespace)
        if ns is None:
            raise statuses.namespace_not_found(namespace)
        if (ns.get("status") or {}).get("phase") == "Terminating" or _meta(ns).get(
            "deletionTimestamp"
        ):
            raise statuses.forbidden(
                rt,
                name,
                f"unable to create new content in namespace {namespace} because it is being "
                "terminated",
                [
                    {
                        "reason": "NamespaceTerminating",
                        "message": f"namespace {namespace} is being terminated",
                        "field": "metadata.namespace",
                    }
                ],
            )

    @staticmethod
    def _reconcile_namespace(rt: ResourceType, url_ns: str | None, obj: dict[str, Any]) -> None:
        meta = _meta(obj)
        if rt.namespaced:
            body_ns = meta.get("namespace")
            if body_ns and url_ns and body_ns != url_ns:
                raise statuses.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            if url_ns:
                meta["namespace"] = url_ns
        else:
            meta.pop("namespace", None)

    def _check_kind(self, rt: ResourceType, obj: dict[str, Any]) -> None:
        kind = obj.get("kind")
        api_version = obj.get("apiVersion")
        if kind and kind != rt.kind:
            raise statuses.bad_request(
                f"the kind in the data ({kind}) does not match the expected kind ({rt.kind})"
            )
        if api_version and api_version != rt.api_version:
            raise statuses.bad_request(
                f"the API version in the data ({api_version}) does not match the expected API "
                f"version ({rt.api_version})"
            )
        obj["kind"] = rt.kind
        obj["apiVersion"] = rt.api_version

    # ---- field validation -------------------------------------------------------------

    @staticmethod
    def _field_validation(
        rt: ResourceType, obj: dict[str, Any], mode: str, duplicates: list[str]
    ) -> list[str]:
        """Drop unknown fields; Strict → 400, Warn (default) → warnings, Ignore → silent."""
        if rt.custom:
            unknown = validation.unknown_fields_custom(rt.schema, obj)
            structural.coerce(rt.schema, obj)  # nulls pruned, defaults applied, as on decode
        else:
            unknown = validation.unknown_fields_builtin(rt, obj)
        problems = [f'unknown field "{p}"' for p in unknown] + [
            f'duplicate field "{d}"' for d in duplicates
        ]
        if not problems or mode == "Ignore":
            return []
        if mode == "Strict":
            raise statuses.bad_request("strict decoding error: " + ", ".join(problems))
        return problems

    # ---- CRD lookup helper ------------------------------------------------------------

    def crd_object(self, name: str) -> dict[str, Any] | None:
        return self.store.get(CRD_TYPE.key, "", name)

    def now(self) -> str:
        return now_rfc3339()
