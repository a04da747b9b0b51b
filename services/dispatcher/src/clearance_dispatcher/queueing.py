"""The dispatch queue: order and head-of-line policy (pure).

Order (MCAD v1): higher ``spec.priority`` first, then older ``creationTimestamp``, then
namespace/name so the order is total and deterministic.

Head-of-line policy — ``backfill`` (default): walk the queue in order and dispatch every
AppWrapper that fits what is still free, *but never past a blocked AppWrapper of higher
priority*: once an AppWrapper does not fit, only AppWrappers of the *same* priority may
backfill behind it; every lower-priority one waits. This keeps MCAD v1's utilisation within a
priority level (small jobs are not stuck behind a big one of equal rank) and avoids priority
inversion (a stream of small low-priority jobs cannot starve a large high-priority one).
``strict``: stop at the first AppWrapper that does not fit (pure FIFO-by-priority; no
starvation at all, lower utilisation).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final, Literal

from clearance_dispatcher.capacity import Resources, shortfall, subtract

Policy = Literal["backfill", "strict"]
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An AppWrapper waiting for dispatch."""

    key: tuple[str, str]  # (namespace, name)
    priority: int
    created: datetime | None
    requests: Resources


def order_key(c: Candidate) -> tuple[int, datetime, str, str]:
    return (-c.priority, c.created or _EPOCH, c.key[0], c.key[1])


def ordered(candidates: Iterable[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=order_key)


@dataclass(frozen=True, slots=True)
class Plan:
    admit: tuple[Candidate, ...]
    """Dispatch these now, in this order."""
    waiting: Mapping[tuple[str, str], str]
    """Why each other candidate waits (condition message)."""


def plan(
    candidates: Iterable[Candidate], free: Mapping[str, int], *, policy: Policy = "backfill"
) -> Plan:
    """Which queued AppWrappers to dispatch given ``free`` capacity."""
    remaining: Resources = dict(free)
    admit: list[Candidate] = []
    waiting: dict[tuple[str, str], str] = {}
    blocked_priority: int | None = None
    blocker: Candidate | None = None
    for cand in ordered(candidates):
        if blocked_priority is not None and (
            policy == "strict" or cand.priority < blocked_priority
        ):
            assert blocker is not None
            waiting[cand.key] = (
                f"waiting behind {blocker.key[0]}/{blocker.key[1]} "
                f"(priority {blocker.priority}), which does not fit yet"
            )
            continue
        missing = shortfall(cand.requests, remaining)
        if missing:
            # Names only: the message must not change with every pod that comes and goes,
            # or each waiting AppWrapper would get a status write per cluster change.
            waiting[cand.key] = "insufficient capacity: not enough " + ", ".join(sorted(missing))
            if blocked_priority is None:
                blocked_priority, blocker = cand.priority, cand
            continue
        admit.append(cand)
        remaining = subtract(remaining, cand.requests)
    return Plan(tuple(admit), waiting)
