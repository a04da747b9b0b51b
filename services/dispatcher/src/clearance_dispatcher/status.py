"""The AppWrapper status: what the dispatcher reads back after a restart, and how it writes it.

``status.clearance`` is the dispatcher's source of truth across restarts (the CRD keeps unknown
fields there). Its ``phase`` says which step of the cycle the current ``attempt`` is in:

    Queued      waiting for capacity (and, after a requeue, for cleared + pause); next
                dispatch is attempt ``attempt + 1``
    Dispatching attempt ``attempt`` decided, items being created (a restart resumes creating)
    Dispatched  every item of ``attempt`` exists; pods are monitored
    TearingDown requeue decided; deletions issued; waiting for ``cleared`` of ``attempt``
    Completed / Failed  terminal (Failed may still await its teardown's ``cleared``)
    Invalid     the spec is malformed; re-validated when ``metadata.generation`` changes

Writes are JSON merge patches on ``/status`` (CRDs refuse strategic merge) that carry
``metadata.resourceVersion``: the API answers 409 when the object changed since it was read,
and :func:`update_status` re-reads and recomputes — optimistic concurrency, so two dispatchers
(a failover overlap) can never both move the same AppWrapper forward.

Conditions are kept one per type (upserted, Kubernetes style) with MCAD v1's field names
(``lastUpdateMicroTime``, ``lastTransitionMicroTime``), so the list stays bounded.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final, Literal

import msgspec

from clearance.kube import Kube, KubeError, Resource
from clearance_dispatcher.appwrapper import parse_time

log = logging.getLogger(__name__)

Phase = Literal[
    "Queued", "Dispatching", "Dispatched", "TearingDown", "Completed", "Failed", "Invalid"
]
PHASES: Final = (
    "Queued",
    "Dispatching",
    "Dispatched",
    "TearingDown",
    "Completed",
    "Failed",
    "Invalid",
)
STATE_OF_PHASE: Final[dict[str, str]] = {
    "Queued": "Pending",
    "Dispatching": "Running",
    "Dispatched": "Running",
    "TearingDown": "Pending",
    "Completed": "Completed",
    "Failed": "Failed",
    "Invalid": "Failed",
}


def micro_time(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True, slots=True)
class Observed:
    """The dispatcher-relevant part of an AppWrapper's status, parsed leniently."""

    phase: Phase | None = None
    attempt: int = 0
    number_of_requeueings: int = 0
    requeueing_time_in_seconds: int | None = None
    dispatched_at: datetime | None = None
    first_dispatched_at: datetime | None = None
    teardown_started_at: datetime | None = None
    teardown_published: bool = False
    cleared_at: datetime | None = None
    cycle_traceparent: str | None = None
    cycle_started_at: datetime | None = None
    """Start of the cycle root span; set while that root is not yet ended (any process)."""
    reason: str | None = None
    invalid_generation: int | None = None
    failed_before_dispatch: bool = False


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def observe(raw: Mapping[str, Any]) -> Observed:
    status = raw.get("status")
    status = status if isinstance(status, Mapping) else {}
    cl = status.get("clearance")
    cl = cl if isinstance(cl, Mapping) else {}
    phase = cl.get("phase")
    return Observed(
        phase=phase if phase in PHASES else None,
        attempt=_int(cl.get("attempt")) or 0,
        number_of_requeueings=_int(status.get("numberOfRequeueings")) or 0,
        requeueing_time_in_seconds=_int(status.get("requeueingTimeInSeconds")),
        dispatched_at=parse_time(cl.get("dispatchedAt")),
        first_dispatched_at=parse_time(status.get("controllerfirstdispatchtimestamp")),
        teardown_started_at=parse_time(cl.get("teardownStartedAt")),
        teardown_published=bool(cl.get("teardownPublished")),
        cleared_at=parse_time(cl.get("clearedAt")),
        cycle_traceparent=cl.get("cycleTraceparent")
        if isinstance(cl.get("cycleTraceparent"), str)
        else None,
        cycle_started_at=parse_time(cl.get("cycleStartedAt")),
        reason=cl.get("reason") if isinstance(cl.get("reason"), str) else None,
        invalid_generation=_int(cl.get("invalidGeneration")),
    )


def conditions_of(raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    status = raw.get("status")
    conds = status.get("conditions") if isinstance(status, Mapping) else None
    return [dict(c) for c in conds if isinstance(c, Mapping)] if isinstance(conds, list) else []


def condition(raw: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in conditions_of(raw):
        if cond.get("type") == type_:
            return cond
    return None


def with_conditions(
    raw: Mapping[str, Any],
    changes: Mapping[str, tuple[bool, str, str]],
    *,
    now: datetime,
) -> list[dict[str, Any]] | None:
    """The conditions list with ``changes`` (type → (status, reason, message)) upserted.

    ``None`` when nothing would change (so no write is needed).
    """
    current = conditions_of(raw)
    by_type = {c.get("type"): c for c in current}
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
            current.append(new)
        else:
            current[current.index(old)] = new
        by_type[type_] = new
        changed = True
    return current if changed else None


class _Meta(msgspec.Struct):
    resourceVersion: str = ""  # Kubernetes wire name


class StatusConflict(Exception):
    """The AppWrapper kept changing under us; the caller reconciles again later."""


class AppWrapperGone(Exception):
    """The AppWrapper no longer exists (or has another UID)."""


Mutation = Callable[[dict[str, Any]], dict[str, Any] | None]
"""Given the current AppWrapper (raw), the ``status`` merge patch to apply, or None."""


async def update_status(
    kube: Kube,
    resource: Resource,
    raw: dict[str, Any],
    mutation: Mutation,
    *,
    attempts: int = 5,
    backoff: float = 0.05,
    on_written: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
) -> dict[str, Any] | None:
    """Apply ``mutation`` to the AppWrapper with resourceVersion-guarded merge patches.

    On 409 the AppWrapper is re-read and ``mutation`` is evaluated again on the fresh object
    (it may then decide there is nothing to do). Returns the updated object, or None when the
    mutation had nothing to write. Raises :class:`AppWrapperGone` or :class:`StatusConflict`.
    """
    meta = raw.get("metadata") or {}
    namespace, name, uid = meta.get("namespace"), meta.get("name"), meta.get("uid")
    current = raw
    for attempt in range(1, attempts + 1):
        patch = mutation(current)
        if patch is None:
            return None
        rv = (current.get("metadata") or {}).get("resourceVersion")
        body = {"metadata": {"resourceVersion": rv}, "status": patch}
        try:
            data = await kube.patch(
                resource, str(name), body, namespace=namespace, subresource="status"
            )
        except KubeError as exc:
            if exc.not_found:
                raise AppWrapperGone(f"{namespace}/{name}") from exc
            if not exc.conflict:
                raise
            await asyncio.sleep(backoff * attempt)
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
        updated: dict[str, Any] = msgspec.json.decode(data)
        if on_written is not None:
            await on_written(updated)
        return updated
    raise StatusConflict(f"{namespace}/{name}: status kept conflicting after {attempts} tries")
