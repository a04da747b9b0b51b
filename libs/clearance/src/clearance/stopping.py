"""Bounded shutdown: SIGTERM asks a service to stop, and it exits within its grace, always.

Each service stops in order on SIGTERM (consumers, handlers, NATS drain, API client), each
step with its own timeout. With NATS and the API already gone those steps can add up, or hang
in a library that retries a connection (issue 13: the tracker outlived 3 s). :func:`install`
sets the service's stop event on SIGTERM/SIGINT and arms a watchdog thread: if the process has
not exited ``grace`` seconds later, it logs what it abandons and exits at once. A thread, not a
task: it fires even when the event loop is blocked or busy in a ``finally`` block.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading

log = logging.getLogger(__name__)


def _arm(grace: float, code: int) -> None:
    def expire() -> None:
        log.warning("shutdown grace exceeded; exiting now", extra={"grace_seconds": grace})
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
            _arm(grace, code)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
