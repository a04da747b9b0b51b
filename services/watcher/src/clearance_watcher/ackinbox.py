"""PubAcks of pipelined JetStream publishes, on one reply subscription.

nats-py's ``JetStreamContext.publish_async`` does the same with a random token, a future per
message and a JSON model of every ack; the watcher publishes tens of thousands of events per
second, so :class:`AckInbox` keeps the per-message cost to a counter token and one callback:
each send gets the reply subject ``<inbox>.<n>``, and the stream's answer on it calls the
callback given with the send - ``(duplicate, None)`` when the message is stored (``duplicate``:
the stream already held its Msg-Id), ``(False, error)`` when the stream refused it (no stream:
503). A send whose answer never comes is :meth:`AckInbox.forget`-ten by its owner, which
decides what to do (the publisher sends it again with the same Msg-Id).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from typing import Any

import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api

OnAck = Callable[[bool, BaseException | None], None]
"""Called once with (duplicate, None) or (False, the stream's error)."""


class AckInbox:
    """One reply subscription for every pipelined publish of one connection."""

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.prefix = ""
        self._waiting: dict[str, OnAck] = {}
        self._next = 0
        self._sub: Any = None

    def __len__(self) -> int:
        return len(self._waiting)

    async def send(
        self, subject: str, data: bytes, *, headers: dict[str, str], on_ack: OnAck
    ) -> str:
        """Publish with a reply subject of this inbox; returns the send's token."""
        if self._sub is None:
            self.prefix = self.nc.new_inbox() + "."
            self._sub = await self.nc.subscribe(self.prefix + "*", cb=self._on_reply)
        self._next += 1
        token = str(self._next)
        self._waiting[token] = on_ack
        try:
            await self.nc.publish(subject, data, reply=self.prefix + token, headers=headers)
        except BaseException:
            del self._waiting[token]
            raise
        return token

    def forget(self, token: str) -> None:
        """Stop waiting for ``token``'s answer (if it still comes, it is ignored)."""
        self._waiting.pop(token, None)

    async def close(self) -> None:
        """Drop the reply subscription and every wait (a new session makes its own)."""
        sub, self._sub = self._sub, None
        self._waiting.clear()
        if sub is not None:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _on_reply(self, msg: Msg) -> None:
        on_ack = self._waiting.pop(msg.subject[len(self.prefix) :], None)
        if on_ack is None:
            return
        if msg.headers and msg.headers.get(api.Header.STATUS) == "503":
            on_ack(False, nats.js.errors.NoStreamResponseError())
            return
        data = msg.data
        if b'"error"' in data:
            error = json.loads(data).get("error") or {}
            on_ack(False, nats.js.errors.APIError.from_error(error))
            return
        # nats-server writes '"duplicate": true' (with a space); accept both spellings.
        on_ack(b'"duplicate":' in data and b"true" in data.split(b'"duplicate":')[1], None)
