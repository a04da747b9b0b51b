"""The AppWrapper status as the dispatcher reads it (:class:`Observed`) and the one writer of it.

:class:`Observed` is the MCAD-visible status (``state``, conditions, counts, requeue counters,
first timestamps) plus the dispatcher's bookkeeping, :class:`ClearanceStatus`, read through a
:class:`~clearance_dispatcher.bookkeeping.Storage` (this module never touches
``status.clearance`` itself). A transition (:mod:`clearance_dispatcher.transitions`) turns an
``Observed`` into a :class:`Patch`; :func:`update_status` renders it into JSON merge patches
(CRDs refuse strategic merge) carrying ``metadata.resourceVersion`` and applies them once. A
409 means the AppWrapper changed since it was read: it is re-read and the transition evaluated
again on the fresh object (it may then decide there is nothing to do) — optimistic concurrency,
so two dispatchers (a failover overlap) can never both move the same AppWrapper forward.

Conditions are kept one per type (upserted, Kubernetes style) with MCAD v1's field names
(``lastUpdateMicroTime``, ``lastTransitionMicroTime``), so the list stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import msgspec

from clearance import testfaults
from clearance.bookkeeping import PHASES, ClearanceStatus
from clearance.kube import Kube, KubeError, Resource
from clearance.timestamps import micro_time, parse_time
from clearance_dispatcher.storage import STATUS_STORAGE, Storage, Write

log = logging.getLogger(__name__)

__all__ = ["PHASES", "micro_time"]

STATE_OF_PHASE: Final[dict[str, str]] = {
    "Queued": "Pending",
    "Dispatching": "Running",
    "Dispatched": "Running",
    "TearingDown": "Pending",
    "Completed": "Completed",
    "Failed": "Failed",
    "Invalid": "Failed",
}
COUNT_FIELDS: Final = ("pending", "running", "Succeeded", "failed")
"""MCAD's pod count fields in ``status`` (``Succeeded`` capitalised, as MCAD writes it)."""

ConditionChange = tuple[bool, str, str]
"""(status, reason, message) of one condition type."""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True, slots=True)
class Observed:
    """What the dispatcher acts on in an AppWrapper's status, parsed leniently."""

    clearance: ClearanceStatus = field(default_factory=ClearanceStatus)
    number_of_requeueings: int = 0
    requeueing_time_in_seconds: int | None = None
    first_dispatched_at: datetime | None = None
    first_seen: bool = False
    """``controllerfirsttimestamp`` is set."""
    message: str | None = None
    counts: Mapping[str, int | None] = field(default_factory=dict)
    conditions: tuple[Mapping[str, Any], ...] = ()

    def condition(self, type_: str) -> Mapping[str, Any] | None:
        for cond in self.conditions:
            if cond.get("type") == type_:
                return cond
        return None


def observe(raw: Mapping[str, Any], storage: Storage = STATUS_STORAGE) -> Observed:
    status = storage.status(raw)
    message = status.get("message")
    return Observed(
        clearance=storage.read(raw),
        number_of_requeueings=_int(status.get("numberOfRequeueings")) or 0,
        requeueing_time_in_seconds=_int(status.get("requeueingTimeInSeconds")),
        first_dispatched_at=parse_time(status.get("controllerfirstdispatchtimestamp")),
        first_seen=bool(status.get("controllerfirsttimestamp")),
        message=message if isinstance(message, str) and message else None,
        counts={name: _int(status.get(name)) for name in COUNT_FIELDS},
        conditions=tuple(conditions_of({"status": status})),
    )


def conditions_of(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    status = raw.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return [dict(c) for c in conds if isinstance(c, Mapping)] if isinstance(conds, list) else []


def with_conditions(
    current: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    changes: Mapping[str, ConditionChange],
    *,
    now: datetime,
) -> list[dict[str, Any]] | None:
    """The conditions list with ``changes`` (type → (status, reason, message)) upserted.

    ``current`` is the AppWrapper (raw) or its conditions. ``None`` when nothing would change
    (so no write is needed).
    """
    conds = (
        conditions_of(current)
        if isinstance(current, Mapping)
        else [dict(c) for c in current if isinstance(c, Mapping)]
    )
    by_type = {c.get("type"): c for c in conds}
    changed = False
    stamp = micro_time(now)
    for type_, (state, reason, message) in changes.items():
        status = "True" if state else "False"
        old = by_type.get(type_)
        if old is None and not state:
            continue  # never write a False condition that was never True
        if (
            old is not None
            and old.get("status") == status
            and old.get("reason") == reason
            and old.get("message") == message
        ):
            continue
        new = {
            "type": type_,
            "status": status,
            "reason": reason,
            "message": message[:1024],
            "lastUpdateMicroTime": stamp,
            "lastTransitionMicroTime": stamp
            if old is None or old.get("status") != status
            else old.get("lastTransitionMicroTime", stamp),
        }
        if old is None:
            conds.append(new)
        else:
            conds[conds.index(old)] = new
        by_type[type_] = new
        changed = True
    return conds if changed else None


@dataclass(frozen=True, slots=True)
class Patch:
    """One transition's changes, gathered, applied in one write."""

    at: datetime
    """When the transition happened (condition timestamps)."""
    clearance: ClearanceStatus | None = None
    """The new bookkeeping; None: unchanged."""
    status: Mapping[str, Any] = field(default_factory=dict)
    """MCAD-visible status fields to merge (``state``, counts, ``message`` …)."""
    conditions: Mapping[str, ConditionChange] = field(default_factory=dict)
    """Conditions to upsert."""


Transition = Callable[[Observed], Patch | None]
"""Given the current status, the patch that moves it on, or None (nothing to do)."""


def render(observed: Observed, patch: Patch) -> tuple[dict[str, Any], ClearanceStatus | None]:
    """The status fields and the bookkeeping to write for ``patch`` (empty: nothing)."""
    fields = dict(patch.status)
    if patch.conditions:
        conds = with_conditions(observed.conditions, patch.conditions, now=patch.at)
        if conds is not None:
            fields["conditions"] = conds
    clearance = patch.clearance
    if clearance is not None and clearance == observed.clearance:
        clearance = None
    if fields and clearance is None and observed.clearance.legacy:
        clearance = observed.clearance  # migrate the old layout with this write
    return fields, clearance


class StatusConflict(Exception):
    """The AppWrapper kept changing under us; the caller reconciles again later."""


class PrunedWrite(Exception):
    """The API server dropped fields of a status write (read back): the served CRD prunes
    them. The write itself went through; ``fields`` are the dropped paths."""

    def __init__(self, fields: list[str]) -> None:
        super().__init__(", ".join(fields))
        self.fields = fields


def pruned_fields(writes: Sequence[Write], updated: Mapping[str, Any]) -> list[str]:
    """Paths of ``status`` written by ``writes`` that ``updated`` (the answer) lacks."""
    status = updated.get("status")
    status = status if isinstance(status, Mapping) else {}
    lost = []
    for write in writes:
        if write.subresource != "status":
            continue
        for key, value in (write.body.get("status") or {}).items():
            if value is None:
                continue
            got = status.get(key)
            if got is None or (isinstance(value, Mapping) and value and not got):
                lost.append(f"status.{key}")
            elif isinstance(value, Mapping) and isinstance(got, Mapping):
                lost += [
                    f"status.{key}.{k}" for k in value if value[k] is not None and k not in got
                ]
    return lost


class AppWrapperGone(Exception):
    """The AppWrapper no longer exists (or has another UID)."""


async def update_status(
    kube: Kube,
    resource: Resource,
    raw: dict[str, Any],
    transition: Transition,
    *,
    storage: Storage = STATUS_STORAGE,
    tries: int = 5,
    backoff: float = 0.05,
    on_written: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    between: Callable[[ClearanceStatus | None], None] | None = None,
) -> dict[str, Any] | None:
    """Apply ``transition`` to the AppWrapper with resourceVersion-guarded merge patches.

    Returns the updated object, or None when the transition had nothing to write. Raises
    :class:`AppWrapperGone` or :class:`StatusConflict`, and :class:`PrunedWrite` after a
    write the server answered without some of its fields (never silently carrying on).
    """
    meta = raw.get("metadata") or {}
    namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    current = raw
    for tried in range(1, tries + 1):
        observed = observe(current, storage)
        patch = transition(observed)
        # Nothing to do still repairs a status left behind its committed bookkeeping.
        fields, clearance = render(observed, patch) if patch is not None else ({}, None)
        writes = storage.writes(fields, clearance, raw=current)
        if not writes:
            return None
        rv = (current.get("metadata") or {}).get("resourceVersion")
        try:
            updated = current
            for index, write in enumerate(writes):
                if index and between is not None:
                    between(clearance)  # test fault injection: after the commit point
                meta = {**write.body.get("metadata", {}), "resourceVersion": rv}
                body = {**write.body, "metadata": meta}
                data = await kube.patch(
                    resource, str(name), body, namespace=namespace, subresource=write.subresource
                )
                updated = msgspec.json.decode(data)
                rv = (updated.get("metadata") or {}).get("resourceVersion")
        except KubeError as exc:
            if exc.not_found:
                raise AppWrapperGone(f"{namespace}/{name}") from exc
            if not exc.conflict:
                raise
            await asyncio.sleep(backoff * tried)
            try:
                current = msgspec.json.decode(
                    await kube.get(resource, str(name), namespace=namespace)
                )
            except KubeError as get_exc:
                if get_exc.not_found:
                    raise AppWrapperGone(f"{namespace}/{name}") from get_exc
                raise
            if (current.get("metadata") or {}).get("uid") != uid:
                raise AppWrapperGone(f"{namespace}/{name} was recreated") from exc
            continue
        if on_written is not None:
            await on_written(updated)
        lost = [] if testfaults.active("ignore-pruned") else pruned_fields(writes, updated)
        if lost:
            raise PrunedWrite(lost)
        return updated
    raise StatusConflict(f"{namespace}/{name}: status kept conflicting after {tries} tries")
