"""Object validation: names, the few required fields clients trip over, immutability, and
server-side field validation (unknown fields) against the real schemas or a CRD schema.

Pure functions returning cause lists (422) or unknown-field paths (Strict/Warn).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from kubesim import schemas
from kubesim.resources import ResourceType
from kubesim.statuses import (
    Cause,
    forbidden_field,
    invalid_value,
    not_supported,
    required,
)

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)

SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)

# Resources whose names must be DNS-1123 labels rather than subdomains.
_LABEL_NAMED = {("", "namespaces"), ("", "services")}
# Names checked only for path safety (RBAC names may contain ':' etc.).
_PATH_SEGMENT_NAMED = {
    ("rbac.authorization.k8s.io", "roles"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("rbac.authorization.k8s.io", "clusterroles"),
    ("rbac.authorization.k8s.io", "clusterrolebindings"),
}


def validate_name(rt: ResourceType, name: str, field: str = "metadata.name") -> list[Cause]:
    if not name:
        return [required(field, "name or generateName is required")]
    key = (rt.group, rt.plural)
    if key in _PATH_SEGMENT_NAMED:
        if name in (".", "..") or "/" in name or "%" in name:
            return [invalid_value(field, name, 'may not contain "/"')]
        return []
    if key in _LABEL_NAMED:
        if len(name) > 63:
            return [invalid_value(field, name, "must be no more than 63 characters")]
        if not _DNS1123_LABEL.match(name):
            return [invalid_value(field, name, LABEL_MSG)]
        return []
    if len(name) > 253:
        return [invalid_value(field, name, "must be no more than 253 characters")]
    if not _DNS1123_SUBDOMAIN.match(name):
        return [invalid_value(field, name, SUBDOMAIN_MSG)]
    return []


def _validate_containers(spec: dict[str, Any], prefix: str) -> list[Cause]:
    causes: list[Cause] = []
    containers = spec.get("containers")
    if not containers:
        causes.append(required(f"{prefix}.containers"))
        return causes
    seen: set[str] = set()
    for i, c in enumerate(containers):
        path = f"{prefix}.containers[{i}]"
        if not isinstance(c, dict):
            causes.append(invalid_value(path, c, "must be an object"))
            continue
        name = c.get("name") or ""
        if not name:
            causes.append(required(f"{path}.name"))
        elif not _DNS1123_LABEL.match(name) or len(name) > 63:
            causes.append(invalid_value(f"{path}.name", name, LABEL_MSG))
        elif name in seen:
            causes.append(
                {
                    "reason": "FieldValueDuplicate",
                    "field": f"{path}.name",
                    "message": f'Duplicate value: "{name}"',
                }
            )
        seen.add(name)
        if not c.get("image"):
            causes.append(required(f"{path}.image"))
    return causes


_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
QUALIFIED_NAME_MSG = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end "
    "with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for "
    "validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)
LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or "
    "'my_value',  or '12345', regex used for validation is "
    "'(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"
)


def _qualified_name_ok(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if "/" in key and (not prefix or len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        return False
    return bool(name) and len(name) <= 63 and bool(_QUALIFIED_NAME.match(name))


def validate_metadata(meta: dict[str, Any]) -> list[Cause]:
    """ValidateObjectMeta: label/annotation keys, label values, ownerReferences."""
    causes: list[Cause] = []
    labels = meta.get("labels") or {}
    if isinstance(labels, dict):
        for key, value in labels.items():
            if not _qualified_name_ok(str(key)):
                causes.append(invalid_value("metadata.labels", key, QUALIFIED_NAME_MSG))
            if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
                causes.append(invalid_value("metadata.labels", value, LABEL_VALUE_MSG))
    annotations = meta.get("annotations") or {}
    if isinstance(annotations, dict):
        for key in annotations:
            if not _qualified_name_ok(str(key)):
                causes.append(invalid_value("metadata.annotations", key, QUALIFIED_NAME_MSG))
    for ref in meta.get("ownerReferences") or []:
        if not isinstance(ref, dict):
            continue
        for key in ("apiVersion", "kind", "name"):
            if not ref.get(key):
                causes.append(
                    invalid_value(f"metadata.ownerReferences.{key}", "", f"{key} must not be empty")
                )
        if not ref.get("uid"):
            causes.append(
                invalid_value("metadata.ownerReferences.uid", "", "uid must not be empty")
            )
    return causes


def validate_object(rt: ResourceType, obj: dict[str, Any]) -> list[Cause]:
    """ValidateCreate/ValidateUpdate, trimmed to what matters to our clients."""
    causes: list[Cause] = validate_metadata(obj.get("metadata") or {})
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    assert isinstance(spec, dict)
    if rt.group == "" and rt.plural == "pods":
        causes += _validate_containers(spec, "spec")
        rp = spec.get("restartPolicy")
        if rp not in ("Always", "OnFailure", "Never"):
            causes.append(not_supported("spec.restartPolicy", rp, ["Always", "OnFailure", "Never"]))
    elif rt.group == "batch" and rt.plural == "jobs":
        tspec = ((spec.get("template") or {}).get("spec")) or {}
        causes += _validate_containers(tspec, "spec.template.spec")
        rp = tspec.get("restartPolicy")
        if rp not in ("OnFailure", "Never"):
            causes.append(
                not_supported("spec.template.spec.restartPolicy", rp, ["OnFailure", "Never"])
            )
        for key in ("parallelism", "completions", "backoffLimit"):
            v = spec.get(key)
            if isinstance(v, int) and v < 0:
                causes.append(invalid_value(f"spec.{key}", v, "must be greater than or equal to 0"))
    return causes


_POD_MUTABLE_MSG = (
    "pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` "
    "(only additions to existing tolerations),`spec.terminationGracePeriodSeconds` "
    "(allow it to be set to 1 if it was previously negative)"
)


def _pod_spec_mask(spec: dict[str, Any]) -> dict[str, Any]:
    masked = dict(spec)
    for key in ("containers", "initContainers"):
        masked[key] = [
            {k: v for k, v in c.items() if k != "image"}
            for c in spec.get(key) or []
            if isinstance(c, dict)
        ]
    masked.pop("activeDeadlineSeconds", None)
    masked.pop("tolerations", None)
    masked.pop("schedulingGates", None)
    masked.pop("terminationGracePeriodSeconds", None)
    return masked


def validate_update(rt: ResourceType, new: dict[str, Any], old: dict[str, Any]) -> list[Cause]:
    causes: list[Cause] = []
    new_meta = new.get("metadata") or {}
    old_meta = old.get("metadata") or {}
    if old_meta.get("deletionTimestamp"):
        added = set(new_meta.get("finalizers") or []) - set(old_meta.get("finalizers") or [])
        if added:
            listed = ", ".join(f'"{f}"' for f in sorted(added))
            causes.append(
                forbidden_field(
                    "metadata.finalizers",
                    "no new finalizers can be added if the object is being deleted, found new "
                    f"finalizers []string{{{listed}}}",
                )
            )
    if rt.group == "" and rt.plural == "pods":
        new_spec = new.get("spec") or {}
        old_spec = old.get("spec") or {}
        node_changed = bool(old_spec.get("nodeName")) and new_spec.get("nodeName") != old_spec.get(
            "nodeName"
        )
        if node_changed or _pod_spec_mask(new_spec) != _pod_spec_mask(old_spec):
            causes.append(forbidden_field("spec", _POD_MUTABLE_MSG))
        else:
            old_tol = old_spec.get("tolerations") or []
            new_tol = new_spec.get("tolerations") or []
            if any(t not in new_tol for t in old_tol):
                causes.append(
                    forbidden_field(
                        "spec.tolerations",
                        "existing toleration can not be modified except its tolerationSeconds",
                    )
                )
            for i, c in enumerate(new_spec.get("containers") or []):
                if isinstance(c, dict) and not c.get("image"):
                    causes.append(required(f"spec.containers[{i}].image"))
    elif (
        rt.group == "batch"
        and rt.plural == "jobs"
        and (new.get("spec") or {}).get("selector") != (old.get("spec") or {}).get("selector")
    ):
        causes.append(
            invalid_value(
                "spec.selector", (new.get("spec") or {}).get("selector"), "field is immutable"
            )
        )
    return causes


# ---- unknown fields (fieldValidation) ----------------------------------------------------


def unknown_fields_builtin(rt: ResourceType, obj: dict[str, Any]) -> list[str]:
    root = schemas.definition(rt.definition)
    if root is None:
        return []
    out: list[str] = []
    _walk_builtin(obj, root, "", out, prune=True)
    return out


_TIME_REF = "io.k8s.apimachinery.pkg.apis.meta.v1.Time"
_MICROTIME_REF = "io.k8s.apimachinery.pkg.apis.meta.v1.MicroTime"


def normalize_time(value: str, *, micro: bool) -> str:
    """Re-serialize like metav1.Time (second precision, Z) / MicroTime (.000000Z)."""
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return value
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    when = when.astimezone(UTC)
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")


def _walk_builtin(
    value: Any, node: schemas.Node | None, path: str, out: list[str], *, prune: bool
) -> None:
    """Prune unknown fields (recording their paths) and normalize Time/MicroTime values."""
    if node is not None and isinstance(value, str):
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref.endswith(_TIME_REF) or ref.endswith(_MICROTIME_REF)):
            return
    node = schemas.resolve(node)
    if node is None:
        return
    if isinstance(value, dict):
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if not isinstance(props, dict):
            if isinstance(extra, dict):
                for k, v in value.items():
                    _walk_builtin(v, extra, f"{path}[{k}]" if path else k, out, prune=prune)
            return
        for key in list(value.keys()):
            child_path = f"{path}.{key}" if path else key
            if key in props:
                child = props[key]
                ref = child.get("$ref") if isinstance(child, dict) else None
                if isinstance(ref, str) and isinstance(value[key], str):
                    if ref.endswith(_TIME_REF):
                        value[key] = normalize_time(value[key], micro=False)
                        continue
                    if ref.endswith(_MICROTIME_REF):
                        value[key] = normalize_time(value[key], micro=True)
                        continue
                _walk_builtin(value[key], child, child_path, out, prune=prune)
            elif isinstance(extra, dict):
                _walk_builtin(value[key], extra, child_path, out, prune=prune)
            else:
                out.append(child_path)
                if prune:
                    del value[key]
    elif isinstance(value, list):
        items = node.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _walk_builtin(item, items, f"{path}[{i}]", out, prune=prune)


_META_KEYS = {"apiVersion", "kind", "metadata"}


def unknown_fields_custom(schema: dict[str, Any] | None, obj: dict[str, Any]) -> list[str]:
    """Structural-schema pruning for a CR; x-kubernetes-preserve-unknown-fields keeps data."""
    if not schema:
        return []
    out: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return out
    props = schema.get("properties") or {}
    for key in list(obj.keys()):
        if key in _META_KEYS:
            continue
        if key in props:
            _walk_custom(obj[key], props[key], key, out)
        else:
            out.append(key)
            del obj[key]
    return out


def _walk_custom(value: Any, node: dict[str, Any], path: str, out: list[str]) -> None:
    if node.get("x-kubernetes-preserve-unknown-fields") or (
        node.get("x-kubernetes-embedded-resource")
        and node.get("x-kubernetes-preserve-unknown-fields")
    ):
        return
    if isinstance(value, dict):
        props = node.get("properties")
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            for k, v in value.items():
                _walk_custom(v, extra, f"{path}[{k}]", out)
            return
        if extra is True:
            return
        if props is None:
            if node.get("type") == "object":
                for key in list(value.keys()):
                    out.append(f"{path}.{key}")
                    del value[key]
            return
        for key in list(value.keys()):
            if key in props:
                _walk_custom(value[key], props[key], f"{path}.{key}", out)
            elif node.get("x-kubernetes-embedded-resource") and key in _META_KEYS:
                continue
            else:
                out.append(f"{path}.{key}")
                del value[key]
    elif isinstance(value, list):
        items = node.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _walk_custom(item, items, f"{path}[{i}]", out)
