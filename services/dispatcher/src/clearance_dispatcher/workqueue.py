"""A keyed work queue (client-go style): one key is never processed twice at once.

Adding a key that is already queued is a no-op; adding a key that is being processed marks it
dirty so it is processed once more afterwards (no change is lost, none is handled in parallel).
``add_after`` keeps only the earliest pending timer per key.

Two lanes: a key the ``urgent`` predicate picks (asked at every add) goes to the urgent lane,
which every worker serves first and which :meth:`WorkQueue.get` with ``urgent_only`` serves
alone. The dispatcher's first looks (refusing an invalid spec, queueing a new AppWrapper) go
there, so they never wait behind dispatches of large AppWrappers (issue 13: a burst of 20
generated AppWrappers left every invalid one without a condition for 16 s). A key already
queued in the normal lane moves to the urgent one when it becomes urgent.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class WorkQueue(Generic[K]):
    def __init__(self, *, urgent: Callable[[K], bool] | None = None) -> None:
        self._urgent_of = urgent or (lambda key: False)
        self._urgent: deque[K] = deque()
        self._normal: deque[K] = deque()
        self._queued: dict[K, bool] = {}
        """Queued keys → in the urgent lane."""
        self._processing: set[K] = set()
        self._dirty: set[K] = set()
        self._timers: dict[K, asyncio.TimerHandle] = {}
        self._waiters: deque[tuple[bool, asyncio.Future[None]]] = deque()
        """Blocked :meth:`get` calls: (urgent only, their wake-up)."""

    def __len__(self) -> int:
        return len(self._queued)

    def add(self, key: K) -> None:
        if key in self._processing:
            self._dirty.add(key)
            return
        urgent = self._urgent_of(key)
        lane = self._queued.get(key)
        if lane is not None:
            if urgent and not lane:  # promote
                self._normal.remove(key)
                self._urgent.append(key)
                self._queued[key] = True
                self._wake(urgent=True)
            return
        self._queued[key] = urgent
        (self._urgent if urgent else self._normal).append(key)
        self._wake(urgent=urgent)

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
        if self._urgent:
            self._wake(urgent=True)
        elif self._normal:
            self._wake(urgent=False)

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        when = loop.time() + delay
        timer = self._timers.get(key)
        if timer is not None and not timer.cancelled() and timer.when() <= when:
            return
        if timer is not None:
            timer.cancel()
        self._timers[key] = loop.call_at(when, self._fire, key)

    def _fire(self, key: K) -> None:
        self._timers.pop(key, None)
        self.add(key)

    def _pop(self, *, urgent_only: bool) -> K | None:
        if self._urgent:
            return self._urgent.popleft()
        if not urgent_only and self._normal:
            return self._normal.popleft()
        return None

    async def get(self, *, urgent_only: bool = False) -> K:
        """The next key (urgent lane first); ``urgent_only``: from the urgent lane alone."""
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
            timer.cancel()

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
