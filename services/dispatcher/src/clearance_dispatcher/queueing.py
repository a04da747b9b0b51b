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
from dataclasses import dataclass, field
from datetime import UTC, datetime
from operator import attrgetter
from typing import Final, Literal

from clearance_dispatcher.capacity import TRACKED, Resources, shortfall, subtract

Policy = Literal["backfill", "strict"]
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Candidate:
    """An AppWrapper waiting for dispatch."""

    key: tuple[str, str]  # (namespace, name)
    priority: int
    created: datetime | None
    requests: Resources
    order: tuple[int, datetime, str, str] = field(init=False, compare=False, repr=False)
    """Its place in the queue (:func:`order_key`), computed once: a scan sorts every queued
    AppWrapper, and the dispatcher keeps one Candidate per spec."""
    needs: tuple[tuple[str, int], ...] = field(init=False, compare=False, repr=False)
    """The tracked resources it requests (positive amounts): what :func:`plan` checks."""

    def __post_init__(self) -> None:
        order = (-self.priority, self.created or _EPOCH, self.key[0], self.key[1])
        object.__setattr__(self, "order", order)
        needs = tuple((n, a) for n, a in self.requests.items() if n in TRACKED and a > 0)
        object.__setattr__(self, "needs", needs)


def order_key(c: Candidate) -> tuple[int, datetime, str, str]:
    return c.order


def ordered(candidates: Iterable[Candidate]) -> list[Candidate]:
    return sorted(candidates, key=_ORDER)


_ORDER: Final = attrgetter("order")


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
    behind = ""
    # Why a request of these needs does not fit what remains (None: it fits); valid until
    # the next admission shrinks what remains. A long queue holds few distinct sizes, so
    # most candidates are judged by one lookup (and allocate nothing).
    verdicts: dict[tuple[tuple[str, int], ...], str | None] = {}
    for cand in ordered(candidates):
        if blocked_priority is not None and (
            policy == "strict" or cand.priority < blocked_priority
        ):
            waiting[cand.key] = behind
            continue
        needs = cand.needs
        if needs in verdicts:
            why = verdicts[needs]
        else:
            why = verdicts[needs] = _short_of(cand, remaining)
        if why is None:
            admit.append(cand)
            remaining = subtract(remaining, cand.requests)
            verdicts.clear()
            continue
        waiting[cand.key] = why
        if blocked_priority is None:
            blocked_priority = cand.priority
            behind = (
                f"waiting behind {cand.key[0]}/{cand.key[1]} "
                f"(priority {cand.priority}), which does not fit yet"
            )
    return Plan(tuple(admit), waiting)


def _short_of(cand: Candidate, remaining: Mapping[str, int]) -> str | None:
    """The waiting message of ``cand`` against ``remaining`` (None: it fits)."""
    missing = shortfall(cand.requests, remaining)
    if not missing:
        return None
    # Names only: the message must not change with every pod that comes and goes, or each
    # waiting AppWrapper would get a status write per cluster change.
    return "insufficient capacity: not enough " + ", ".join(sorted(missing))
