"""Ending background tasks without swallowing the caller's own cancellation.

``task.cancel(); with suppress(CancelledError): await task`` cannot tell the task's
cancellation from the caller's: if the caller is cancelled while it waits (a supervisor
stopping the loop that is stopping one of its children), the suppress swallows *that*
cancellation and the caller runs on — a loop that was meant to end keeps going, and whoever
awaits it waits forever. The watcher hung that way after losing its lease while its
wrapped-kinds loop was stopping an informer (chaos seed 115: no event published until the
process was killed). :func:`cancel_and_wait` waits with :func:`asyncio.wait`, which raises in
the caller only when the caller itself is cancelled.

On Python 3.11 :func:`asyncio.wait_for` (and nats-py's ``next_msg``, built on it) drops a
cancellation that arrives in the turn its inner await completes: it returns the result, and a
``while True`` loop around it runs on, cancelled in name only. ``Task.cancelling()`` still
counts the request; :func:`raise_if_cancelling` at the top of such a loop ends it (Ctrl-C
during ``clearance demo`` hung once this way, a cycle event arriving with the cancel).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

log = logging.getLogger(__name__)


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


async def wait_set(event: asyncio.Event, *, timeout: float) -> bool:
    """Wait until ``event`` is set or ``timeout`` seconds pass; whether it was set.

    ``asyncio.timeout``, not ``wait_for``: on 3.11 ``wait_for`` can drop a cancellation that
    comes as the event fires, and a loop around it would outlive its owner's stop."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(timeout):
            await event.wait()
    return event.is_set()


async def wait_any(*events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set (the caller asks which); the waiters are ended
    before it returns, also when the caller is cancelled."""
    waiters = [asyncio.create_task(event.wait()) for event in events]
    try:
        await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    finally:
        await cancel_and_wait(*waiters)


def raise_if_cancelling() -> None:
    """Raise the :class:`asyncio.CancelledError` a wait swallowed: the current task has a
    cancellation request pending (``Task.cancelling()``) that no ``await`` has delivered."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class TaskCrashed(RuntimeError):
    """A service's long-lived background task ended with an error (its exit code is 1)."""


class CrashWatch:
    """A process's long-lived background tasks, and whether one of them ended with an error.

    One rule for every service: a heartbeat, scan, watch, campaign or consumer loop that dies
    of an exception is a defect, and a process that keeps running without it answers its
    health checks while doing nothing (the dispatcher's workers once died this way and held
    the lease for ever). :meth:`watch` logs such an end once, with its traceback, and sets
    :attr:`crashed`; the service waits on it beside its stop signal and exits with code 1,
    so that Kubernetes restarts it. A task that is cancelled, or returns, is no crash."""

    def __init__(self) -> None:
        self.crashed = asyncio.Event()
        self.names: list[str] = []
        """The tasks that crashed, in order."""

    def watch(self, task: asyncio.Task[Any]) -> asyncio.Task[Any]:
        task.add_done_callback(self._ended)
        return task

    def _ended(self, task: asyncio.Task[Any]) -> None:
        if task.cancelled() or task.exception() is None:
            return
        log.error(
            "background task crashed", exc_info=task.exception(), extra={"task": task.get_name()}
        )
        self.names.append(task.get_name())
        self.crashed.set()
