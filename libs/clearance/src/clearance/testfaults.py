"""Deliberately broken builds, for proving that a checker can fail (tests only).

Every invariant check, fault harness and benchmark assertion of Clearance is shown once catching
a broken build. The breakages are named here and switched on by ``CLEARANCE_TEST_FAULT`` (a
comma-separated list of names); the variable is unset in every deployment, so each switch is off
by default and costs one set lookup where it sits.

* ``unfenced`` — leaders do not fence their API writes (``Kube.fence`` stays unset), and a leader
  woken past its term keeps acting for half a lease before it notices (a naive elector).
* ``cleared-early`` — the tracker clears a teardown with one object still open.
* ``drop-undecodable`` — the watcher skips an object that does not decode whole into its
  snapshot (publishes nothing for it), as it did before partial snapshots (issue 19).
* ``ignore-pruned`` — the dispatcher does not check what the API server kept of its status
  writes: a pruned ``status.clearance`` is a silent, hot requeue loop again (issue 17).
* ``lagging-status`` — with the bookkeeping in the annotation, the dispatcher decides from the
  ``/status`` subresource (not the committed mirror) and never repairs it (issue 17).
* ``explain-stale-diagnosis`` — ``clearance explain`` shows the tracker's first diagnosis of each
  blocking object (from its stuck alert) instead of diagnosing the fresh reads.
* ``r1-streams`` — the bus provisions every stream with one replica and corrects "drift" down
  to it, whatever was declared (the defect of issue 12: streams silently R1 on a cluster).

* ``unmannered`` — the Kubernetes client takes no token from its rate limit and sends a request
  answered 429 again at once, ignoring ``Retry-After`` (the API-manners checks of the rack-loss
  benchmark must catch it; issue 16).

* ``incarnation-blind`` — the dispatcher checks only its own pods before a dispatch and does not
  roll back an attempt's items when a later one meets a 409 (the pre-issue-13 behaviour).
* ``unbounded-spec`` — the dispatcher's spec validation skips every range check (durations,
  counts, priority), so out-of-range values reach the dispatch arithmetic as they did before
  issue 13; the fuzz judgement must name the AppWrappers this leaves unsettled.
* ``worker-crash`` — a dispatcher worker ends with an error at its first item (a defect in a
  background task, as uvloop's timer handles caused once): the leader must exit, not hold
  the lease while its cycles stall.
* ``heartbeat-crash`` — the tracker's heartbeat loop ends with an error after its first
  interval: the replica must exit (code 1), not stay up, healthy and without a heartbeat.
* ``campaign-crash`` — the watcher's leader-election campaign ends with an error a second
  after it first leads: the replica must exit (code 1), not publish on without a Lease.
"""

from __future__ import annotations

import os
from typing import Final, Literal

ENV: Final = "CLEARANCE_TEST_FAULT"
Fault = Literal[
    "unfenced",
    "cleared-early",
    "drop-undecodable",
    "explain-stale-diagnosis",
    "r1-streams",
    "ignore-pruned",
    "lagging-status",
    "incarnation-blind",
    "unmannered",
    "unbounded-spec",
    "worker-crash",
    "heartbeat-crash",
    "campaign-crash",
]


def active(fault: Fault) -> bool:
    """Whether the named breakage is switched on for this process."""
    return fault in {part.strip() for part in os.environ.get(ENV, "").split(",")}
