"""The registry's writes that create or change an object: create (with generated names,
admission and CRD registration), update (optimistic concurrency, generation, status
subresource) and the four patch types, plus creating the default namespaces.
"""

from __future__ import annotations

import json
import secrets
import uuid
from typing import Any

from kubesim import (
    admission,
    decoding,
    deletion,
    patching,
    quantity_fields,
    schemacheck,
    schemas,
    statuses,
    validation,
)
from kubesim.registry.core import (
    _GENERATE_ALPHABET,
    APPLY_PATCH,
    DEFAULT_NAMESPACES,
    JSON_PATCH,
    MERGE_PATCH,
    STRATEGIC_PATCH,
    WriteResult,
    _internal,
    _meta,
    _normalize_meta,
    now_rfc3339,
)
from kubesim.registry.crds import RegistryCrds
from kubesim.resources import (
    CRD_TYPE,
    NAMESPACE_TYPE,
    ResourceType,
)
from kubesim.store import clone


class RegistryWrites(RegistryCrds):
    """Create, update and patch, and the bootstrap namespaces."""

    # ---- bootstrapping ----------------------------------------------------------------

    def ensure_default_namespaces(self) -> None:
        for name in DEFAULT_NAMESPACES:
            if self.store.get(NAMESPACE_TYPE.key, "", name) is None:
                self.create(NAMESPACE_TYPE, None, {"metadata": {"name": name}})

    def _decoded(self, rt: ResourceType, namespace: str | None, body: Any) -> dict[str, Any]:
        """A copy of a create or update body, checked to decode as `rt` in `namespace`."""
        if not isinstance(body, dict):
            raise statuses.bad_request("the body of the request was not a JSON object")
        obj: dict[str, Any] = clone(body)
        self._check_kind(rt, obj)
        decoding.check_create(rt, obj)
        self._reconcile_namespace(rt, namespace, obj)
        return obj

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
        obj = self._decoded(rt, namespace, body)
        warnings = self._field_validation(rt, obj, field_validation, duplicates or [])
        quantity_fields.canonicalize(rt, obj)
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
        causes = validation.validate_object(rt, obj) + quantity_fields.validate(rt, obj)
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
        obj = self._decoded(rt, namespace, body)
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
        quantity_fields.canonicalize(rt, new)
        causes = validation.validate_update(rt, new, existing)
        causes += [c for c in validation.validate_object(rt, new) if subresource == ""]
        causes += quantity_fields.validate(rt, new)
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
