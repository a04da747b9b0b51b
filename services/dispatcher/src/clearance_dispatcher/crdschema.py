"""What the served AppWrapper CRD keeps of Clearance's fields (pure).

The API server prunes every field a structural schema does not declare, unless an enclosing
object says ``x-kubernetes-preserve-unknown-fields: true`` (reference kubernetes-semantics §2.13,
"pruning"). Clearance's own CRD (deploy/crd) declares its fields; MCAD v1's upstream CRD does not,
so under it ``status.clearance`` and the teardown-policy fields of ``spec.schedulingSpec.
requeuing`` vanish on write. :func:`dropped` lists which of Clearance's features the schema of
one served version drops, each with what to do instead; the dispatcher logs it once per schema
(:mod:`clearance_dispatcher.schemawatch`) and picks where to keep its bookkeeping from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from clearance_dispatcher.policy_annotations import ANNOTATION_OF_FIELD

FULL_CRD_FIX: Final = "kubectl apply -k deploy/crd installs the CRD that keeps it"


@dataclass(frozen=True, slots=True)
class Dropped:
    """One Clearance feature the served schema prunes."""

    path: str
    """The pruned field (``status.clearance``)."""
    feature: str
    """What Clearance loses with it, in words."""
    instead: str
    """What Clearance does or the user can do instead."""


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def version_schema(crd: Mapping[str, Any], version: str) -> Mapping[str, Any] | None:
    """The ``openAPIV3Schema`` of ``version`` when it is served, else None."""
    for entry in _mapping(crd.get("spec")).get("versions") or []:
        entry = _mapping(entry)
        if entry.get("name") == version and entry.get("served") is not False:
            return _mapping(_mapping(entry.get("schema")).get("openAPIV3Schema"))
    return None


def keeps(schema: Mapping[str, Any], path: Sequence[str]) -> bool:
    """Does a value written at ``path`` (object keys) survive pruning under ``schema``?"""
    node = schema
    for key in path:
        if node.get("x-kubernetes-preserve-unknown-fields") is True:
            return True
        properties = _mapping(node.get("properties"))
        if key in properties:
            node = _mapping(properties[key])
            continue
        extra = node.get("additionalProperties")
        if isinstance(extra, Mapping):
            node = extra
            continue
        return extra is True
    return True


def bookkeeping_kept(schema: Mapping[str, Any]) -> bool:
    """``status.clearance`` with its nested fields survives (not just an empty object)."""
    if not keeps(schema, ("status", "clearance")):
        return False
    node = schema
    for key in ("status", "clearance"):
        if node.get("x-kubernetes-preserve-unknown-fields") is True:
            return True
        node = _mapping(_mapping(node.get("properties")).get(key))
    return node.get("x-kubernetes-preserve-unknown-fields") is True or (
        keeps(node, ("phase",)) and keeps(node, ("tearingDown",))
    )


def dropped(schema: Mapping[str, Any]) -> list[Dropped]:
    """Clearance's features the schema drops, in a stable order."""
    out = []
    if not bookkeeping_kept(schema):
        out.append(
            Dropped(
                "status.clearance",
                "the dispatcher's bookkeeping in status (kubectl get shows no clearance phase)",
                "bookkeeping kept in the annotation clearance.dev/bookkeeping "
                f"(CLEARANCE_BOOKKEEPING=auto or annotations); {FULL_CRD_FIX}",
            )
        )
    requeuing = ("spec", "schedulingSpec", "requeuing")
    for field_name, annotation in ANNOTATION_OF_FIELD.items():
        if not keeps(schema, (*requeuing, field_name)):
            out.append(
                Dropped(
                    f"spec.schedulingSpec.requeuing.{field_name}",
                    f"the per-AppWrapper {field_name}",
                    f"set the annotation {annotation} on the AppWrapper; {FULL_CRD_FIX}",
                )
            )
    return out


def summary(items: Sequence[Dropped]) -> str:
    """One log line: each dropped field, what replaces it, and the fix."""
    parts = "; ".join(f"{d.path} ({d.feature}) -> {d.instead.split('; ')[0]}" for d in items)
    return f"the served AppWrapper CRD prunes {parts}; fix: {FULL_CRD_FIX}"
