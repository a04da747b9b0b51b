"""Deleting the generic items of an AppWrapper's attempt (teardown, AppWrapper deletion).

Only objects this AppWrapper owns (ownerReference UID) whose attempt label is ≤ the attempt are
deleted, each pinned by a UID precondition, with Background propagation (batch/v1 would orphan
its pods by default). The reads are batched: one LIST per kind of the AppWrapper's labelled
objects, then a GET only for item names that LIST did not return (an object someone stripped
of its labels is still found); the deletes go out together. A gang of eight pods costs one
LIST and eight DELETEs in one round trip, instead of sixteen requests one after another.
"""

from __future__ import annotations

import asyncio

from clearance import labels
from clearance.discovery import Discovery
from clearance.events import ObjectRef
from clearance.kube import Kube, KubeError, Resource
from clearance_dispatcher.appwrapper import AppWrapperSpec
from clearance_dispatcher.leftovers import (
    ObjectMeta,
    decode_meta,
    get_if_present,
    names_by_resource,
)


async def delete_items(
    kube: Kube, discovery: Discovery, spec: AppWrapperSpec, *, attempt: int | None
) -> list[ObjectRef]:
    """Delete the items of ``attempt`` and earlier (any, when None); returns what was deleted
    or found already deleting. 404 counts as gone; 409 (the UID changed under us) as not ours."""
    names = await names_by_resource(discovery, spec)
    found = await asyncio.gather(
        *(
            _read(kube, spec, resource, namespace, wanted)
            for (resource, namespace), wanted in names.items()
        )
    )
    doomed: list[tuple[Resource, ObjectRef]] = []
    for (resource, _), metas in zip(names, found, strict=True):
        for meta in metas:
            if not any(o.get("uid") == spec.uid for o in meta.ownerReferences):
                continue
            seen = labels.attempt_of(meta.labels)
            if attempt is not None and seen is not None and seen > attempt:
                continue
            ref = ObjectRef(
                kind=resource.kind,
                api_version=resource.api_version,
                namespace=spec.namespace if resource.namespaced else None,
                name=meta.name,
                uid=meta.uid,
            )
            doomed.append((resource, ref))
    gone = await asyncio.gather(*(delete_pinned(kube, resource, ref) for resource, ref in doomed))
    return [ref for (_, ref), deleted in zip(doomed, gone, strict=True) if deleted]


async def _read(
    kube: Kube, spec: AppWrapperSpec, resource: Resource, namespace: str | None, wanted: list[str]
) -> list[ObjectMeta]:
    """The objects of ``resource`` under the ``wanted`` names that exist, in item order."""
    selector = labels.selector_for(spec.name, namespace=spec.namespace)
    listed = await kube.list(resource, namespace=namespace, label_selector=selector)
    by_name = {m.name: m for m in (decode_meta(raw) for raw in listed.items)}
    missing = [name for name in wanted if name not in by_name]
    for raw in await asyncio.gather(
        *(get_if_present(kube, resource, n, namespace) for n in missing)
    ):
        if raw is not None:
            meta = decode_meta(raw)
            by_name[meta.name] = meta
    return [by_name[name] for name in dict.fromkeys(wanted) if name in by_name]


async def delete_pinned(kube: Kube, resource: Resource, ref: ObjectRef) -> bool:
    """Delete ``ref`` pinned by its UID; False if it was gone or is no longer that object."""
    try:
        await kube.delete(
            resource,
            ref.name,
            namespace=ref.namespace,
            propagation_policy="Background",
            uid=ref.uid,
        )
    except KubeError as exc:
        if exc.code in (404, 409):  # 409: the UID changed under us; not ours any more
            return False
        raise
    return True
