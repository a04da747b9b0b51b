"""The one ``eventually`` of the test suite: poll a check until it holds, or fail saying what
(and :func:`blocking_until`, its synchronous twin).

A check may be a plain function or a coroutine function; the first truthy value it returns is
returned, so a test can wait for and use a value in one step (``pod = await eventually(...)``).
Deadlines are the caller's (short, from the test's own timings); the default is generous, since a
default only matters for a test that is about to fail anyway.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")


async def eventually(
    check: Callable[[], Awaitable[T] | T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """Call ``check`` every ``interval`` seconds until it returns something truthy and return
    it; raise :class:`AssertionError` naming ``what`` and the last value after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        last = await result if inspect.isawaitable(result) else result
        if last:
            return last  # type: ignore[return-value]
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")
        await asyncio.sleep(interval)


def blocking_until(
    check: Callable[[], T],
    *,
    timeout: float = 10.0,
    interval: float = 0.05,
    what: str = "condition",
) -> T:
    """:func:`eventually` for synchronous tests (kubectl, subprocess CLIs): blocks the thread."""
    deadline = time.monotonic() + timeout
    while True:
        last = check()
        if last:
            return last
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} not reached within {timeout}s (last: {last!r})")
        time.sleep(interval)


__all__ = ["blocking_until", "eventually"]
