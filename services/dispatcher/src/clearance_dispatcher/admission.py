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
from dataclasses import dataclass
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


@dataclass(slots=True)
class Survey:
    """What one pass over the cached AppWrappers finds: the candidates, the capacity held
    by admitted and dispatched ones, and how many are in each phase (for the gauges)."""

    candidates: list[queueing.Candidate]
    reservations: list[dict[str, int]]
    phases: dict[str, int]


class Admission:
    """The queue scan of one dispatcher."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def survey(self) -> Survey:
        """One pass over every cached AppWrapper (a scan over 20,000 queued ones must stay
        well under 100 ms: each entry is read once, its parsed status from its cache)."""
        state = self.rt.state
        settings = self.rt.settings
        now = self.rt.now()
        cands: list[queueing.Candidate] = []
        held: list[dict[str, int]] = []
        phases: dict[str, int] = {}
        for key, entry in state.appwrappers.items():
            cl = entry.observed.clearance
            phase = cl.phase
            name: str = phase or "New"
            phases[name] = phases.get(name, 0) + 1
            local = entry.local
            if local.admitted:
                if entry.last_valid is not None:
                    held.append(dict(entry.last_valid.requests))
                continue
            if phase in ("Dispatching", "Dispatched"):
                if entry.last_valid is not None:
                    created = state.created_requests(key, cl.attempt)
                    held.append(capacity.reservation(entry.last_valid.requests, created))
                continue
            spec = entry.parsed
            # New AppWrappers compete too, so the order does not depend on which status
            # write finished first; an admitted new one is queued, then dispatched.
            if phase not in ("Queued", None) or not isinstance(spec, AppWrapperSpec):
                continue
            if cl.cleared_at is not None and pause_remaining(cl, spec, settings, now) > 0:
                continue
            cands.append(entry.candidate(key, spec))
        return Survey(cands, held, phases)

    def reservations(self) -> list[dict[str, int]]:
        """Capacity held by admitted AppWrappers and by dispatched ones whose pods do not all
        exist yet."""
        return self.survey().reservations

    def candidates(self) -> list[queueing.Candidate]:
        return self.survey().candidates

    def admits(self, key: tuple[str, str], spec: AppWrapperSpec) -> bool:
        """Whether ``key``, if it were queued now, would be admitted by a scan (same order,
        same capacity rule). Pure: marks nothing; used to dispatch right on ``cleared``."""
        survey = self.survey()
        cands = [c for c in survey.candidates if c.key != key]
        cands.append(queueing.Candidate(key, spec.priority, spec.creation, spec.requests))
        return any(c.key == key for c in self.plan(cands, survey.reservations).admit)

    def plan(
        self, cands: list[queueing.Candidate], reservations: list[dict[str, int]] | None = None
    ) -> queueing.Plan:
        """The queue order and capacity rule over ``cands``, against the free capacity now."""
        rt = self.rt
        free = capacity.free_capacity(
            rt.state.nodes.values(),
            rt.state.pods.values(),
            self.reservations() if reservations is None else reservations,
            requests_of=rt.state.requests_of,
        )
        return queueing.plan(cands, free, policy=rt.settings.head_of_line)

    def scan(self) -> None:
        """Admit what fits, in queue order; the workers do the dispatching."""
        rt = self.rt
        started = time.perf_counter()
        survey = self.survey()
        cands = survey.candidates
        rt.metrics.queue_length.set(len(cands))
        for phase in ("New", *STATE_OF_PHASE):
            rt.metrics.appwrappers.labels(phase).set(survey.phases.get(phase, 0))
        if not cands:
            return
        plan = self.plan(cands, survey.reservations)
        appwrappers = rt.state.appwrappers
        for cand in plan.admit:
            local = appwrappers[cand.key].local
            local.admitted = True
            local.waiting = None
            rt.queue.add(cand.key)
        for key, why in plan.waiting.items():
            local = appwrappers[key].local
            if local.waiting != why:
                local.waiting = why
                rt.queue.add(key)
        rt.metrics.capacity_check.observe(time.perf_counter() - started)
