"""Bounded shutdown: SIGTERM asks a service to stop, and it exits within its grace, always.

Each service stops in order on SIGTERM (consumers, handlers, NATS drain, API client), each
step with its own timeout. With NATS and the API already gone those steps can add up, or hang
in a library that retries a connection (issue 13: the tracker outlived 3 s). :func:`install`
sets the service's stop event on SIGTERM/SIGINT and arms a watchdog thread: if the process has
not exited ``grace`` seconds later, it logs what it abandons (where each unfinished task waits)
and exits at once. A thread, not a task: it fires even when the event loop is blocked or busy in
a ``finally`` block.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from pathlib import Path

log = logging.getLogger(__name__)


MAX_WAITS_LOGGED = 20
"""Most pending tasks named in the line logged when the grace runs out."""


def pending_waits(loop: asyncio.AbstractEventLoop) -> list[str]:
    """Where each unfinished task of ``loop`` waits: ``name: function (file:line)`` of its
    innermost frame. Read from the watchdog thread while the loop may run: a racing change
    to the task set only shortens the answer."""
    waits: list[str] = []
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError:  # the set changed while it was copied
        return waits
    for task in tasks[:MAX_WAITS_LOGGED]:
        try:
            frames = task.get_stack()
        except Exception:
            continue
        if frames:
            code = frames[-1].f_code
            where = f"{code.co_name} ({Path(code.co_filename).name}:{frames[-1].f_lineno})"
        else:
            where = "not started"
        waits.append(f"{task.get_name()}: {where}")
    return sorted(waits)


def _arm(grace: float, code: int, loop: asyncio.AbstractEventLoop) -> None:
    def expire() -> None:
        log.warning(
            "shutdown grace exceeded; exiting now",
            extra={"grace_seconds": grace, "waiting_in": pending_waits(loop)},
        )
        for handler in logging.getLogger().handlers:
            handler.flush()
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(grace, expire)
    timer.daemon = True
    timer.start()


def install(stop: asyncio.Event, *, grace: float, code: int = 0) -> None:
    """On SIGTERM/SIGINT set ``stop`` and exit with ``code`` after ``grace`` seconds at most."""
    loop = asyncio.get_running_loop()
    armed = threading.Event()

    def on_signal() -> None:
        stop.set()
        if not armed.is_set():
            armed.set()
            _arm(grace, code, loop)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
