"""Terms: the window in which a replica may act, and the guard every effect passes first.

A leader (a Lease holder, or the tracker replica that owns a record) keeps its right to act only
as long as its last successful renewal is younger than the lease. A replica frozen past that
(SIGSTOP, a long GC pause, a partitioned node) wakes up believing it still leads: its asyncio
tasks resume exactly where they stopped, some of them one line before an API write. The standby
has meanwhile taken over, so that write would be a stale effect (DESIGN §5, Fencing).

:class:`Term` measures the window on the **monotonic** clock, which keeps running while a
process is stopped, from the moment the renewal request was *sent* (not answered): the holder
can only be sure of its claim from that instant, as client-go's renew deadline assumes. A margin
is kept below the lease duration, since a standby judges expiry on its own clock. Every effect
calls :meth:`Term.check` immediately before it goes out; after a freeze the check fails, the
effect is dropped with :class:`Fenced`, and the replica demotes itself.

What remains is the instant between the check and the bytes leaving the socket: a freeze that
lands exactly there lets one in-flight write out when the process wakes. Kubernetes has no
cross-object precondition to close it server-side; the writes that matter carry their own
(resourceVersion on status patches, UID preconditions on deletes), so such a write is rejected
by the API server rather than applied to the new attempt.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


class Fenced(RuntimeError):
    """An effect was refused because this replica's term has ended (or never began)."""


@dataclass
class Term:
    """One replica's right to act, renewed by its election loop."""

    name: str
    """What the term is for (a Lease name, ``tracker-owner``), for messages."""
    duration: float
    """Seconds a renewal keeps the term valid (the lease duration)."""
    margin: float = 0.0
    """Seconds kept below ``duration`` to absorb clock skew with the standby
    (default 0; services use a fraction of the lease)."""
    clock: Callable[[], float] = field(default=time.monotonic)
    number: int = 0
    """How many times this replica began a term (0: never led)."""
    _valid_until: float = float("-inf")

    def began(self, *, sent_at: float) -> None:
        """A renewal (or acquisition) sent at monotonic ``sent_at`` succeeded."""
        if not self.valid():
            self.number += 1
        self._valid_until = sent_at + self.duration - self.margin

    def ended(self) -> None:
        """Leadership given up or lost: nothing may act under this term any more."""
        self._valid_until = float("-inf")

    def valid(self) -> bool:
        return self.clock() < self._valid_until

    def remaining(self) -> float:
        return max(0.0, self._valid_until - self.clock())

    def check(self, effect: str = "effect") -> None:
        """Raise :class:`Fenced` unless the term is still valid right now."""
        if not self.valid():
            raise Fenced(f"{effect} refused: {self.name} term {self.number} is not held")
