"""Write helpers shared by the controllers: optimistic-concurrency status updates, finalizer
edits, deletes pinned by UID.

Every status write is a read-modify-write PUT on the `/status` subresource carrying the cached
`resourceVersion`; a 409 Conflict re-reads the object and tries again, as client-go's
`RetryOnConflict` does. Results are fed back into the informer cache so the next pass does not
act on a stale copy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from kubesim.client import ApiError, Informer, KubeClient, Resource
from kubesim.controllers.objects import Obj

__all__ = [
    "delete_pinned",
    "remove_finalizer",
    "remove_owner_references",
    "replace_status",
    "update_object",
    "update_status",
]


async def _read_modify_write(
    client: KubeClient,
    resource: Resource,
    obj: Mapping[str, Any],
    mutate: Callable[[Obj], bool],
    *,
    subresource: str | None,
    informer: Informer | None,
    attempts: int,
) -> Obj | None:
    current: Obj = copy.deepcopy(dict(obj))
    for tried in range(attempts):
        if not mutate(current):
            return current
        try:
            result = await client.replace(
                resource.path_of(current, subresource=subresource), current
            )
        except ApiError as exc:
            if exc.not_found:
                return None
            if not exc.conflict or tried == attempts - 1:
                raise
            try:
                current = await client.get(resource.path_of(current))
            except ApiError as again:
                if again.not_found:
                    return None
                raise
            uid = (obj.get("metadata") or {}).get("uid")
            if uid and (current.get("metadata") or {}).get("uid") != uid:
                return None  # a different object now has this name
            continue
        if informer is not None:
            informer.observe(result)
        return result
    return None


async def update_status(
    client: KubeClient,
    resource: Resource,
    obj: Mapping[str, Any],
    mutate: Callable[[Obj], bool],
    *,
    informer: Informer | None = None,
    attempts: int = 4,
) -> Obj | None:
    """PUT `<obj>/status` after `mutate(copy)` returned True; None when the object is gone."""
    return await _read_modify_write(
        client, resource, obj, mutate, subresource="status", informer=informer, attempts=attempts
    )


async def replace_status(
    client: KubeClient,
    resource: Resource,
    obj: Mapping[str, Any],
    status: Obj,
    *,
    informer: Informer,
) -> Obj | None:
    """PUT `status` as `<obj>/status`, once: a 409 goes to the caller, whose plan is stale."""

    def mutate(current: Obj) -> bool:
        current["status"] = status
        return True

    return await update_status(client, resource, obj, mutate, informer=informer, attempts=1)


async def update_object(
    client: KubeClient,
    resource: Resource,
    obj: Mapping[str, Any],
    mutate: Callable[[Obj], bool],
    *,
    informer: Informer | None = None,
    attempts: int = 4,
) -> Obj | None:
    """PUT the main resource (spec/metadata) after `mutate(copy)` returned True."""
    return await _read_modify_write(
        client, resource, obj, mutate, subresource=None, informer=informer, attempts=attempts
    )


async def remove_finalizer(
    client: KubeClient,
    resource: Resource,
    obj: Mapping[str, Any],
    finalizer: str,
    *,
    informer: Informer | None = None,
) -> Obj | None:
    """Drop one finalizer with a JSON patch guarded by `test` ops (no lost updates).

    A strategic-merge patch with a shorter list would not remove anything (finalizers merge),
    hence JSON patch; the `test` ops on the UID and the current list make a concurrent edit
    fail (422/409) and re-read instead of silently re-adding or dropping someone else's entry.
    """
    return await _edit_metadata_list(
        client,
        resource,
        obj,
        "finalizers",
        lambda items: [f for f in items if f != finalizer],
        informer=informer,
    )


async def remove_owner_references(
    client: KubeClient,
    resource: Resource,
    obj: Mapping[str, Any],
    owner_uids: set[str],
    *,
    informer: Informer | None = None,
) -> Obj | None:
    """Drop the ownerReferences pointing at `owner_uids` (orphaning, dangling-owner cleanup)."""
    return await _edit_metadata_list(
        client,
        resource,
        obj,
        "ownerReferences",
        lambda items: [r for r in items if str(r.get("uid")) not in owner_uids],
        informer=informer,
    )


async def _edit_metadata_list(
    client: KubeClient,
    resource: Resource,
    obj: Mapping[str, Any],
    field_name: str,
    edit: Callable[[list[Any]], list[Any]],
    *,
    informer: Informer | None,
) -> Obj | None:
    current: Mapping[str, Any] = obj
    uid = (obj.get("metadata") or {}).get("uid")
    for _ in range(5):
        meta = current.get("metadata") or {}
        items = list(meta.get(field_name) or [])
        remaining = edit(items)
        if remaining == items:
            return dict(current)
        ops: list[Obj] = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "test", "path": f"/metadata/{field_name}", "value": items},
            {"op": "replace", "path": f"/metadata/{field_name}", "value": remaining},
        ]
        try:
            result = await client.patch(resource.path_of(current), ops, patch_type="json")
        except ApiError as exc:
            if exc.not_found:
                return None
            if exc.status not in (409, 422):
                raise
            try:
                current = await client.get(resource.path_of(current))
            except ApiError as again:
                if again.not_found:
                    return None
                raise
            if (current.get("metadata") or {}).get("uid") != uid:
                return None
            continue
        if informer is not None:
            informer.observe(result)
        return result
    return None


async def delete_pinned(
    client: KubeClient, resource: Resource, obj: Obj, *, informer: Informer
) -> bool:
    """Delete ``obj`` pinned by its UID and show the result to ``informer`` at once.

    False when there was nothing to delete: the object is gone (404) or is another
    incarnation by now (409, the UID precondition failed); the next pass decides again.
    """
    try:
        deleted = await client.delete(resource.path_of(obj), uid=str(obj["metadata"]["uid"]))
    except ApiError as exc:
        if exc.status in (404, 409):
            return False
        raise
    if deleted.get("kind") == resource.kind:
        informer.observe(deleted)
    return True
