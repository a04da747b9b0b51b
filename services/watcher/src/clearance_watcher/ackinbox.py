"""PubAcks of pipelined JetStream publishes, on one reply subscription.

nats-py's ``JetStreamContext.publish_async`` does the same with a random token, a future per
message and a JSON model of every ack; the watcher publishes tens of thousands of events per
second, so :class:`AckInbox` keeps the per-message cost to a counter token and one callback:
each send gets the reply subject ``<inbox>.<n>``, and the stream's answer on it calls the
callback given with the send - ``(duplicate, None)`` when the message is stored (``duplicate``:
the stream already held its Msg-Id), ``(False, error)`` when the stream refused it (no stream:
503). A send whose answer never comes is :meth:`AckInbox.forget`-ten by its owner, which
decides what to do (the publisher sends it again with the same Msg-Id).

**The frame.** ``Client.publish`` re-encodes and re-validates a headers dict on every call
(about 4.5 µs of the watcher's ~40 µs per event for three headers). :meth:`AckInbox.send`
takes the header block already encoded (:func:`header_line`: the same bytes nats-py writes,
values trimmed and CR/LF turned into spaces), builds the ``HPUB`` frame in one step and
hands it to the client's own output buffer (``_send_command``/``_flush_pending``, nats-py
2.16's internals, pinned by ``uv.lock``): the same checks as ``Client.publish`` (closed,
draining, reconnect buffer full, max payload, bad subject), the same buffering while the
client reconnects, the same coalesced writes by its flusher task.
tests/watcher/test_watcher_units.py compares the frame with nats-py's own byte for byte.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from typing import Any, Final

import nats.errors
import nats.js.errors
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.js import api

OnAck = Callable[[bool, BaseException | None], None]
"""Called once with (duplicate, None) or (False, the stream's error)."""

HEADER_START: Final = b"NATS/1.0\r\n"
"""First line of every header block."""
HEADER_END: Final = b"\r\n"
"""The empty line that closes a header block."""

_HEADER_NAME: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_NEWLINES: Final = str.maketrans({"\r": " ", "\n": " "})
_BAD_SUBJECT: Final = re.compile(r"[ \t\r\n]")


def header_value(value: str) -> bytes:
    """``value`` as nats-py writes a header value: trimmed, CR and LF replaced by spaces
    (so a hostile uid or resourceVersion cannot end the line and inject protocol)."""
    value = value.strip()
    if "\r" in value or "\n" in value:
        value = value.translate(_NEWLINES)
    return value.encode()


def header_line(name: str, value: str) -> bytes:
    """One ``Name: value`` header line with its CRLF."""
    if not _HEADER_NAME.fullmatch(name):
        raise nats.errors.BadHeaderError(name)
    return b"%b: %b\r\n" % (name.encode(), header_value(value))


class AckInbox:
    """One reply subscription for every pipelined publish of one connection."""

    def __init__(self, nc: NatsClient) -> None:
        self.nc = nc
        self.prefix = ""
        self._reply = b""
        self._waiting: dict[str, OnAck] = {}
        self._next = 0
        self._sub: Any = None

    def __len__(self) -> int:
        return len(self._waiting)

    async def send(self, subject: str, data: bytes, *, header: bytes, on_ack: OnAck) -> str:
        """Publish with a reply subject of this inbox; returns the send's token.

        ``header`` is the complete header block: :data:`HEADER_START`, the
        :func:`header_line` lines, :data:`HEADER_END`.
        """
        if self._sub is None:
            self.prefix = self.nc.new_inbox() + "."
            self._reply = self.prefix.encode()
            self._sub = await self.nc.subscribe(self.prefix + "*", cb=self._on_reply)
        nc = self.nc
        # Client.publish's checks, in its order.
        if _BAD_SUBJECT.search(subject) or not subject:
            raise nats.errors.BadSubjectError
        if nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if nc.is_draining_pubs:
            raise nats.errors.ConnectionDrainingError
        size = len(data)
        if not nc.is_connected and (
            nc._max_pending_size <= 0 or size + nc._pending_data_size > nc._max_pending_size
        ):
            raise nats.errors.OutboundBufferLimitError
        if size > nc._max_payload:
            raise nats.errors.MaxPayloadError
        self._next += 1
        token = str(self._next)
        head = len(header)
        frame = b"HPUB %b %b%b %d %d\r\n%b%b\r\n" % (
            subject.encode(),
            self._reply,
            token.encode(),
            head,
            head + size,
            header,
            data,
        )
        self._waiting[token] = on_ack
        try:
            nc.stats["out_msgs"] += 1
            nc.stats["out_bytes"] += size
            await nc._send_command(frame)
            # Wake the client's flusher once per burst, as Client.publish does: the frames
            # queued before it runs go out in one write.
            flush_queue = nc._flush_queue
            if flush_queue is not None and flush_queue.empty():
                await nc._flush_pending()
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
