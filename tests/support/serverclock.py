"""Latencies on the servers' clocks: kubesim's write history and JetStream store times.

A benchmark must not time a cycle with its own watch: an observer that lags stamps the
deletion late and can even make a latency negative. Every figure here is built from what
the servers recorded instead:

* **API commits** - kubesim's write history (``GET /kubesim/v1/history``, one entry per
  committed change with its resourceVersion and commit time, see ``kubesim.audit``);
* **JetStream store times** - the timestamp nats-server stamps on each stored message.

Both are this host's wall clock, read by the server at the moment it commits / stores.

**Non-negative by construction.** An interval is only measured between two events that are
causally ordered, and that order is checked before the subtraction:

* two API commits are ordered by resourceVersion (etcd's revision order); a pair whose
  later event has the lower resourceVersion is not a latency, it is an *order violation*
  (for "old object removed → next attempt created" that is a safety violation);
* a commit and a JetStream store time come from two processes: a pair whose times run
  backwards is counted as a *clock-order error* and kept out of the figures.

:func:`interval` is the only place where a latency is computed, and it returns ``None``
rather than a negative number; the callers count the ``None`` s and the report prints
those counts next to the figures (expected: 0).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from clearance import labels

API_COMMIT = "kubesim write history: commit time (API server clock)"
JETSTREAM_STORED = "JetStream store time (nats-server clock)"
CLIENT_RECEIPT = "benchmark client: time the answer arrived (this host's clock)"


@dataclass(frozen=True, slots=True)
class Commit:
    """One entry of kubesim's write history, reduced to what latencies need."""

    rv: int
    time: float
    type: str
    kind: str
    name: str
    appwrapper: str
    attempt: int | None
    user_agent: str = ""

    @classmethod
    def from_json(cls, entry: Mapping[str, Any]) -> Commit:
        entry_labels: dict[str, str] = dict(entry.get("labels") or {})
        return cls(
            rv=int(entry["rv"]),
            time=float(entry["time"]),
            type=str(entry["type"]),
            kind=str(entry.get("kind", "")),
            name=str(entry.get("name", "")),
            appwrapper=entry_labels.get(labels.MCAD_APPWRAPPER, ""),
            attempt=labels.attempt_of(entry_labels),
            user_agent=str(entry.get("userAgent", "")),
        )


def interval(earlier: float, later: float) -> float | None:
    """``later - earlier`` in ms, or ``None`` when the two times run backwards."""
    if later < earlier:
        return None
    return (later - earlier) * 1000.0


def commit_interval(earlier: Commit, later: Commit) -> float | None:
    """ms from one API commit to a later one; ``None`` unless ``later`` is later in
    resourceVersion order *and* on the clock."""
    if later.rv <= earlier.rv:
        return None
    return interval(earlier.time, later.time)


@dataclass
class CycleCommits:
    """Per (AppWrapper, attempt): the removal of its last object and its first creation."""

    last_removed: dict[tuple[str, int], Commit] = field(default_factory=dict)
    first_created: dict[tuple[str, int], Commit] = field(default_factory=dict)
    writes_by: dict[str, list[Commit]] = field(default_factory=dict)
    """AppWrapper name → commits of the AppWrapper object itself, in rv order."""


def cycle_commits(
    history: Iterable[Commit], *, appwrapper_kind: str = "AppWrapper"
) -> CycleCommits:
    """Fold a write history (any order) into :class:`CycleCommits`.

    Objects without an attempt label are not Clearance's and are ignored. "Last removed" is
    the DELETED with the highest resourceVersion among an attempt's objects; "first created"
    the ADDED with the lowest.
    """
    out = CycleCommits()
    for c in sorted(history, key=lambda c: c.rv):
        if c.kind == appwrapper_kind:
            out.writes_by.setdefault(c.name, []).append(c)
            continue
        if c.attempt is None or not c.appwrapper:
            continue
        key = (c.appwrapper, c.attempt)
        if c.type == "DELETED":
            out.last_removed[key] = c
        elif c.type == "ADDED":
            out.first_created.setdefault(key, c)
    return out


@dataclass
class Intervals:
    """Latencies (ms, all ≥ 0) and the pairs that could not be one, with the reason."""

    values: list[float] = field(default_factory=list)
    out_of_order: list[str] = field(default_factory=list)

    def add(self, value: float | None, *, what: str) -> None:
        if value is None:
            self.out_of_order.append(what)
        else:
            self.values.append(value)


def removed_to_created(commits: CycleCommits) -> Intervals:
    """Last object of attempt N removed → first object of attempt N+1 created (both commits).

    An attempt N+1 created at or before the removal (in resourceVersion order) is an
    out-of-order pair: a safety violation, reported as such and never as a latency.
    """
    out = Intervals()
    for (aw, attempt), removed in sorted(commits.last_removed.items()):
        created = commits.first_created.get((aw, attempt + 1))
        if created is None:
            continue
        out.add(
            commit_interval(removed, created),
            what=f"{aw} attempt {attempt + 1} created at rv {created.rv}, "
            f"attempt {attempt} last removed at rv {removed.rv}",
        )
    return out


def removed_to_stored(commits: CycleCommits, stored: Mapping[tuple[str, int], float]) -> Intervals:
    """Last object of attempt N removed (commit) → a JetStream message about N stored."""
    out = Intervals()
    for key, at in sorted(stored.items()):
        removed = commits.last_removed.get(key)
        if removed is None:
            continue
        out.add(interval(removed.time, at), what=f"{key[0]} attempt {key[1]}: stored first")
    return out


def stored_to_created(commits: CycleCommits, stored: Mapping[tuple[str, int], float]) -> Intervals:
    """A JetStream message about attempt N stored → first object of N+1 created (commit)."""
    out = Intervals()
    for (aw, attempt), at in sorted(stored.items()):
        created = commits.first_created.get((aw, attempt + 1))
        if created is None:
            continue
        out.add(interval(at, created.time), what=f"{aw} attempt {attempt + 1}: created first")
    return out


def writes_between(
    commits: CycleCommits, aw: str, *, after: Commit, before: Commit
) -> list[Commit]:
    """The commits of AppWrapper ``aw`` strictly between two other commits (rv order)."""
    return [c for c in commits.writes_by.get(aw, ()) if after.rv < c.rv < before.rv]
