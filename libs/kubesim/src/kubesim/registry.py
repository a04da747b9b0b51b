"""REST semantics of the generic registry: get, list, create, update, patch, delete, watch start.

This is the part of kube-apiserver between the HTTP handler and etcd (registry Store,
strategies, admission). It raises :class:`ApiError` and returns plain dicts; no aiohttp.
"""

from __future__ import annotations

import base64
import copy
import json
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubesim import (
    admission,
    decoding,
    deletion,
    patching,
    schemacheck,
    schemas,
    statuses,
    structural,
    validation,
)
from kubesim.resources import (
    CRD_TYPE,
    NAMESPACE_TYPE,
    POD_TYPE,
    GcPolicy,
    ResourceRegistry,
    ResourceType,
    crd_resource_types,
)
from kubesim.selectors import SelectorError, build_matcher
from kubesim.statuses import ApiError
from kubesim.store import Matcher, Store, TooOldError, Watcher, WatchEvent, clone

IMMORTAL_NAMESPACES = ("default", "kube-system", "kube-public")
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"

__all__ = ["Matcher", "Registry", "WriteResult"]


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


class Registry:
    """Generic registry over the store, with per-type strategies."""

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

    # ---- bootstrapping ----------------------------------------------------------------

    def ensure_default_namespaces(self) -> None:
        for name in DEFAULT_NAMESPACES:
            if self.store.get(NAMESPACE_TYPE.key, "", name) is None:
                self.create(NAMESPACE_TYPE, None, {"metadata": {"name": name}})

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

    # ---- reads ------------------------------------------------------------------------

    def get(self, rt: ResourceType, namespace: str | None, name: str) -> dict[str, Any]:
        obj = self.store.get(rt.key, namespace or "", name)
        if obj is None:
            raise statuses.not_found(rt, name)
        return self.present(rt, obj)

    def matcher(self, rt: ResourceType, label_selector: str, field_selector: str) -> Matcher | None:
        try:
            return build_matcher(rt, label_selector, field_selector)
        except SelectorError as exc:
            raise statuses.bad_request(str(exc)) from exc

    def list_objects(
        self,
        rt: ResourceType,
        namespace: str | None,
        *,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        continue_token: str = "",
        resource_version: str = "",
        resource_version_match: str = "",
    ) -> dict[str, Any]:
        match = self.matcher(rt, label_selector, field_selector)
        start_key = ""
        if continue_token:
            try:
                token = json.loads(
                    base64.urlsafe_b64decode(continue_token + "=" * (-len(continue_token) % 4))
                )
                rev = int(token["rv"])
                start_key = str(token["start"])
            except (ValueError, KeyError, TypeError) as exc:
                raise statuses.bad_request(f"continue key is not valid: {exc}") from exc
            if resource_version not in ("", "0") and continue_token:
                raise statuses.bad_request(
                    "specifying resource version is not allowed when using continue"
                )
        else:
            rev = self.store.rev
            exact = resource_version_match == "Exact" or (
                limit > 0
                and resource_version not in ("", "0")
                and resource_version_match != "NotOlderThan"
            )
            if resource_version_match and resource_version_match not in ("Exact", "NotOlderThan"):
                raise statuses.bad_request(
                    f"resourceVersionMatch: Unsupported value: {resource_version_match!r}"
                )
            if resource_version_match and not resource_version:
                raise ApiError(
                    422,
                    "Invalid",
                    "resourceVersionMatch is forbidden unless resourceVersion is provided",
                )
            if resource_version not in ("", "0"):
                try:
                    requested = int(resource_version)
                except ValueError as exc:
                    raise statuses.bad_request(
                        f"invalid resource version: {resource_version}"
                    ) from exc
                if requested > self.store.rev:
                    raise ApiError(
                        504,
                        "Timeout",
                        f"Too large resource version: {requested}, current: {self.store.rev}",
                        {
                            "causes": [
                                {
                                    "reason": "ResourceVersionTooLarge",
                                    "message": "Too large resource version",
                                }
                            ],
                            "retryAfterSeconds": 1,
                        },
                    )
                if exact:
                    rev = requested
        try:
            state = self.store.snapshot(rt.key, rev)
        except TooOldError as exc:
            if continue_token:
                raise statuses.expired(
                    "The provided continue parameter is too old to display a consistent list "
                    "result. "
                    "You can start a new list without the continue parameter, or use the continue "
                    "token in this response to retrieve the remainder of the results. "
                    "Continuing with "
                    "the provided token results in an inconsistent list - objects that were "
                    "created, "
                    "modified, or deleted between the time the first chunk was returned and "
                    "now may "
                    "show up in the list."
                ) from exc
            raise statuses.too_old_resource_version(exc.requested, exc.oldest) from exc
        keys = sorted(k for k in state if namespace is None or k[0] == namespace)
        if start_key:
            keys = [k for k in keys if f"{k[0]}/{k[1]}" >= start_key]
        items: list[dict[str, Any]] = []
        out_meta: dict[str, Any] = {"resourceVersion": str(rev)}
        present = self.present
        for i, k in enumerate(keys):
            obj = state[k]
            if match is not None and not match(obj):
                continue
            if limit and len(items) >= limit:
                next_key = f"{k[0]}/{k[1]}"
                token = {"v": "meta.k8s.io/v1", "rv": rev, "start": next_key}
                out_meta["continue"] = (
                    base64.urlsafe_b64encode(json.dumps(token).encode()).decode().rstrip("=")
                )
                if match is None:
                    out_meta["remainingItemCount"] = len(keys) - i
                break
            if rt.custom:
                items.append(present(rt, obj))
            else:
                # Built-in list items carry no kind/apiVersion (the real encoder drops them).
                items.append({k: v for k, v in obj.items() if k != "kind" and k != "apiVersion"})
        return {
            "kind": rt.list_kind,
            "apiVersion": rt.api_version,
            "metadata": out_meta,
            "items": items,
        }

    # ---- watch ------------------------------------------------------------------------

    def start_watch(
        self,
        rt: ResourceType,
        namespace: str | None,
        match: Matcher | None,
        resource_version: str,
        *,
        send_initial_events: bool | None = None,
    ) -> tuple[list[WatchEvent], Watcher]:
        """Initial events and a registered watcher, atomically (no await in between)."""
        watcher = Watcher(rt.key, namespace, match, self.store.watch_queue_limit)
        initial: list[WatchEvent] = []
        if resource_version in ("", "0") or send_initial_events:
            for obj in sorted(
                self.store.items(rt.key, namespace),
                key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]),
            ):
                if match is None or match(obj):
                    initial.append(
                        WatchEvent("ADDED", obj, int(obj["metadata"]["resourceVersion"]))
                    )
        else:
            try:
                requested = int(resource_version)
            except ValueError as exc:
                raise statuses.bad_request(f"invalid resource version: {resource_version}") from exc
            watcher.min_rev = requested
            try:
                for change in self.store.changes_since(requested):
                    if change.resource == rt.key:
                        watcher.offer(change)
            except TooOldError as exc:
                raise statuses.too_old_resource_version(exc.requested, exc.oldest) from exc
        self.store.add_watcher(watcher)
        return initial, watcher

    # ---- create -----------------------------------------------------------------------

    def create(
        self,
        rt: ResourceType,
        namespace: str | None,
        body: Any,
        *,
        field_validation: str = "Warn",
        duplicates: list[str] | None = None,
        dry_run: bool = False,
    ) -> WriteResult:
        if not isinstance(body, dict):
            raise statuses.bad_request("the body of the request was not a JSON object")
        obj = clone(body)
        self._check_kind(rt, obj)
        decoding.check_create(rt, obj)
        meta = _meta(obj)
        self._reconcile_namespace(rt, namespace, obj)
        warnings = self._field_validation(rt, obj, field_validation, duplicates or [])
        meta = _meta(obj)
        if meta.get("resourceVersion"):
            raise _internal("resourceVersion should not be set on objects to be created")
        name = str(meta.get("name") or "")
        generate = str(meta.get("generateName") or "")
        if not name and generate:
            for _ in range(8):
                candidate = generate + "".join(secrets.choice(_GENERATE_ALPHABET) for _ in range(5))
                if self.store.get(rt.key, meta.get("namespace") or "", candidate) is None:
                    name = candidate
                    break
            else:
                name = candidate
            meta["name"] = name
        causes = validation.validate_name(rt, name)
        if causes:
            raise statuses.invalid(rt, name, causes)
        if rt.namespaced:
            ns = meta.get("namespace") or ""
            if not ns:
                raise statuses.bad_request("the server could not find the requested resource")
            self._check_namespace_for_create(rt, ns, name)
        existing = self.store.get(rt.key, meta.get("namespace") or "", name)
        # Server-set metadata (BeforeCreate).
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        for key in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            meta.pop(key, None)
        if rt.generation != "none":
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        admission.prepare_create(rt, obj, toleration_seconds=self.default_toleration_seconds)
        if rt is CRD_TYPE or (rt.group, rt.plural) == CRD_TYPE.key:
            self._prepare_crd(obj)
        causes = validation.validate_object(rt, obj)
        if rt.custom:
            causes += schemacheck.validate_custom(rt.schema, obj)
        if causes:
            raise statuses.invalid(rt, name, causes)
        _normalize_meta(obj)
        if existing is not None:
            raise statuses.already_exists(
                rt, name, deleting=bool(_meta(existing).get("deletionTimestamp"))
            )
        if dry_run:
            return WriteResult(obj, 201, warnings)
        stored = self.store.put(rt.key, obj)
        if rt.key == CRD_TYPE.key:
            self._sync_crd(stored)
        return WriteResult(self.present(rt, stored), 201, warnings)

    def _prepare_crd(self, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        names = spec.get("names") or {}
        expected = f"{names.get('plural', '')}.{spec.get('group', '')}"
        name = _meta(obj).get("name")
        if name != expected:
            raise statuses.invalid(
                CRD_TYPE,
                str(name),
                [
                    statuses.invalid_value(
                        "metadata.name", name, 'must be spec.names.plural+"."+spec.group'
                    )
                ],
            )
        names.setdefault("singular", str(names.get("kind", "")).lower())
        names.setdefault("listKind", f"{names.get('kind', '')}List")
        now = now_rfc3339()
        accepted = dict(names)
        obj["status"] = {
            "acceptedNames": accepted,
            "conditions": [
                {
                    "type": "NamesAccepted",
                    "status": "True",
                    "reason": "NoConflicts",
                    "message": "no conflicts found",
                    "lastTransitionTime": now,
                },
                {
                    "type": "Established",
                    "status": "True",
                    "reason": "InitialNamesAccepted",
                    "message": "the initial names have been accepted",
                    "lastTransitionTime": now,
                },
            ],
            "storedVersions": [
                v.get("name") for v in spec.get("versions") or [] if v.get("storage")
            ],
        }

    def _sync_crd(self, crd: dict[str, Any]) -> None:
        types, storage = crd_resource_types(crd)
        self.resources.set_crd_types(_meta(crd)["name"], types, storage)
        for hook in self.on_crd_change:
            hook()

    def _drop_crd(self, crd: dict[str, Any]) -> None:
        spec = crd.get("spec") or {}
        key = (str(spec.get("group", "")), str((spec.get("names") or {}).get("plural", "")))
        for obj in list(self.store.items(key)):
            m = obj["metadata"]
            self.store.delete(key, m.get("namespace") or "", m["name"])
        self.store.drop_resource(key)
        self.resources.set_crd_types(_meta(crd)["name"], [], "")
        for hook in self.on_crd_change:
            hook()

    # ---- update -----------------------------------------------------------------------

    def update(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        subresource: str = "",
        field_validation: str = "Warn",
        duplicates: list[str] | None = None,
        dry_run: bool = False,
    ) -> WriteResult:
        if not isinstance(body, dict):
            raise statuses.bad_request("the body of the request was not a JSON object")
        obj = clone(body)
        self._check_kind(rt, obj)
        decoding.check_create(rt, obj)
        self._reconcile_namespace(rt, namespace, obj)
        meta = _meta(obj)
        body_name = meta.get("name")
        if body_name and body_name != name:
            raise statuses.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL ({name})"
            )
        meta["name"] = name
        existing = self.store.get(rt.key, namespace or "", name)
        if existing is None:
            if rt.create_on_update and not subresource:
                return self.create(
                    rt, namespace, obj, field_validation=field_validation, dry_run=dry_run
                )
            raise statuses.not_found(rt, name)
        warnings = self._field_validation(rt, obj, field_validation, duplicates or [])
        rv = str(meta.get("resourceVersion") or "")
        if not rv:
            if not rt.unconditional_update:
                raise statuses.invalid(
                    rt,
                    name,
                    [
                        statuses.invalid_value(
                            "metadata.resourceVersion", "0x0", "must be specified for an update"
                        )
                    ],
                )
        elif rv != _meta(existing)["resourceVersion"]:
            raise statuses.modified_conflict(rt, name)
        return self._apply_update(
            rt, existing, obj, subresource=subresource, warnings=warnings, dry_run=dry_run
        )

    def _apply_update(
        self,
        rt: ResourceType,
        existing: dict[str, Any],
        obj: dict[str, Any],
        *,
        subresource: str,
        warnings: list[str],
        dry_run: bool = False,
    ) -> WriteResult:
        """PrepareForUpdate + validation + ShouldDeleteDuringUpdate + commit."""
        old_meta = _meta(existing)
        name = old_meta["name"]
        if subresource == "status":
            new = clone(existing)
            if "status" in obj:
                new["status"] = obj["status"]
            else:
                new.pop("status", None)
        elif subresource == "finalize":
            new = clone(existing)
            new.setdefault("spec", {})["finalizers"] = list(
                (obj.get("spec") or {}).get("finalizers") or []
            )
        else:
            new = obj
            if rt.has_status:
                if "status" in existing:
                    new["status"] = clone(existing["status"])
                else:
                    new.pop("status", None)
            meta = _meta(new)
            for key in (
                "uid",
                "creationTimestamp",
                "deletionTimestamp",
                "deletionGracePeriodSeconds",
                "generateName",
            ):
                if key in old_meta:
                    meta[key] = old_meta[key]
                else:
                    meta.pop(key, None)
            meta.pop("selfLink", None)
            if rt.plural == "namespaces" and not rt.group:
                new["spec"] = clone(existing.get("spec") or {})
            if rt.generation != "none":
                meta["generation"] = self._next_generation(rt, new, existing)
            elif "generation" in old_meta:
                meta["generation"] = old_meta["generation"]
            else:
                meta.pop("generation", None)
        new["kind"] = existing.get("kind", rt.kind)
        new["apiVersion"] = existing.get("apiVersion", rt.api_version)
        if rt.key == ("", "secrets"):
            admission.fold_secret_string_data(new)
        _meta(new)["resourceVersion"] = old_meta["resourceVersion"]
        _normalize_meta(new)
        causes = validation.validate_update(rt, new, existing)
        causes += [c for c in validation.validate_object(rt, new) if subresource == ""]
        if rt.custom:  # main and status endpoints both validate the whole object, ratcheting
            causes += schemacheck.validate_custom(rt.schema, new, existing)
        if causes:
            raise statuses.invalid(rt, name, causes)
        if self._equivalent(new, existing):
            return WriteResult(self.present(rt, existing), 200, warnings)
        if dry_run:
            return WriteResult(new, 200, warnings)
        ns = old_meta.get("namespace") or ""
        is_namespace = rt.plural == "namespaces" and not rt.group
        if deletion.should_delete_during_update(new, existing, namespace=is_namespace):
            stored = self.store.put(rt.key, new)
            self.store.delete(rt.key, ns, name)
            self._after_remove(rt, stored)
            return WriteResult(self.present(rt, stored), 200, warnings)
        stored = self.store.put(rt.key, new)
        if rt.key == CRD_TYPE.key:
            self._sync_crd(stored)
        return WriteResult(self.present(rt, stored), 200, warnings)

    @staticmethod
    def _equivalent(new: dict[str, Any], old: dict[str, Any]) -> bool:
        return new == old

    @staticmethod
    def _next_generation(rt: ResourceType, new: dict[str, Any], old: dict[str, Any]) -> int:
        gen = int(_meta(old).get("generation") or 1)
        if rt.generation == "spec":
            changed = new.get("spec") != old.get("spec")
        else:
            skip = {"metadata", "kind", "apiVersion"}
            if rt.has_status:
                skip.add("status")
            keys = (set(new) | set(old)) - skip
            changed = any(new.get(k) != old.get(k) for k in keys)
        return gen + 1 if changed else gen

    # ---- patch ------------------------------------------------------------------------

    def patch(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        body: bytes,
        content_type: str,
        *,
        subresource: str = "",
        field_validation: str = "Warn",
        dry_run: bool = False,
    ) -> WriteResult:
        ctype = content_type.split(";")[0].strip().lower()
        if ctype not in (JSON_PATCH, MERGE_PATCH, STRATEGIC_PATCH, APPLY_PATCH):
            raise statuses.unsupported_media_type(
                f"the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE_PATCH}, {APPLY_PATCH}"
                + ("" if rt.custom else f", {STRATEGIC_PATCH}")
            )
        if ctype == STRATEGIC_PATCH and rt.custom:
            raise statuses.unsupported_media_type()
        if ctype == APPLY_PATCH:
            raise statuses.unsupported_media_type(
                "the body of the request was in an unknown format - accepted media types include: "
                f"{JSON_PATCH}, {MERGE_PATCH}"
                + ("" if rt.custom else f", {STRATEGIC_PATCH}")
                + " (server-side apply is not supported by kubesim)"
            )
        try:
            patch_doc = json.loads(body) if body else None
        except ValueError as exc:
            raise statuses.bad_request(f"error decoding patch: {exc}") from exc
        existing = self.store.get(rt.key, namespace or "", name)
        if existing is None:
            raise statuses.not_found(rt, name)
        current = self.present(rt, existing)
        try:
            if ctype == JSON_PATCH:
                patched = patching.json_patch(current, patch_doc)
            elif ctype == MERGE_PATCH:
                if not isinstance(patch_doc, dict):
                    raise patching.PatchError(
                        400,
                        "json: cannot unmarshal array into Go value of type "
                        "map[string]interface {}",
                    )
                patched = patching.merge_patch(current, patch_doc)
            else:
                patched = patching.strategic_merge_patch(
                    current, patch_doc, schemas.definition(rt.definition)
                )
        except patching.PatchError as exc:
            if exc.code == 422:
                raise statuses.unprocessable(exc.message) from exc
            raise statuses.bad_request(exc.message) from exc
        if not isinstance(patched, dict):
            raise statuses.bad_request("the patched object is not a JSON object")
        self._check_kind(rt, patched)
        if not rt.custom:
            decoding.check_patch(
                rt,
                patched,
                lambda: (
                    decoding.go_map_repr(patch_doc)
                    if ctype == STRATEGIC_PATCH
                    else json.dumps(patched, separators=(",", ":"))
                ),
            )
        meta = _meta(patched)
        if meta.get("name", name) != name:
            raise statuses.bad_request(
                f"the name of the object ({meta.get('name')}) does not match the name on the "
                f"URL ({name})"
            )
        if rt.namespaced and (meta.get("namespace") or "") != (namespace or ""):
            raise statuses.bad_request(
                "the namespace of the provided object does not match the namespace sent on the "
                "request"
            )
        meta["name"] = name
        warnings = self._field_validation(rt, patched, field_validation, [])
        rv = str(meta.get("resourceVersion") or "")
        if rv and rv != _meta(existing)["resourceVersion"]:
            raise statuses.modified_conflict(rt, name)
        return self._apply_update(
            rt, existing, patched, subresource=subresource, warnings=warnings, dry_run=dry_run
        )

    # ---- binding ----------------------------------------------------------------------

    def bind(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise statuses.bad_request("the body of the request was not a JSON object")
        target = body.get("target") or {}
        node = target.get("name") or ""
        pod = self.store.get(POD_TYPE.key, namespace, name)
        binding_rt = POD_TYPE
        if pod is None:
            raise statuses.not_found(POD_TYPE, name)
        if not node:
            raise statuses.invalid(binding_rt, name, [statuses.required("target.name")])
        if _meta(pod).get("deletionTimestamp"):
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is being '
                "deleted, cannot be assigned to a host",
                {"name": name, "kind": "pods/binding"},
            )
        current = (pod.get("spec") or {}).get("nodeName")
        if current:
            raise ApiError(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on pods/binding "{name}": pod {name} is '
                f'already assigned to node "{current}"',
                {"name": name, "kind": "pods/binding"},
            )
        new = clone(pod)
        new["spec"]["nodeName"] = node
        status = new.setdefault("status", {})
        conditions = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conditions.append(
            {
                "type": "PodScheduled",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": now_rfc3339(),
            }
        )
        status["conditions"] = conditions
        self.store.put(POD_TYPE.key, new)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    # ---- eviction ---------------------------------------------------------------------

    def evict(self, namespace: str, name: str, body: Any) -> dict[str, Any]:
        """pods/eviction without PodDisruptionBudgets: a delete with the Eviction's options."""
        if not isinstance(body, dict):
            raise statuses.bad_request("the body of the request was not a JSON object")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != name:
            raise statuses.bad_request(
                f"name in URL does not match name in Eviction object: {name} vs {body_name}"
            )
        raw = body.get("deleteOptions") or {}
        pre = raw.get("preconditions") or {}
        grace = raw.get("gracePeriodSeconds")
        opts = deletion.DeleteOptions(
            grace_period_seconds=int(grace) if grace is not None else None,
            propagation_policy=raw.get("propagationPolicy"),
            orphan_dependents=raw.get("orphanDependents"),
            precondition_uid=pre.get("uid"),
            precondition_rv=pre.get("resourceVersion"),
            dry_run=bool(raw.get("dryRun")),
        )
        self.delete(POD_TYPE, namespace, name, opts)
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Success",
            "code": 201,
        }

    # ---- delete -----------------------------------------------------------------------

    def delete(
        self,
        rt: ResourceType,
        namespace: str | None,
        name: str,
        opts: deletion.DeleteOptions,
    ) -> WriteResult:
        existing = self.store.get(rt.key, namespace or "", name)
        if existing is None:
            raise statuses.not_found(rt, name)
        meta = _meta(existing)
        if rt.key == NAMESPACE_TYPE.key and name in IMMORTAL_NAMESPACES:
            raise statuses.forbidden(rt, name, "this namespace may not be deleted")
        if opts.orphan_dependents is not None and opts.propagation_policy:
            raise ApiError(
                422,
                "Invalid",
                'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Invalid value: '
                f'"{opts.propagation_policy}": orphanDependents and deletionPropagation cannot '
                "be both set",
            )
        if opts.propagation_policy not in (None, "Orphan", "Background", "Foreground"):
            raise ApiError(
                422,
                "Invalid",
                'DeleteOptions.meta.k8s.io "" is invalid: propagationPolicy: Unsupported '
                f'value: "{opts.propagation_policy}": '
                'supported values: "Foreground", "Background", "Orphan", "nil"',
            )
        # rest.BeforeDelete checks preconditions first, naming the Kind (not the plural).
        if opts.precondition_uid is not None and opts.precondition_uid != meta.get("uid"):
            raise statuses.kind_conflict(
                rt,
                name,
                f"the UID in the precondition ({opts.precondition_uid}) does not match the UID in "
                f"record ({meta.get('uid')}). The object might have been deleted and then "
                "recreated",
            )
        if opts.precondition_rv is not None and opts.precondition_rv != meta.get("resourceVersion"):
            raise statuses.kind_conflict(
                rt,
                name,
                f"the ResourceVersion in the precondition ({opts.precondition_rv}) does not "
                "match the "
                f"ResourceVersion in record ({meta.get('resourceVersion')}). The object might "
                "have been modified",
            )
        if rt.key == NAMESPACE_TYPE.key:
            return self._delete_namespace(rt, existing, opts)
        plan = deletion.plan_delete(
            existing,
            opts,
            graceful_type=rt.graceful_delete,
            gc_policy=self._gc_policy(rt),
        )
        explicit_no_orphan = opts.orphan_dependents is False
        if plan.pending:
            if rt.return_deleted_object:
                return WriteResult(self.present(rt, existing), 200)
            return WriteResult(statuses.success(rt, name, str(meta.get("uid", ""))), 200)
        if opts.dry_run:
            result = plan.update or existing
            return WriteResult(self.present(rt, result), 200)
        last = existing
        if plan.update is not None:
            last = self.store.put(rt.key, plan.update)
        if not plan.remove:
            return WriteResult(self.present(rt, last), 202 if explicit_no_orphan else 200)
        self.store.delete(rt.key, namespace or "", name)
        self._after_remove(rt, last)
        if rt.return_deleted_object:
            return WriteResult(self.present(rt, last), 200)
        return WriteResult(statuses.success(rt, name, str(meta.get("uid", ""))), 200)

    @staticmethod
    def _gc_policy(rt: ResourceType) -> GcPolicy:
        return rt.default_gc if rt.version == "v1" or rt.custom else "delete"

    def _delete_namespace(
        self, rt: ResourceType, existing: dict[str, Any], opts: deletion.DeleteOptions
    ) -> WriteResult:
        """Namespace REST Delete: Terminating until spec.finalizers is emptied via /finalize."""
        meta = _meta(existing)
        if meta.get("deletionTimestamp") and (existing.get("spec") or {}).get("finalizers"):
            return WriteResult(self.present(rt, existing), 200)
        new = clone(existing)
        nmeta = _meta(new)
        if not nmeta.get("deletionTimestamp"):
            nmeta["deletionTimestamp"] = now_rfc3339()
            nmeta["deletionGracePeriodSeconds"] = 0
        new.setdefault("status", {})["phase"] = "Terminating"
        needs, finalizers = deletion.gc_finalizers(
            list(nmeta.get("finalizers") or []), opts, "delete"
        )
        if needs:
            nmeta["finalizers"] = finalizers
        if (new.get("spec") or {}).get("finalizers") or nmeta.get("finalizers"):
            if new != existing:
                new = self.store.put(rt.key, new)
            return WriteResult(self.present(rt, new), 200)
        self.store.delete(rt.key, "", meta["name"])
        return WriteResult(self.present(rt, existing), 200)

    def _after_remove(self, rt: ResourceType, last: dict[str, Any]) -> None:
        if rt.key == CRD_TYPE.key:
            self._drop_crd(last)

    def delete_collection(
        self,
        rt: ResourceType,
        namespace: str | None,
        opts: deletion.DeleteOptions,
        *,
        label_selector: str = "",
        field_selector: str = "",
    ) -> dict[str, Any]:
        listing = self.list_objects(
            rt, namespace, label_selector=label_selector, field_selector=field_selector
        )
        items = []
        for obj in listing["items"]:
            m = obj["metadata"]
            try:
                result = self.delete(rt, m.get("namespace"), m["name"], copy.copy(opts))
            except ApiError as exc:
                if exc.code == 404:
                    continue
                raise
            if result.obj.get("kind") != "Status":
                items.append(result.obj)
        listing["items"] = items
        listing["metadata"] = {"resourceVersion": str(self.store.rev)}
        return listing

    # ---- CRD lookup helper ------------------------------------------------------------

    def crd_object(self, name: str) -> dict[str, Any] | None:
        return self.store.get(CRD_TYPE.key, "", name)

    def now(self) -> str:
        return now_rfc3339()
