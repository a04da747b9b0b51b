"""Admission: which queued AppWrappers may be dispatched now — capacity and the pause rule.

The pause rule (no dispatch before ``clearedAt + pauseTimeInSeconds``) is written once, in
:func:`pause_remaining`, and read both by the queue scan (a paused AppWrapper is no candidate)
and by the worker (which re-queues the key for when the pause ends). Capacity is aggregate, as
in MCAD v1: :mod:`clearance_dispatcher.capacity` computes what is free after every pod and every
reservation, :mod:`clearance_dispatcher.queueing` orders the candidates and plans who fits. The
scan only marks entries admitted (or waiting, with the reason) and queues them; the workers
dispatch. :meth:`Admission.scan` is synchronous and cheap, so a handler may call it directly.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from clearance.bookkeeping import ClearanceStatus
from clearance_dispatcher import capacity, queueing
from clearance_dispatcher.appwrapper import AppWrapperSpec
from clearance_dispatcher.policy import pause_seconds
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.settings import DispatcherSettings
from clearance_dispatcher.status import STATE_OF_PHASE


def pause_remaining(
    clearance: ClearanceStatus, spec: AppWrapperSpec, settings: DispatcherSettings, now: datetime
) -> float:
    """Seconds until the pause after the last ``cleared`` ends (≤ 0: not paused)."""
    if clearance.cleared_at is None:
        return 0.0
    ready_at = clearance.cleared_at + timedelta(seconds=pause_seconds(spec, settings))
    return (ready_at - now).total_seconds()


class Admission:
    """The queue scan of one dispatcher."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def reservations(self) -> list[dict[str, int]]:
        """Capacity held by admitted AppWrappers and by dispatched ones whose pods do not all
        exist yet."""
        out = []
        state = self.rt.state
        for key, entry in state.appwrappers.items():
            spec = entry.last_valid
            if spec is None:
                continue
            cl = entry.observed.clearance
            if entry.local.admitted:
                out.append(dict(spec.requests))
            elif cl.phase in ("Dispatching", "Dispatched"):
                created = state.created_requests(key, cl.attempt)
                out.append(capacity.reservation(spec.requests, created))
        return out

    def candidates(self) -> list[queueing.Candidate]:
        now = self.rt.now()
        settings = self.rt.settings
        out = []
        for key, entry in self.rt.state.appwrappers.items():
            spec = entry.parsed
            if entry.local.admitted or not isinstance(spec, AppWrapperSpec):
                continue
            cl = entry.observed.clearance
            # New AppWrappers compete too, so the order does not depend on which status
            # write finished first; an admitted new one is queued, then dispatched.
            if cl.phase not in ("Queued", None):
                continue
            if pause_remaining(cl, spec, settings, now) > 0:
                continue
            out.append(queueing.Candidate(key, spec.priority, spec.creation, spec.requests))
        return out

    def admits(self, key: tuple[str, str], spec: AppWrapperSpec) -> bool:
        """Whether ``key``, if it were queued now, would be admitted by a scan (same order,
        same capacity rule). Pure: marks nothing; used to dispatch right on ``cleared``."""
        cands = [c for c in self.candidates() if c.key != key]
        cands.append(queueing.Candidate(key, spec.priority, spec.creation, spec.requests))
        return any(c.key == key for c in self.plan(cands).admit)

    def plan(self, cands: list[queueing.Candidate]) -> queueing.Plan:
        """The queue order and capacity rule over ``cands``, against the free capacity now."""
        rt = self.rt
        free = capacity.free_capacity(
            rt.state.nodes.values(),
            rt.state.pods.values(),
            self.reservations(),
            requests_of=rt.state.requests_of,
        )
        return queueing.plan(cands, free, policy=rt.settings.head_of_line)

    def scan(self) -> None:
        """Admit what fits, in queue order; the workers do the dispatching."""
        rt = self.rt
        started = time.perf_counter()
        cands = self.candidates()
        rt.metrics.queue_length.set(len(cands))
        phases: dict[str, int] = {}
        for entry in rt.state.appwrappers.values():
            name: str = entry.observed.clearance.phase or "New"
            phases[name] = phases.get(name, 0) + 1
        for phase in ("New", *STATE_OF_PHASE):
            rt.metrics.appwrappers.labels(phase).set(phases.get(phase, 0))
        if not cands:
            return
        plan = self.plan(cands)
        for cand in plan.admit:
            local = rt.state.appwrappers[cand.key].local
            local.admitted = True
            local.waiting = None
            rt.queue.add(cand.key)
        for key, why in plan.waiting.items():
            local = rt.state.appwrappers[key].local
            if local.waiting != why:
                local.waiting = why
                rt.queue.add(key)
        rt.metrics.capacity_check.observe(time.perf_counter() - started)
