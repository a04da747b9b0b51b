"""Deletion decisions: graceful deletion, finalizers and GC-policy finalizers.

A line-by-line port of the decision part of apiserver `registry/rest/delete.go`
(BeforeDelete, the pod strategy's CheckGracefulDelete) and `registry/generic/registry/
store.go` (Delete, updateForGracefulDeletionAndFinalizers, markAsDeleting,
deletionFinalizersForGarbageCollection, ShouldDeleteDuringUpdate). No I/O: the caller
commits the returned plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kubesim.resources import GcPolicy
from kubesim.store import clone

ORPHAN_FINALIZER = "orphan"
FOREGROUND_FINALIZER = "foregroundDeletion"


@dataclass(slots=True)
class DeleteOptions:
    grace_period_seconds: int | None = None
    propagation_policy: str | None = None
    orphan_dependents: bool | None = None
    precondition_uid: str | None = None
    precondition_rv: str | None = None
    dry_run: bool = False


@dataclass(slots=True)
class DeletePlan:
    """What to commit: optionally an update first, then optionally the removal."""

    update: dict[str, Any] | None
    remove: bool
    # BeforeDelete found a graceful deletion already pending (no write at all).
    pending: bool = False


def format_time(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def pod_grace_period(pod: dict[str, Any], requested: int | None) -> int:
    """Pod strategy CheckGracefulDelete."""
    spec = pod.get("spec") or {}
    if requested is not None:
        period = requested
    else:
        tgps = spec.get("terminationGracePeriodSeconds")
        period = int(tgps) if tgps is not None else 0
    if not spec.get("nodeName"):
        period = 0
    if (pod.get("status") or {}).get("phase") in ("Failed", "Succeeded"):
        period = 0
    if period < 0:
        period = 1
    return period


def _before_delete(
    obj: dict[str, Any], opts: DeleteOptions, *, graceful_type: bool, now: datetime
) -> tuple[bool, bool]:
    """rest.BeforeDelete: returns (graceful, graceful_pending); mutates obj and opts."""
    meta = obj["metadata"]
    if meta.get("deletionTimestamp"):
        stored = meta.get("deletionGracePeriodSeconds")
        if stored is None or int(stored) == 0:
            return False, False
        if opts.grace_period_seconds is not None:
            period = opts.grace_period_seconds
            if period >= int(stored):
                return False, True
            start = parse_time(str(meta["deletionTimestamp"])) - timedelta(seconds=int(stored))
            new_ts = start + timedelta(seconds=period)
            meta["deletionTimestamp"] = format_time(new_ts)
            meta["deletionGracePeriodSeconds"] = period
            return True, False
        opts.grace_period_seconds = int(stored)
        return False, True
    if not graceful_type:
        return False, False
    period = pod_grace_period(obj, opts.grace_period_seconds)
    opts.grace_period_seconds = period
    meta["deletionTimestamp"] = format_time(now + timedelta(seconds=period))
    meta["deletionGracePeriodSeconds"] = period
    if int(meta.get("generation") or 0) > 0:
        meta["generation"] = int(meta["generation"]) + 1
    return True, False


def _dependents_finalizer(finalizers: list[str], opts: DeleteOptions, default: GcPolicy) -> str:
    """What happens to the dependents (shouldOrphanDependents / shouldDeleteDependents in one):
    the orphan or the foreground finalizer, or "" for background deletion (no finalizer).

    The request decides first (orphanDependents, then propagationPolicy), then the finalizer
    the object already carries, then the type's default."""
    if default == "unsupported":
        return ""
    if opts.orphan_dependents is not None:
        return ORPHAN_FINALIZER if opts.orphan_dependents else ""
    if opts.propagation_policy == "Orphan":
        return ORPHAN_FINALIZER
    if opts.propagation_policy == "Foreground":
        return FOREGROUND_FINALIZER
    if opts.propagation_policy == "Background":
        return ""
    for f in finalizers:
        if f in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER):
            return f
    return ORPHAN_FINALIZER if default == "orphan" else ""


def gc_finalizers(
    finalizers: list[str], opts: DeleteOptions, default: GcPolicy
) -> tuple[bool, list[str]]:
    """deletionFinalizersForGarbageCollection: (needs update, new finalizers)."""
    new = [f for f in finalizers if f not in (ORPHAN_FINALIZER, FOREGROUND_FINALIZER)]
    wanted = _dependents_finalizer(finalizers, opts, default)
    if wanted:
        new.append(wanted)
    if set(new) == set(finalizers):
        return False, finalizers
    return True, new


def _mark_as_deleting(obj: dict[str, Any], now: datetime) -> None:
    meta = obj["metadata"]
    if not meta.get("deletionTimestamp"):
        if int(meta.get("generation") or 0) > 0:
            meta["generation"] = int(meta["generation"]) + 1
        meta["deletionTimestamp"] = format_time(now)
    meta["deletionGracePeriodSeconds"] = 0


def plan_delete(
    existing: dict[str, Any],
    opts: DeleteOptions,
    *,
    graceful_type: bool,
    gc_policy: GcPolicy,
    now: datetime | None = None,
) -> DeletePlan:
    """Store.Delete decision for one object (preconditions already checked)."""
    now = now or datetime.now(UTC)
    probe = clone(existing)
    graceful, pending = _before_delete(probe, opts, graceful_type=graceful_type, now=now)
    if pending:
        return DeletePlan(update=None, remove=False, pending=True)
    finalizers = list((existing.get("metadata") or {}).get("finalizers") or [])
    should_update, _ = gc_finalizers(finalizers, opts, gc_policy)
    if not (graceful or finalizers or should_update):
        return DeletePlan(update=None, remove=True)
    # updateForGracefulDeletionAndFinalizers, on a fresh copy of the stored object.
    obj = clone(existing)
    graceful, pending = _before_delete(obj, opts, graceful_type=graceful_type, now=now)
    if pending:
        return DeletePlan(update=None, remove=False, pending=True)
    needs, new_finalizers = gc_finalizers(finalizers, opts, gc_policy)
    if needs:
        obj["metadata"]["finalizers"] = new_finalizers
    pending_finalizers = bool(obj["metadata"].get("finalizers"))
    if not graceful:
        if pending_finalizers:
            _mark_as_deleting(obj, now)
            return DeletePlan(update=obj, remove=False)
        return DeletePlan(update=None, remove=True)
    if pending_finalizers or (opts.grace_period_seconds or 0) > 0:
        return DeletePlan(update=obj, remove=False)
    return DeletePlan(update=obj, remove=True)


def should_delete_during_update(
    new: dict[str, Any], old: dict[str, Any], *, namespace: bool = False
) -> bool:
    """ShouldDeleteDuringUpdate (+ the namespace variant that also needs spec.finalizers empty)."""
    if (new.get("metadata") or {}).get("finalizers"):
        return False
    old_meta = old.get("metadata") or {}
    if not old_meta.get("deletionTimestamp"):
        return False
    if namespace and (new.get("spec") or {}).get("finalizers"):
        return False
    grace = old_meta.get("deletionGracePeriodSeconds")
    return grace is None or int(grace) == 0
