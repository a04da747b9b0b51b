"""The registry's deletes: graceful and immediate deletion with preconditions,
finalizers and propagation policy, namespace termination, and delete-collection.
"""

from __future__ import annotations

import copy
from typing import Any

from kubesim import (
    deletion,
    statuses,
)
from kubesim.registry.core import (
    IMMORTAL_NAMESPACES,
    WriteResult,
    _meta,
    now_rfc3339,
)
from kubesim.registry.writes import RegistryWrites
from kubesim.resources import (
    NAMESPACE_TYPE,
    GcPolicy,
    ResourceType,
)
from kubesim.statuses import ApiError
from kubesim.store import clone


class RegistryRemoval(RegistryWrites):
    """Delete one object, a namespace or a collection."""

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
