"""Catching up after a resumed watch: when has the watch delivered what the gap held?

A successor (restart or failover) resumes the watch from the position its predecessor
published up to, instead of relisting, so no intermediate MODIFIED is lost. It counts as
synced once the resumed watch delivered every change that happened since that position.
One consistent LIST, taken before the watch starts and never published, says which those
are: every listed object whose resourceVersion is past the position (at that version or
later), and a DELETED for every known object the LIST no longer has. A bookmark at or past
the LIST's own resourceVersion proves the replay complete even if some expected change was
superseded. Pure bookkeeping; :mod:`clearance_watcher.watching` does the I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from clearance.listwatch import Identity

DELETED = "DELETED"


def int_rv(rv: str) -> int | None:
    """A resourceVersion as a number, None when the server's is not numeric (opaque)."""
    try:
        return int(rv)
    except ValueError:
        return None


@dataclass
class CatchUp:
    """The changes a resumed watch still owes before the informer counts as synced."""

    expected: set[tuple[str, str]]
    """(uid, resourceVersion) of each change still due; (uid, ``DELETED``) for deletions."""
    list_rv: int
    deadline: float
    """Monotonic time after which the resume gives up (a relist settles what is missing)."""
    done: bool = field(default=False)

    @classmethod
    def plan(
        cls,
        *,
        start: int,
        listed: Iterable[Identity],
        list_rv: str,
        known: Iterable[str],
        deadline: float,
    ) -> CatchUp:
        """What resuming from ``start`` must deliver, given a LIST taken at ``list_rv``."""
        expected: set[tuple[str, str]] = set()
        uids: set[str] = set()
        for meta in listed:
            uids.add(meta.uid)
            rv = int_rv(meta.resourceVersion)
            if rv is not None and rv > start:
                expected.add((meta.uid, meta.resourceVersion))
        expected.update((uid, DELETED) for uid in known if uid not in uids)
        catch_up = cls(expected, int_rv(list_rv) or 2**63, deadline)
        catch_up.done = not expected
        return catch_up

    def saw(self, uid: str, rv: str, *, deleted: bool) -> bool:
        """Record one delivered change; True when that completed the catch-up."""
        self.expected.discard((uid, DELETED if deleted else rv))
        return self._settle()

    def bookmarked(self, rv: str) -> bool:
        """Record a bookmark; True when that completed the catch-up."""
        number = int_rv(rv)
        if number is not None and number >= self.list_rv:
            self.expected.clear()
        return self._settle()

    def overdue(self, now: float) -> bool:
        return not self.done and now > self.deadline

    def _settle(self) -> bool:
        if self.done or self.expected:
            return False
        self.done = True
        return True
