"""Triage: which reconciles of an AppWrapper are *first looks*, served by their own lane.

A first look is cheap and is what a user waits for right after ``kubectl apply``: refusing an
invalid spec (Failed, naming the field), queueing a new AppWrapper (Queued, and refusing an
unserved kind), or looking again at a refused one whose spec changed. Each costs one status
write and at most one Event. Everything else — above all a dispatch, which costs about two
API requests per generic item — is not, so a burst of large dispatches cannot hold a refusal
back (issue 13). :class:`~clearance_dispatcher.workqueue.WorkQueue` puts a first look in its
urgent lane; the dispatcher's intake workers serve that lane alone.

Pure: decides on the cached entry only.
"""

from __future__ import annotations

from clearance_dispatcher.appwrapper import InvalidAppWrapper
from clearance_dispatcher.state import Entry


def first_look(entry: Entry) -> bool:
    """Whether the next reconcile of ``entry`` is a first look (see the module)."""
    if (entry.raw.get("metadata") or {}).get("deletionTimestamp"):
        return False
    phase = entry.observed.clearance.phase
    if phase is None or phase == "Invalid":
        return True
    return phase == "Queued" and isinstance(entry.parsed, InvalidAppWrapper)
