"""Keeping a message alive while its handler runs: ``in_progress`` every interval, on timers.

One timer per message rather than a task: almost every handler finishes long before the
first beat is due, and a timer costs a heap entry to set and to cancel, where a task costs
event-loop turns to start, cancel and reap — for every message of a burst.
"""

from __future__ import annotations

import asyncio
import logging

from nats.aio.msg import Msg

log = logging.getLogger(__name__)


class KeepAlive:
    """Sends ``in_progress`` for `msg` every `interval` seconds until :meth:`cancel`."""

    __slots__ = ("_consumer", "_handle", "_interval", "_loop", "_msg", "_sending")

    def __init__(self, msg: Msg, *, interval: float, consumer: str) -> None:
        self._msg = msg
        self._interval = interval
        self._consumer = consumer
        self._loop = asyncio.get_running_loop()
        self._sending: asyncio.Task[None] | None = None
        self._handle: asyncio.TimerHandle | None = self._loop.call_later(interval, self._beat)

    def _beat(self) -> None:
        if self._sending is None or self._sending.done():
            self._sending = self._loop.create_task(self._send())
        self._handle = self._loop.call_later(self._interval, self._beat)

    async def _send(self) -> None:
        try:
            await self._msg.in_progress()
        except Exception as exc:
            log.debug("in_progress failed", extra={"consumer": self._consumer, "error": repr(exc)})

    def cancel(self) -> None:
        """No more beats (one being sent is abandoned: the message is settled by now)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if self._sending is not None and not self._sending.done():
            self._sending.cancel()
