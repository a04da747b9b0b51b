"""The rack-loss judge (pure): latencies from the servers' clocks, safety, API manners.

Inputs are what the servers recorded, read after the run:

* kubesim's write history (:class:`tests.chaos.history.Write`): API commit time of every pod
  create and removal — the redispatch of attempt N+1 is the commit of its pods' ADDED;
* the ``CLEARANCE_CYCLE`` stream as stored (:class:`tests.chaos.history.Published`): the
  JetStream store time of each ``teardown.started`` (its force deadline is that time plus the
  AppWrapper's force-deletion seconds) and of each ``cleared``;
* kubesim's request log (``/kubesim/v1/requests``): start, end, code, ``Retry-After`` and a
  content digest of every request, by User-Agent (one agent per service process).

Checks (each a line in :attr:`RackVerdict.failures` when it fails):

* every torn-down AppWrapper has its attempt N+1 created, ``≤ redispatch_bound`` seconds after
  its force deadline (the last pod of N+1 committed — the whole gang back, the strict reading);
* no safety violation: S1 and S2 of the chaos judge (:mod:`tests.chaos.checker`) over the same
  history — nothing of attempt N+1 created while an object of attempt ≤ N existed, no
  ``cleared`` stored while one existed;
* every service stays within its client-side limit: no 1 s window holds more requests than a
  token bucket of ``qps``/``burst`` lets through (plus a small margin for network jitter);
* every ``429`` is answered by backing off: the same request (same agent and ``X-Request-Id``,
  which Clearance's client keeps across retries; else the same content digest) comes again no
  sooner than the ``Retry-After`` the server named.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tests.chaos.checker import check_s1, check_s2
from tests.chaos.history import Published, Write

from clearance import events

from .common import distribution

SERVICES = ("watcher", "tracker", "dispatcher")
JITTER_MARGIN = 0.05
"""Share of a window's allowance granted for network jitter (server-side start times)."""
RETRY_AFTER_SLACK = 0.02
"""Seconds a retry may come before ``Retry-After`` ends (the two clocks are one; rounding)."""


@dataclass(frozen=True, slots=True)
class Request:
    started: float
    ended: float
    code: int
    agent: str
    digest: str
    retry_after: int
    method: str = ""
    path: str = ""
    verb: str = ""
    request_id: str = ""

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> Request:
        return cls(
            started=float(entry["started"]),
            ended=float(entry["ended"]),
            code=int(entry["code"]),
            agent=str(entry.get("userAgent") or ""),
            digest=str(entry.get("digest") or ""),
            retry_after=int(entry.get("retryAfter") or 0),
            method=str(entry.get("method") or ""),
            path=str(entry.get("path") or ""),
            verb=str(entry.get("verb") or ""),
            request_id=str(entry.get("requestId") or ""),
        )


def service_of(agent: str) -> str | None:
    """``clearance-<service>/…`` → the service name."""
    for name in SERVICES:
        if agent.startswith(f"clearance-{name}/"):
            return name
    return None


@dataclass(frozen=True, slots=True)
class Limits:
    qps: float
    burst: int
    force_seconds: float
    redispatch_bound: float = 10.0


@dataclass
class RackVerdict:
    figures: dict[str, Any] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


def _cycle_times(cycle: Sequence[Published]) -> tuple[dict[tuple[str, int], float], ...]:
    started: dict[tuple[str, int], float] = {}
    cleared: dict[tuple[str, int], float] = {}
    forced: dict[tuple[str, int], float] = {}
    for p in cycle:
        e = p.event
        if isinstance(e, events.CycleTeardownStarted):
            # The deadline's origin: the dispatcher's teardown start, which the event carries
            # (the tracker counts from it); its store time comes after the deletes went out.
            started.setdefault((e.appwrapper.name, e.attempt), e.occurred_at.timestamp())
        elif isinstance(e, events.CycleCleared):
            cleared.setdefault((e.appwrapper.name, e.attempt), p.time)
        elif isinstance(e, events.CycleDeletionForced):
            forced.setdefault((e.appwrapper.name, e.attempt), p.time)
    return started, cleared, forced


def _creates(writes: Sequence[Write]) -> dict[tuple[str, int], list[float]]:
    out: dict[tuple[str, int], list[float]] = defaultdict(list)
    for w in writes:
        if w.kind == "Pod" and w.type == "ADDED" and w.appwrapper and w.attempt is not None:
            out[(w.appwrapper, w.attempt)].append(w.time)
    return out


def latencies(
    writes: Sequence[Write],
    cycle: Sequence[Published],
    limits: Limits,
    verdict: RackVerdict,
    *,
    since: float = 0.0,
) -> None:
    """Force deadline → cleared stored, → first and → last attempt-N+1 pod committed, for
    every teardown started at or after ``since`` (the loss)."""
    started, cleared, forced = _cycle_times(cycle)
    started = {key: at for key, at in started.items() if at >= since}
    creates = _creates(writes)
    to_cleared: list[float] = []
    to_first: list[float] = []
    to_last: list[float] = []
    held = 0
    missing: list[str] = []
    late: list[str] = []
    for (aw, attempt), at in sorted(started.items()):
        deadline = at + limits.force_seconds
        done = cleared.get((aw, attempt))
        if done is not None:
            to_cleared.append(done - deadline)
            held += done >= deadline
        created = creates.get((aw, attempt + 1))
        if not created:
            missing.append(f"{aw} attempt {attempt + 1}")
            continue
        to_first.append(min(created) - deadline)
        to_last.append(max(created) - deadline)
        if max(created) - deadline > limits.redispatch_bound:
            late.append(f"{aw} +{max(created) - deadline:.2f}s")
    verdict.figures.update(
        {
            "teardowns": len(started),
            "cleared": len(cleared),
            "forced": len(forced),
            "held_past_force_deadline": held,
            "force_deadline_to_cleared_s": distribution(to_cleared, digits=2),
            "force_deadline_to_first_redispatch_create_s": distribution(to_first, digits=2),
            "force_deadline_to_last_redispatch_create_s": distribution(to_last, digits=2),
            "last_cleared_after_first_deadline_s": _span(started, cleared, limits),
            "not_redispatched": missing[:20],
            "late": late[:20],
        }
    )
    if not started:
        verdict.failures.append("no teardown started: the rack loss hit no AppWrapper")
    if missing:
        verdict.failures.append(f"{len(missing)} AppWrappers never redispatched: {missing[:5]}")
    if late:
        verdict.failures.append(
            f"{len(late)} AppWrappers redispatched > {limits.redispatch_bound:g} s after their "
            f"force deadline: {late[:5]}"
        )


def _span(
    started: Mapping[tuple[str, int], float],
    cleared: Mapping[tuple[str, int], float],
    limits: Limits,
) -> float | None:
    if not started or not cleared:
        return None
    return round(max(cleared.values()) - (min(started.values()) + limits.force_seconds), 2)


def safety(writes: list[Write], cycle: list[Published], verdict: RackVerdict) -> None:
    found = [*check_s1(writes), *check_s2(writes, cycle)]
    verdict.figures["safety_violations"] = [str(v) for v in found[:20]]
    verdict.figures["safety_violation_count"] = len(found)
    if found:
        verdict.failures.append(f"{len(found)} safety violations, first: {found[0]}")


def peak_window(starts: Sequence[float], *, width: float = 1.0) -> int:
    """Most requests started within any ``width``-second window (``starts`` sorted)."""
    best = 0
    for i, at in enumerate(starts):
        j = bisect.bisect_left(starts, at + width, lo=i)
        best = max(best, j - i)
    return best


def manners(
    requests: Sequence[Request],
    limits: Limits,
    verdict: RackVerdict,
    *,
    window: tuple[float, float],
) -> None:
    """Request rates per service, rate-limit conformance, and backing off after each 429."""
    by_service: dict[str, list[Request]] = defaultdict(list)
    for r in requests:
        name = service_of(r.agent)
        if name is not None:
            by_service[name].append(r)
    begin, end = window
    seconds = max(end - begin, 1e-9)
    allowance = (limits.burst + limits.qps) * (1 + JITTER_MARGIN) + 2
    rates: dict[str, Any] = {}
    for name in SERVICES:
        mine = sorted(by_service.get(name, []), key=lambda r: r.started)
        starts = [r.started for r in mine]
        storm = [s for s in starts if begin <= s <= end]
        peak = peak_window(starts)
        throttled = [r for r in mine if r.code == 429]
        kinds: dict[str, int] = defaultdict(int)
        for r in mine:
            if begin <= r.started <= end:
                kinds[f"{r.verb} {_resource_of(r.path)}"] += 1
        rates[name] = {
            "requests_in_storm": len(storm),
            "mean_per_s": round(len(storm) / seconds, 1),
            "peak_per_s": peak,
            "peak_allowed_per_s": round(allowance, 1),
            "answered_429": len(throttled),
            "in_storm_by_verb": dict(sorted(kinds.items(), key=lambda kv: -kv[1])),
        }
        if peak > allowance:
            verdict.failures.append(
                f"{name}: {peak} requests in one second, above its limit "
                f"(qps {limits.qps:g}, burst {limits.burst}: at most {allowance:.0f})"
            )
        _backoff(name, mine, throttled, rates[name], verdict)
    verdict.figures["api_requests"] = rates
    verdict.figures["answered_429_total"] = sum(r["answered_429"] for r in rates.values())


def _resource_of(path: str) -> str:
    """``/api/v1/namespaces/default/pods/x/status`` → ``pods/status``."""
    parts = [p for p in path.split("/") if p]
    if "namespaces" in parts and len(parts) > parts.index("namespaces") + 2:
        parts = parts[parts.index("namespaces") + 2 :]
    elif parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    if len(parts) >= 3:
        return f"{parts[0]}/{parts[2]}"
    return parts[0] if parts else path


def breakdown(requests: Sequence[Request], window: tuple[float, float]) -> dict[str, Any]:
    """Per service and ``verb resource``: requests started in ``window`` and their mean
    server time (ms), busiest first — where a slow phase spent its API time."""
    begin, end = window
    out: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in requests:
        name = service_of(r.agent)
        if name is not None and begin <= r.started <= end:
            out[name][f"{r.verb} {_resource_of(r.path)}"].append(r.ended - r.started)
    return {
        name: {
            kind: {"count": len(times), "mean_ms": round(1000 * sum(times) / len(times), 1)}
            for kind, times in sorted(kinds.items(), key=lambda kv: -sum(kv[1]))
        }
        for name, kinds in out.items()
    }


def _identity(r: Request) -> tuple[str, str]:
    """One logical request: the client's request id (the same on each retry), else the digest
    of its content (then two identical requests of two tasks look like one retried)."""
    return (r.agent, f"id:{r.request_id}" if r.request_id else f"digest:{r.digest}")


def _backoff(
    name: str,
    mine: Sequence[Request],
    throttled: Sequence[Request],
    out: dict[str, Any],
    verdict: RackVerdict,
) -> None:
    by_key: dict[tuple[str, str], list[Request]] = defaultdict(list)
    for r in mine:
        by_key[_identity(r)].append(r)
    waits: list[float] = []
    early: list[str] = []
    unretried = 0
    for r in throttled:
        again = [x for x in by_key[_identity(r)] if x.started > r.ended]
        if not again:
            unretried += 1
            continue
        wait = again[0].started - r.ended
        waits.append(wait)
        if wait + RETRY_AFTER_SLACK < r.retry_after:
            early.append(f"{r.method} {r.path}: {wait:.3f}s < Retry-After {r.retry_after}s")
    out["retry_wait_s"] = distribution(waits, digits=3)
    out["retried_before_retry_after"] = len(early)
    out["not_retried"] = unretried
    if early:
        verdict.failures.append(
            f"{name}: {len(early)} of {len(throttled)} requests answered 429 sent again before "
            f"Retry-After: {early[:3]}"
        )


def judge(
    *,
    writes: list[Write],
    cycle: list[Published],
    requests: Sequence[Request],
    limits: Limits,
    window: tuple[float, float],
) -> RackVerdict:
    verdict = RackVerdict()
    latencies(writes, cycle, limits, verdict, since=window[0])
    safety(writes, cycle, verdict)
    manners(requests, limits, verdict, window=window)
    return verdict
