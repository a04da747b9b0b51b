"""Pure drift rules: what to change on a stream the server already has, and what to leave.

Every service provisions the topology at start-up, so two services (or two versions, or two
settings) must never undo each other. The rules, in order of importance:

* **replicas never go down**: a stream found with more replicas than declared keeps them
  (reported as kept), one found with fewer is scaled up to the declaration — so the highest
  replica count any service declared wins, and no path can make an R3 stream R1;
* fields the server cannot change in place (storage, retention) are reported, never touched;
* every other declared field (subjects, max age, duplicate window, discard, description) is
  corrected toward the declaration; fields the declaration does not name are left as found.

No I/O here: :func:`plan_stream` takes the declared spec and the server's config and returns a
:class:`StreamPlan`; :mod:`clearance.bus.provisioning` applies it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from nats.js import api

from clearance.bus.topology import StreamSpec

__all__ = ["StreamPlan", "plan_stream", "stream_replicas"]


@dataclass(frozen=True)
class StreamPlan:
    """The update to send (None: nothing to change), what it corrects and what it leaves."""

    update: api.StreamConfig | None
    corrected: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()
    """Differences left as found, each ``field: found (declared …)``."""


def stream_replicas(declared: int, found: int | None) -> int:
    """The replica count to keep: never fewer than the server has."""
    return max(declared, found or 1)


def _same_seconds(a: float | None, b: float | None) -> bool:
    return math.isclose(a or 0.0, b or 0.0, rel_tol=1e-6, abs_tol=1e-3)


def plan_stream(spec: StreamSpec, current: api.StreamConfig) -> StreamPlan:
    """How to bring ``current`` toward ``spec`` without scaling down or touching the immutable."""
    wanted = spec.to_config()
    corrected: list[str] = []
    kept: list[str] = []
    update = replace(current)
    found_replicas = current.num_replicas or 1
    if found_replicas < spec.replicas:
        corrected.append(f"num_replicas: {found_replicas} -> {spec.replicas}")
        update.num_replicas = spec.replicas
    elif found_replicas > spec.replicas:
        kept.append(f"num_replicas: {found_replicas} (declared {spec.replicas}; never scaled down)")
    for name in ("storage", "retention"):
        if getattr(current, name) != getattr(wanted, name):
            kept.append(
                f"{name}: {getattr(current, name)} (declared {getattr(wanted, name)}; immutable)"
            )
    if sorted(current.subjects or []) != sorted(wanted.subjects or []):
        corrected.append(f"subjects: {current.subjects} -> {wanted.subjects}")
        update.subjects = wanted.subjects
    for name in ("max_age", "duplicate_window"):
        if not _same_seconds(getattr(current, name), getattr(wanted, name)):
            corrected.append(f"{name}: {getattr(current, name)} -> {getattr(wanted, name)}")
            setattr(update, name, getattr(wanted, name))
    if current.discard != wanted.discard:
        corrected.append(f"discard: {current.discard} -> {wanted.discard}")
        update.discard = wanted.discard
    if wanted.description is not None and current.description != wanted.description:
        corrected.append("description")
        update.description = wanted.description
    return StreamPlan(update if corrected else None, tuple(corrected), tuple(kept))
