"""Ending background tasks without swallowing the caller's own cancellation.

``task.cancel(); with suppress(CancelledError): await task`` cannot tell the task's
cancellation from the caller's: if the caller is cancelled while it waits (a supervisor
stopping the loop that is stopping one of its children), the suppress swallows *that*
cancellation and the caller runs on — a loop that was meant to end keeps going, and whoever
awaits it waits forever. The watcher hung that way after losing its lease while its
wrapped-kinds loop was stopping an informer (chaos seed 115: no event published until the
process was killed). :func:`cancel_and_wait` waits with :func:`asyncio.wait`, which raises in
the caller only when the caller itself is cancelled.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def cancel_and_wait(*tasks: asyncio.Future[Any]) -> None:
    """Cancel ``tasks`` and wait until every one has ended. Their cancellation and their
    failures are consumed (a failure is reported where the task is watched, e.g. by a done
    callback); the caller's own cancellation is not."""
    for task in tasks:
        task.cancel()
    if not tasks:
        return
    await asyncio.wait(tasks)
    for task in tasks:
        if not task.cancelled():
            task.exception()  # retrieved: no "exception was never retrieved" at collection
