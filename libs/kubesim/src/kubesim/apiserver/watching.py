"""Watch streams over HTTP: the initial events (or a sendInitialEvents replay), bookmarks,
the wait for a resourceVersion the store has not reached, and pumping store events to
the client as JSON lines until the timeout, a client hang-up or shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

from aiohttp import web

from kubesim import tables
from kubesim.apiserver.http import _encoder
from kubesim.apiserver.requests import RequestHandling
from kubesim.resources import ResourceType
from kubesim.selectors import SelectorError, parse_bool
from kubesim.statuses import ApiError, too_old_resource_version
from kubesim.store import Watcher, WatchEvent


class WatchStreams(RequestHandling):
    """Serves `?watch=true` requests from the store's fan-out."""

    # ---- watch ------------------------------------------------------------------------

    @staticmethod
    def _event_line(event_type: str, obj: dict[str, Any]) -> bytes:
        return _encoder.encode({"type": event_type, "object": obj}) + b"\n"

    async def _watch(
        self, request: web.Request, rt: ResourceType, namespace: str | None
    ) -> web.StreamResponse:
        q = request.query
        match = self.registry.matcher(rt, q.get("labelSelector", ""), q.get("fieldSelector", ""))
        try:
            bookmarks = bool(parse_bool(q.get("allowWatchBookmarks")))
            send_initial = parse_bool(q.get("sendInitialEvents"))
            timeout = float(q["timeoutSeconds"]) if q.get("timeoutSeconds") else self.watch_timeout
        except (ValueError, SelectorError) as exc:
            raise ApiError(400, "BadRequest", str(exc)) from exc
        if self._wants_table(request):
            include = q.get("includeObject", "Object")

            def present(rt: ResourceType, obj: dict[str, Any]) -> dict[str, Any]:
                meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
                return tables.table(rt, [obj], meta, include)
        else:
            present = self.registry.present
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        try:
            initial, watcher = self.registry.start_watch(
                rt, namespace, match, q.get("resourceVersion", ""), send_initial_events=send_initial
            )
        except ApiError as err:
            if err.code != 410:
                raise
            await resp.prepare(request)
            await resp.write(self._event_line("ERROR", err.status()))
            await resp.write_eof()
            return resp
        try:
            await resp.prepare(request)
            if initial:
                await resp.write(
                    b"".join(self._event_line(e.type, present(rt, e.obj)) for e in initial)
                )
            if send_initial and bookmarks:
                await resp.write(self._bookmark(rt, initial_done=True))
            await self._pump(
                resp, rt, watcher, timeout=timeout, bookmarks=bookmarks, present=present
            )
        except ConnectionResetError:
            # The client went away mid-stream: an ordinary end of a watch.
            return resp
        finally:
            self.store.remove_watcher(watcher)
        with contextlib.suppress(ConnectionResetError):
            await resp.write_eof()
        return resp

    def _bookmark(self, rt: ResourceType, *, initial_done: bool = False) -> bytes:
        meta: dict[str, Any] = {"resourceVersion": str(self.store.rev)}
        if initial_done:
            meta["annotations"] = {"k8s.io/initial-events-end": "true"}
        return self._event_line(
            "BOOKMARK", {"kind": rt.kind, "apiVersion": rt.api_version, "metadata": meta}
        )

    async def _pump(
        self,
        resp: web.StreamResponse,
        rt: ResourceType,
        watcher: Watcher,
        *,
        timeout: float,
        bookmarks: bool,
        present: Callable[[ResourceType, dict[str, Any]], dict[str, Any]],
    ) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + timeout
        pretimeout = deadline - 2.0

        def next_bookmark(now: float) -> float | None:
            if not bookmarks:
                return None
            at = now + self.bookmark_interval
            if pretimeout < at:
                at = pretimeout
            return at if at >= now else None

        bookmark_at = next_bookmark(start)
        # Encoded lines are shared between watchers only for the plain presentation.
        shareable = present == self.registry.present
        line = self._event_line
        while True:
            if watcher.queue:
                batch: list[WatchEvent] = [*watcher.queue]
                watcher.queue.clear()
                chunks: list[bytes] = []
                for e in batch:
                    if not shareable:
                        chunks.append(line(e.type, present(rt, e.obj)))
                        continue
                    if e.line is None or e.obj.get("apiVersion") != rt.api_version:
                        encoded = line(e.type, present(rt, e.obj))
                        if e.obj.get("apiVersion") == rt.api_version:
                            e.line = encoded
                        chunks.append(encoded)
                    else:
                        chunks.append(e.line)
                await resp.write(b"".join(chunks))
                continue
            if watcher.overflowed:
                err = too_old_resource_version(0, self.store.horizon + 1)
                err.message = (
                    "watch closed: the client is too slow to keep up with events; "
                    "too old resource version"
                )
                await resp.write(self._event_line("ERROR", err.status()))
                return
            if watcher.closed or self._stopping:
                return
            now = loop.time()
            if now >= deadline:
                return
            if bookmark_at is not None and now >= bookmark_at:
                await resp.write(self._bookmark(rt))
                bookmark_at = next_bookmark(loop.time())
                continue
            wake = deadline if bookmark_at is None else min(deadline, bookmark_at)
            watcher.wakeup.clear()
            if watcher.queue or watcher.closed or watcher.overflowed:
                continue
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(watcher.wakeup.wait(), timeout=max(wake - now, 0.0))
