"""Triage: which reconciles of an AppWrapper are *first looks* or *dispatches*, each served by
its own lane of the work queue (first looks, then dispatches, then the rest).

A first look is cheap and is what a user waits for right after ``kubectl apply``: refusing an
invalid spec (Failed, naming the field), queueing a new AppWrapper (Queued, and refusing an
unserved kind), or looking again at a refused one whose spec changed. Each costs one status
write and at most one Event. Everything else — above all a dispatch, which costs about two
API requests per generic item — is not, so a burst of large dispatches cannot hold a refusal
back (issue 13). :class:`~clearance_dispatcher.workqueue.WorkQueue` puts a first look in its
urgent lane; the dispatcher's intake workers serve that lane alone. A dispatch goes to the
middle lane (:func:`dispatching`).

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


def dispatching(entry: Entry) -> bool:
    """Whether the next reconcile of ``entry`` creates its pods: an admitted AppWrapper, or one
    in ``Dispatching`` (above all a gang whose teardown was just confirmed). The work queue
    serves these before teardowns and monitoring: after a rack loss hundreds of teardowns are
    queued at once, and a confirmed gang must not wait behind all of them while its capacity
    idles (issue 16; docs/DECISIONS.md)."""
    if (entry.raw.get("metadata") or {}).get("deletionTimestamp"):
        return False
    phase = entry.observed.clearance.phase
    return phase == "Dispatching" or (phase in (None, "Queued") and entry.local.admitted)
