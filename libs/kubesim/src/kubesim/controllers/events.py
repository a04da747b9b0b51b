"""core/v1 Events for what the controllers do, written like client-go's legacy recorder.

`kubectl describe pod` in a real cluster shows `Scheduled`, `Pulled`, `Created`, `Started`,
`Killing`, `TaintManagerEviction`, `NodeNotReady`…; tools (and Clearance) read them, so the
simulator records the same reasons. Repeats of the same (object, reason, message, source) are
aggregated into one Event whose `count` and `lastTimestamp` are patched, as client-go does.
Recording never blocks a controller: events go through a bounded queue and are dropped when it
is full (the real recorder drops too).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from kubesim.client import EVENTS, ApiError, KubeClient
from kubesim.controllers.objects import Obj, format_time

__all__ = ["EventRecorder", "build_event", "involved_object"]

log = logging.getLogger(__name__)


def involved_object(obj: Mapping[str, Any], *, field_path: str | None = None) -> Obj:
    """An ObjectReference to `obj` (kind, namespace, name, uid, apiVersion, resourceVersion)."""
    meta = obj.get("metadata") or {}
    ref: Obj = {
        "kind": obj.get("kind", ""),
        "name": meta.get("name", ""),
        "uid": meta.get("uid", ""),
        "apiVersion": obj.get("apiVersion", ""),
        "resourceVersion": meta.get("resourceVersion", ""),
    }
    if meta.get("namespace"):
        ref["namespace"] = meta["namespace"]
    if field_path:
        ref["fieldPath"] = field_path
    return ref


def build_event(
    obj: Mapping[str, Any],
    *,
    event_type: str,
    reason: str,
    message: str,
    component: str,
    host: str | None,
    now: float,
    field_path: str | None = None,
) -> Obj:
    """A new Event object, named `<object>.<hex nanoseconds>` like client-go names them."""
    ref = involved_object(obj, field_path=field_path)
    namespace = ref.get("namespace") or "default"
    source: Obj = {"component": component}
    if host:
        source["host"] = host
    stamp = format_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{ref['name']}.{int(now * 1e9):x}", "namespace": namespace},
        "involvedObject": ref,
        "reason": reason,
        "message": message,
        "type": event_type,
        "source": source,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "eventTime": None,
        "reportingComponent": component,
        "reportingInstance": host or "",
    }


class EventRecorder:
    """Queue Events for one component (e.g. `default-scheduler`, `kubelet` on a host)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        max_queue: int = 10_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.client = client
        self.clock = clock
        self._queue: asyncio.Queue[Obj] = asyncio.Queue(max_queue)
        # aggregation key -> (namespace, event name, count)
        self._seen: dict[tuple[str, ...], tuple[str, str, int]] = {}
        self.dropped = 0
        self._max_series = 4096
        self._last_nanos = 0

    def record(
        self,
        obj: Mapping[str, Any],
        *,
        reason: str,
        message: str,
        component: str,
        event_type: str = "Normal",
        host: str | None = None,
        field_path: str | None = None,
    ) -> None:
        event = build_event(
            obj,
            event_type=event_type,
            reason=reason,
            message=message,
            component=component,
            host=host,
            now=self.clock(),
            field_path=field_path,
        )
        # client-go names events `<object>.<UnixNano hex>`; keep the nanoseconds strictly
        # increasing so two events recorded within one clock tick do not collide (409).
        nanos = max(int(self.clock() * 1e9), self._last_nanos + 1)
        self._last_nanos = nanos
        event["metadata"]["name"] = f"{event['involvedObject']['name']}.{nanos:x}"
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    async def run(self) -> None:
        while True:
            event = await self._queue.get()
            try:
                await self._write(event)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # events are best effort, like the real recorder
                log.debug("event write failed: %r", exc)
            finally:
                self._queue.task_done()

    async def flush(self, timeout: float = 5.0) -> None:
        """Wait until the queue is empty (tests)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._queue.join()

    async def _write(self, event: Obj) -> None:
        ref = event["involvedObject"]
        key = (
            str(ref.get("uid")),
            str(ref.get("kind")),
            str(ref.get("name")),
            str(ref.get("fieldPath", "")),
            event["type"],
            event["reason"],
            event["message"],
            event["source"]["component"],
            event["source"].get("host", ""),
        )
        namespace = event["metadata"]["namespace"]
        seen = self._seen.get(key)
        if seen is not None:
            ns, name, count = seen
            try:
                await self.client.patch(
                    EVENTS.path(namespace=ns, name=name),
                    {"count": count + 1, "lastTimestamp": event["lastTimestamp"]},
                    patch_type="merge",
                )
                self._seen[key] = (ns, name, count + 1)
                return
            except ApiError as exc:
                if not exc.not_found:
                    raise
                # The event expired or was deleted: start a new series.
        created = await self.client.create(EVENTS.path(namespace=namespace), event)
        self._seen[key] = (namespace, str(created.get("metadata", {}).get("name")), 1)
        if len(self._seen) > self._max_series:  # forget the oldest series (client-go: LRU 4096)
            del self._seen[next(iter(self._seen))]
