"""Creating the generic items of one attempt, idempotently (deleting them: ``deletion``).

* :func:`build_object` (pure) turns a generic template into the object to create: the
  AppWrapper's namespace, the four labels of DESIGN §1 on the object **and on every pod
  template inside it** (so the pods a controller creates carry the attempt too), and an
  ownerReference to the AppWrapper (garbage collection when the AppWrapper is deleted).
* :func:`create_items` is idempotent per (AppWrapper UID, attempt): ``409 AlreadyExists`` for
  an object that carries *this* attempt's label and owner means "done before a crash"; an
  object of another attempt (or someone else's) under that name is :class:`Blocked`, never
  overwritten. Consecutive items of one kind are created at once (one round trip per run);
  if any fails, what this call created is rolled back.
* apiVersion+kind → REST resource is the shared :class:`clearance.discovery.Discovery`; a kind
  the API does not serve is reported (:class:`~clearance.discovery.UnknownKind`), not guessed.
"""

from __future__ import annotations

import asyncio
import copy
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from clearance import labels, testfaults
from clearance.discovery import Discovery, UnknownKind
from clearance.events import ObjectRef
from clearance.kube import Kube, KubeError, Resource
from clearance_dispatcher.appwrapper import AppWrapperSpec, GenericItem
from clearance_dispatcher.deletion import delete_pinned

log = logging.getLogger(__name__)

PERMANENT_CODES: Final = frozenset({400, 403, 404, 405, 415, 422})
"""Creation errors retrying cannot fix (bad object, forbidden, namespace missing)."""


# ------------------------------------------------------------------------------ objects


def owner_reference(aw_api_version: str, spec: AppWrapperSpec) -> dict[str, Any]:
    return {
        "apiVersion": aw_api_version,
        "kind": "AppWrapper",
        "name": spec.name,
        "uid": spec.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _stamp_templates(node: Any, stamp: Mapping[str, str]) -> None:
    """Label every pod template (`template: {metadata, spec}`) nested anywhere in ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "template" and isinstance(value, dict) and "spec" in value:
                meta = value.setdefault("metadata", {})
                if isinstance(meta, dict):
                    meta["labels"] = {**(meta.get("labels") or {}), **stamp}
            _stamp_templates(value, stamp)
    elif isinstance(node, list):
        for value in node:
            _stamp_templates(value, stamp)


def build_object(
    item: GenericItem, spec: AppWrapperSpec, *, attempt: int, aw_api_version: str
) -> dict[str, Any]:
    """The object to create for ``item`` in ``attempt`` (the template is not modified)."""
    obj = copy.deepcopy(item.template)
    meta = obj.setdefault("metadata", {})
    for server_field in ("resourceVersion", "uid", "creationTimestamp", "generation"):
        meta.pop(server_field, None)
    meta["namespace"] = spec.namespace
    stamp = labels.stamp(
        appwrapper=spec.name, namespace=spec.namespace, attempt=attempt, uid=spec.uid
    )
    meta["labels"] = {**(meta.get("labels") or {}), **stamp}
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("uid") != spec.uid]
    owners.append(owner_reference(aw_api_version, spec))
    meta["ownerReferences"] = owners
    _stamp_templates(obj.get("spec"), stamp)
    obj.pop("status", None)
    return obj


# ----------------------------------------------------------------------------- outcomes


@dataclass(frozen=True, slots=True)
class Created:
    refs: tuple[ObjectRef, ...]


@dataclass(frozen=True, slots=True)
class Blocked:
    """An object of another attempt (or not ours) holds a name; wait for it to go."""

    item: GenericItem
    message: str


@dataclass(frozen=True, slots=True)
class PermanentFailure:
    item: GenericItem
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class TransientFailure:
    item: GenericItem
    message: str


CreateOutcome = Created | Blocked | PermanentFailure | TransientFailure


class _Meta(msgspec.Struct):
    name: str = ""
    uid: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    deletionTimestamp: str | None = None  # Kubernetes wire name
    ownerReferences: list[dict[str, Any]] = msgspec.field(default_factory=list)
    finalizers: list[str] = msgspec.field(default_factory=list)
    creationTimestamp: str | None = None


class _Obj(msgspec.Struct):
    metadata: _Meta = msgspec.field(default_factory=_Meta)


_OBJ: Final = msgspec.json.Decoder(_Obj)


def _ref(resource: Resource, namespace: str, meta: _Meta) -> ObjectRef:
    return ObjectRef(
        kind=resource.kind,
        api_version=resource.api_version,
        namespace=namespace if resource.namespaced else None,
        name=meta.name,
        uid=meta.uid,
    )


def ours(
    meta_labels: Mapping[str, str], owners: list[dict[str, Any]], *, uid: str, attempt: int
) -> bool:
    return labels.attempt_of(dict(meta_labels)) == attempt and any(
        o.get("uid") == uid for o in owners
    )


async def create_items(
    kube: Kube,
    discovery: Discovery,
    spec: AppWrapperSpec,
    *,
    attempt: int,
    aw_api_version: str,
) -> CreateOutcome:
    """Create every item of ``attempt``; at the first item that cannot be created, roll back
    what this call created or found of ``attempt`` (a leftover discovered by a 409 midway must
    not leave half an attempt running beside it) and report that item."""
    made: list[tuple[Resource, ObjectRef]] = []
    outcome = await _create_each(
        kube, discovery, spec, attempt=attempt, aw_api_version=aw_api_version, made=made
    )
    if not isinstance(outcome, Created) and made and not testfaults.active("incarnation-blind"):
        await roll_back(kube, made)
    return outcome


async def roll_back(kube: Kube, made: list[tuple[Resource, ObjectRef]]) -> None:
    """Delete ``made`` (UID preconditions, Background propagation); 404/409 count as done."""
    for resource, ref in reversed(made):
        try:
            await delete_pinned(kube, resource, ref)
        except KubeError as exc:
            log.warning(
                "rollback of a created item failed",
                extra={"item": f"{ref.kind} {ref.name}", "error": str(exc)},
            )


async def _create_each(
    kube: Kube,
    discovery: Discovery,
    spec: AppWrapperSpec,
    *,
    attempt: int,
    aw_api_version: str,
    made: list[tuple[Resource, ObjectRef]],
) -> CreateOutcome:
    """Create the items in order, each run of consecutive items of one kind at once (a gang
    of eight pods is one round trip, not eight); stop after the first run with a failure,
    every object it did create recorded in ``made`` for the rollback."""
    refs: list[ObjectRef] = []
    for run in _runs(spec.items):
        outcomes = await asyncio.gather(
            *(_create_one(kube, discovery, item, spec, attempt, aw_api_version) for item in run)
        )
        failure: CreateOutcome | None = None
        for outcome in outcomes:
            if isinstance(outcome, tuple):
                refs.append(outcome[1])
                made.append(outcome)
            elif failure is None:
                failure = outcome
        if failure is not None:
            return failure
    return Created(tuple(refs))


def _runs(items: tuple[GenericItem, ...]) -> list[list[GenericItem]]:
    """Consecutive items of the same apiVersion and kind, in order."""
    runs: list[list[GenericItem]] = []
    for item in items:
        if runs and (runs[-1][0].api_version, runs[-1][0].kind) == (item.api_version, item.kind):
            runs[-1].append(item)
        else:
            runs.append([item])
    return runs


async def _create_one(
    kube: Kube,
    discovery: Discovery,
    item: GenericItem,
    spec: AppWrapperSpec,
    attempt: int,
    aw_api_version: str,
) -> tuple[Resource, ObjectRef] | Blocked | PermanentFailure | TransientFailure:
    try:
        resource = await discovery.resolve(item.api_version, item.kind)
    except UnknownKind as exc:
        return PermanentFailure(item, "UnknownKind", str(exc))
    except KubeError as exc:
        return TransientFailure(item, f"discovery of {item.api_version} failed: {exc}")
    body = build_object(item, spec, attempt=attempt, aw_api_version=aw_api_version)
    namespace = spec.namespace if resource.namespaced else None
    try:
        data = await kube.create(resource, body, namespace=namespace)
    except KubeError as exc:
        if exc.code == 409:
            outcome = await _already_there(kube, resource, item, spec, attempt)
            return (resource, outcome) if isinstance(outcome, ObjectRef) else outcome
        what = f"{item.kind} {item.name!r}: {exc.code} {exc.reason}: {exc.message}"
        if exc.code in PERMANENT_CODES:
            return PermanentFailure(item, "ItemCreationFailure", what)
        return TransientFailure(item, what)
    return resource, _ref(resource, spec.namespace, _OBJ.decode(data).metadata)


async def _already_there(
    kube: Kube, resource: Resource, item: GenericItem, spec: AppWrapperSpec, attempt: int
) -> ObjectRef | Blocked | TransientFailure:
    namespace = spec.namespace if resource.namespaced else None
    try:
        existing = _OBJ.decode(await kube.get(resource, item.name, namespace=namespace)).metadata
    except KubeError as exc:
        # Gone between the 409 and the GET: let the next round create it.
        return TransientFailure(item, f"{item.kind} {item.name!r} conflicted then: {exc}")
    if ours(existing.labels, existing.ownerReferences, uid=spec.uid, attempt=attempt) and (
        existing.deletionTimestamp is None
    ):
        return _ref(resource, spec.namespace, existing)
    old = labels.attempt_of(existing.labels)
    state = "being deleted" if existing.deletionTimestamp else "present"
    owner = f"attempt {old}" if old is not None else "an object Clearance did not create"
    return Blocked(item, f"{item.kind} {item.name!r} of {owner} is still {state}")
