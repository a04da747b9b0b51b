"""A keyed work queue (client-go style): one key is never processed twice at once.

Adding a key that is already queued is a no-op; adding a key that is being processed marks it
dirty so it is processed once more afterwards (no change is lost, none is handled in parallel).
``add_after`` keeps only the earliest pending timer per key.

Three lanes, served in order. A key the ``urgent`` predicate picks (asked at every add) goes to
the urgent lane, which every worker serves first and which :meth:`WorkQueue.get` with
``urgent_only`` serves alone. The dispatcher's first looks (refusing an invalid spec, queueing a
new AppWrapper) go there, so they never wait behind dispatches of large AppWrappers (issue 13: a
burst of 20 generated AppWrappers left every invalid one without a condition for 16 s). A key
the ``soon`` predicate picks goes to the middle lane, served before the normal one: the
dispatcher's dispatches, so a gang whose teardown is confirmed is not redispatched only after
every teardown a rack loss queued meanwhile (issue 16). A key already queued moves to a more
urgent lane when it becomes more urgent; it never moves back.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

URGENT, SOON, NORMAL = 0, 1, 2
"""The lanes, by index: served in this order."""


class WorkQueue(Generic[K]):
    def __init__(
        self,
        *,
        urgent: Callable[[K], bool] | None = None,
        soon: Callable[[K], bool] | None = None,
    ) -> None:
        self._urgent_of = urgent or (lambda key: False)
        self._soon_of = soon or (lambda key: False)
        self._lanes: tuple[deque[K], deque[K], deque[K]] = (deque(), deque(), deque())
        """Urgent, soon, normal."""
        self._queued: dict[K, int] = {}
        """Queued keys → the index of their lane."""
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._timers: dict[K, tuple[float, asyncio.Handle]] = {}
        """Keys added later → (loop time due, the timer). The time is kept beside the handle:
        uvloop's ``call_at`` for a moment already past returns a plain Handle, without
        ``when()``."""
        self._waiters: deque[tuple[bool, asyncio.Future[None]]] = deque()
        """Blocked :meth:`get` calls: (urgent only, their wake-up)."""

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: K) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        lane = self._lane_of(key)
        queued = self._queued.get(key)
        if queued is not None:
            if lane < queued:  # promote
                self._lanes[queued].remove(key)
                self._lanes[lane].append(key)
                self._queued[key] = lane
                self._wake(urgent=lane == URGENT)
            return
        self._queued[key] = lane
        self._lanes[lane].append(key)
        self._wake(urgent=lane == URGENT)

    def _lane_of(self, key: K) -> int:
        if self._urgent_of(key):
            return URGENT
        return SOON if self._soon_of(key) else NORMAL

    def _wake(self, *, urgent: bool) -> None:
        """Wake one blocked getter able to take a key of this lane (urgent-only ones first
        for an urgent key, so the general workers stay free for the rest)."""
        chosen = None
        for waiter in self._waiters:
            only, future = waiter
            if future.done() or (only and not urgent):
                continue
            if chosen is None or (urgent and only and not chosen[0]):
                chosen = waiter
            if urgent == only:
                break
        if chosen is not None:
            self._waiters.remove(chosen)
            chosen[1].set_result(None)

    def _pass_on(self) -> None:
        """A woken getter went away: wake another for what is still queued."""
        if self._lanes[URGENT]:
            self._wake(urgent=True)
        elif self._queued:
            self._wake(urgent=False)

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer[1].cancelled() and timer[0] <= when:
            return
        if timer is not None:
            timer[1].cancel()
        self._timers[key] = (when, loop.call_at(when, self._fire, key))

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def _pop(self, *, urgent_only: bool) -> K | None:
        for lane in self._lanes[: 1 if urgent_only else None]:
            if lane:
                return lane.popleft()
        return None

    async def get(self, *, urgent_only: bool = False) -> K:
        """The next key (urgent lane first, then soon, then normal); ``urgent_only``: from the
        urgent lane alone."""
        while (key := self._pop(urgent_only=urgent_only)) is None:
            waiter = (urgent_only, asyncio.get_running_loop().create_future())
            self._waiters.append(waiter)
            try:
                await waiter[1]
            except asyncio.CancelledError:
                if waiter[1].done() and not waiter[1].cancelled():  # woken, then cancelled
                    self._pass_on()
                raise
            finally:
                if waiter in self._waiters:
                    self._waiters.remove(waiter)
        del self._queued[key]
        self._processing.add(key)
        return key

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            self._dirty.discard(key)
            self.add(key)

    def forget(self, key: K) -> None:
        timer = self._timers.pop(key, None)
        if timer is not None:
            timer[1].cancel()

    def close(self) -> None:
        for _, timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
