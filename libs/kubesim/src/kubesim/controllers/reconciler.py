"""The level-triggered loop every kubesim controller runs on.

Real controllers queue object keys; at simulator scale it is simpler and just as correct to
re-evaluate everything a controller owns whenever one of its informers reports a change, at a
requested deadline (a toleration expiring, a quarantine ending) or every `period`. Changes
arriving while a pass runs coalesce into one more pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

__all__ = ["Reconciler"]

log = logging.getLogger(__name__)


class Reconciler:
    """Subclasses implement `reconcile()`, returning the wall time of the next wanted pass."""

    name = "reconciler"

    def __init__(self, *, period: float | None = None, clock: Callable[[], float] = time.time):
        self.period = period
        self.clock = clock
        self._wake = asyncio.Event()
        self.passes = 0
        self.errors = 0

    def trigger(self, *_: object) -> None:
        """Ask for a pass soon (usable directly as an informer handler)."""
        self._wake.set()

    async def reconcile(self) -> float | None:
        raise NotImplementedError

    async def run(self) -> None:
        backoff = 0.05
        next_at: float | None = None
        while True:
            now = self.clock()
            deadlines = [d for d in (next_at, now + self.period if self.period else None) if d]
            timeout = max(0.0, min(deadlines) - now) if deadlines else None
            # asyncio.timeout, not wait_for: on 3.11 wait_for can swallow a cancellation that
            # races with the timeout, and the cluster could then never stop.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(timeout):
                    await self._wake.wait()
            self._wake.clear()
            try:
                next_at = await self.reconcile()
                self.passes += 1
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                # The API may be failing on purpose (fault injection): retry with backoff.
                self.errors += 1
                log.debug("%s pass failed: %r", self.name, exc)
                next_at = self.clock() + backoff
                backoff = min(backoff * 2, 2.0)
