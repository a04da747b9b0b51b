"""The resume position of one informer, and the headers that carry it on every event.

A successor reads, from the stream itself, where each informer's watch can resume without
losing a MODIFIED (:mod:`clearance_watcher.seeding`): every event says which informer
published it (:data:`WATCH_KEY_HEADER`) and up to which resourceVersion every event of that
informer was acknowledged (:data:`WATCH_RESUME_HEADER`).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Final

from clearance_watcher.ackinbox import HEADER_START, header_line

WATCH_KEY_HEADER: Final = "Clearance-Watch-Key"
"""Which informer published the event (resource and namespace scope)."""
WATCH_RESUME_HEADER: Final = "Clearance-Watch-Resume"
"""resourceVersion up to which every event of that informer was acknowledged."""


class Progress:
    """The acknowledged prefix of one informer's event sequence.

    Entries are appended in the informer's order; ``rv`` is None for events that do not
    move the watch position (relist results, tombstones), and a marker with a done
    future moves it without an event (end of a LIST, a bookmark).
    """

    def __init__(self, key: str, resume: str | None = None) -> None:
        self.key = key
        self._committed = resume
        self._entries: deque[tuple[str | None, asyncio.Future[None]]] = deque()
        self._key_lines = HEADER_START + header_line(WATCH_KEY_HEADER, key)
        self._lines_for: str | None = None
        self._lines = self._key_lines

    @property
    def committed(self) -> str | None:
        entries = self._entries
        # A cancelled publish (abandoned at shutdown) was not acknowledged: it stops the prefix.
        while entries and entries[0][1].done() and not entries[0][1].cancelled():
            rv, _ = entries.popleft()
            if rv is not None:
                self._committed = rv
        return self._committed

    def track(self, rv: str | None, done: asyncio.Future[None]) -> None:
        self._entries.append((rv, done))

    def mark(self, rv: str) -> None:
        """Move the position to ``rv`` once everything tracked so far is acknowledged."""
        if not rv:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        if self._entries:
            self._entries.append((rv, done))
        else:
            self._committed = rv

    def headers(self) -> dict[str, str]:
        committed = self.committed
        out = {WATCH_KEY_HEADER: self.key}
        if committed:
            out[WATCH_RESUME_HEADER] = committed
        return out

    def header_lines(self) -> bytes:
        """:data:`HEADER_START` and :meth:`headers` encoded (for :class:`AckInbox`).

        Re-encoded only when the position moved since the last call: a burst of sends
        between two acks shares one encoding."""
        committed = self.committed
        if committed != self._lines_for:
            self._lines_for = committed
            self._lines = self._key_lines
            if committed:
                self._lines += header_line(WATCH_RESUME_HEADER, committed)
        return self._lines
