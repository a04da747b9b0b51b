"""Leftovers: objects that must be gone before an attempt of an AppWrapper is created.

DESIGN §5 (safety and incarnations): no object of attempt N is created while an object of an
earlier attempt, or of an earlier AppWrapper of the same name (another *incarnation*, another
UID: users delete and re-apply to escape a requeue loop), still exists. Before any create, every
name the attempt will create (all kinds, not only pods) is read from the API, and every object
of those kinds and every pod carrying the AppWrapper's label is listed (quorum reads). An
object's incarnation is its ``clearance.dev/appwrapper-uid`` label, else its AppWrapper
ownerReference; an object with neither that predates the AppWrapper is an earlier one's.

:func:`judge` is the pure verdict on one object; :func:`find_leftovers` does the reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from clearance import labels
from clearance.discovery import Discovery, UnknownKind
from clearance.events import ObjectRef
from clearance.kube import PODS, Kube, KubeError, Resource
from clearance.timestamps import parse_time
from clearance_dispatcher.appwrapper import AppWrapperSpec


class ObjectMeta(msgspec.Struct):
    name: str = ""
    namespace: str | None = None
    uid: str = ""
    labels: dict[str, str] = msgspec.field(default_factory=dict)
    deletionTimestamp: str | None = None  # Kubernetes wire names
    creationTimestamp: str | None = None
    finalizers: list[str] = msgspec.field(default_factory=list)
    ownerReferences: list[dict[str, Any]] = msgspec.field(default_factory=list)


class _Obj(msgspec.Struct):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)


_OBJ: Final = msgspec.json.Decoder(_Obj)


def decode_meta(raw: bytes | msgspec.Raw) -> ObjectMeta:
    """The metadata the leftover rules (and the teardown's reads) decide on."""
    return _OBJ.decode(raw).metadata


@dataclass(frozen=True, slots=True)
class Leftover:
    """An object that holds the dispatch, and why."""

    ref: ObjectRef
    incarnation: str | None
    """UID of the AppWrapper incarnation it belongs to (None: unknown or not Clearance's)."""
    attempt: int | None
    diagnosis: str

    def describe(self) -> str:
        return f"{self.ref.kind} {self.ref.name}: {self.diagnosis}"


def _incarnation(meta: ObjectMeta) -> str | None:
    stamped = labels.incarnation_of(meta.labels)
    if stamped is not None:
        return stamped
    for owner in meta.ownerReferences:
        if owner.get("kind") == "AppWrapper" and owner.get("uid"):
            return str(owner["uid"])
    return None


def _state(meta: ObjectMeta) -> str:
    if meta.deletionTimestamp:
        held = f", held by finalizers {', '.join(meta.finalizers)}" if meta.finalizers else ""
        return f"being deleted since {meta.deletionTimestamp}{held}"
    return "still present"


def judge(
    meta: ObjectMeta, *, spec: AppWrapperSpec, attempt: int, by_name: bool
) -> tuple[str | None, str] | None:
    """``(incarnation, diagnosis)`` if ``meta`` holds ``attempt`` of ``spec`` back, else None.

    ``by_name``: found under a name the attempt will create (anything there but this attempt's
    own live object blocks); otherwise found by the AppWrapper label (only Clearance's objects
    of another attempt or incarnation block).
    """
    incarnation = _incarnation(meta)
    found = labels.attempt_of(meta.labels)
    own = incarnation == labels.value_for(spec.uid) or incarnation == spec.uid
    if own:
        if found == attempt and not meta.deletionTimestamp:
            return None
        return incarnation, f"attempt {found} of this AppWrapper, {_state(meta)}"
    if incarnation is not None:
        return incarnation, (
            f"left by an earlier AppWrapper of this name (uid {incarnation}), {_state(meta)}"
        )
    if found is not None:
        born = parse_time(meta.creationTimestamp)
        earlier = spec.creation is not None and born is not None and born < spec.creation
        if earlier:
            return None, f"left by an earlier AppWrapper of this name, {_state(meta)}"
        if found != attempt:
            return None, f"attempt {found}, {_state(meta)}"
        if not by_name:
            return None
    if not by_name:
        return None
    return None, f"not created by Clearance for this AppWrapper, {_state(meta)}"


def _leftover(resource: Resource, meta: ObjectMeta, verdict: tuple[str | None, str]) -> Leftover:
    return Leftover(
        ref=ObjectRef(
            kind=resource.kind,
            api_version=resource.api_version,
            namespace=meta.namespace,
            name=meta.name,
            uid=meta.uid,
        ),
        incarnation=verdict[0],
        attempt=labels.attempt_of(meta.labels),
        diagnosis=verdict[1],
    )


GETS_PER_KIND: Final = 4
"""Up to this many item names of one namespaced kind are read one GET each; more are read with
one LIST of the kind in the namespace. The pre-check's requests share the client rate limit
(``CLEARANCE_KUBE_QPS``) with the creates that follow, so a 50-item AppWrapper must not spend
50 of them on reads before its first create (issue 13's fuzz: a 40-item dispatch took 7.7 s
at the default 50 requests/s)."""

NO_APPWRAPPER: Final = f"!{labels.ANY_APPWRAPPER}"
"""Selector of the objects that belong to no AppWrapper. The LIST by name reads only those:
this AppWrapper's own objects come with its label LIST (and are judged as found by name when
they hold an item's name), so the LIST no longer carries every AppWrapper pod of a shared
namespace (4,000 pods, ~4 MB, per dispatch in the 64 x 500 rack-loss benchmark). An object
of *another* AppWrapper under an item's name is left to the create, whose 409 blocks the
dispatch and rolls back what the attempt created."""


async def _by_name(
    kube: Kube, resource: Resource, names: list[str], *, namespace: str | None
) -> list[ObjectMeta]:
    """The objects of ``resource`` under ``names`` that exist (quorum reads)."""
    if namespace is not None and len(names) > GETS_PER_KIND:
        wanted = set(names)
        listed = await kube.list(resource, namespace=namespace, label_selector=NO_APPWRAPPER)
        return [m for m in (decode_meta(raw) for raw in listed.items) if m.name in wanted]
    got = await asyncio.gather(*(get_if_present(kube, resource, name, namespace) for name in names))
    return [decode_meta(raw) for raw in got if raw is not None]


async def names_by_resource(
    discovery: Discovery, spec: AppWrapperSpec
) -> dict[tuple[Resource, str | None], list[str]]:
    """The item names of ``spec`` by resource and namespace (None: cluster-scoped), in item
    order; kinds the API does not serve are left out."""
    names: dict[tuple[Resource, str | None], list[str]] = {}
    for item in spec.items:
        try:
            resource = await discovery.resolve(item.api_version, item.kind)
        except UnknownKind:
            continue
        namespace = spec.namespace if resource.namespaced else None
        names.setdefault((resource, namespace), []).append(item.name)
    return names


async def find_leftovers(
    kube: Kube, discovery: Discovery, spec: AppWrapperSpec, *, attempt: int
) -> list[Leftover]:
    """Every object that must go before ``attempt`` of ``spec`` may be created (quorum reads).

    The reads are independent, so they go out together (one round trip on the redispatch's
    critical path instead of one per read); the verdicts are the same as one after another,
    a name's verdict taking precedence over the label's for the same object. Kinds the API
    does not serve are skipped (the creation reports them)."""
    resources: dict[str, Resource] = {PODS.path(namespace=spec.namespace): PODS}
    names = await names_by_resource(discovery, spec)
    for resource, namespace in names:
        if namespace is not None:
            resources[resource.path(namespace=namespace)] = resource
    selector = labels.selector_for(spec.name, namespace=spec.namespace)
    listed_kinds = list(resources.values())
    named, listed = await asyncio.gather(
        asyncio.gather(
            *(
                _by_name(kube, resource, item_names, namespace=namespace)
                for (resource, namespace), item_names in names.items()
            )
        ),
        asyncio.gather(
            *(
                kube.list(resource, namespace=spec.namespace, label_selector=selector)
                for resource in listed_kinds
            )
        ),
    )
    found: dict[str, Leftover] = {}
    for (resource, _), metas in zip(names, named, strict=True):
        for meta in metas:
            verdict = judge(meta, spec=spec, attempt=attempt, by_name=True)
            if verdict is not None:
                found[meta.uid] = _leftover(resource, meta, verdict)
    named_paths = {
        (resource.path(namespace=namespace), name)
        for (resource, namespace), kind_names in names.items()
        for name in kind_names
    }
    for resource, page in zip(listed_kinds, listed, strict=True):
        path = resource.path(namespace=spec.namespace)
        for item_raw in page.items:
            meta = decode_meta(item_raw)
            if meta.uid in found:
                continue
            under_a_name = (path, meta.name) in named_paths
            verdict = judge(meta, spec=spec, attempt=attempt, by_name=under_a_name)
            if verdict is not None:
                found[meta.uid] = _leftover(resource, meta, verdict)
    return list(found.values())


async def get_if_present(
    kube: Kube, resource: Resource, name: str, namespace: str | None
) -> bytes | None:
    """The object under ``name`` (None: there is none)."""
    try:
        return await kube.get(resource, name, namespace=namespace)
    except KubeError as exc:
        if exc.not_found:
            return None
        raise


def summary(leftovers: list[Leftover], *, limit: int = 5) -> str:
    """One line for the Blocked condition: each object and its diagnosis."""
    shown = "; ".join(left.describe() for left in leftovers[:limit])
    more = f"; and {len(leftovers) - limit} more" if len(leftovers) > limit else ""
    return f"waiting for {len(leftovers)} object(s) to go: {shown}{more}"


def incarnations(leftovers: list[Leftover]) -> Mapping[tuple[str, int], list[Leftover]]:
    """Leftovers of earlier incarnations by (their AppWrapper UID, attempt): one teardown each."""
    out: dict[tuple[str, int], list[Leftover]] = {}
    for left in leftovers:
        if left.incarnation is None:
            continue
        out.setdefault((left.incarnation, left.attempt or 0), []).append(left)
    return out
