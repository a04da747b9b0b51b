"""The pod subresources that are verbs of their own, binding a pod to a node and the
eviction API, and :class:`Registry`, the whole registry with every layer.
"""

from __future__ import annotations

from typing import Any

from kubesim import (
    deletion,
    statuses,
)
from kubesim.registry.core import (
    _meta,
    now_rfc3339,
)
from kubesim.registry.removal import RegistryRemoval
from kubesim.resources import POD_TYPE
from kubesim.statuses import ApiError
from kubesim.store import clone


class Registry(RegistryRemoval):
    """Generic registry over the store, with per-type strategies."""

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
        return statuses.created()

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
        return statuses.created()
