"""What every part of one active dispatcher shares: clients, state, the work queue, the writer.

:class:`Runtime` is built once per leader term by :class:`~clearance_dispatcher.controller.
Dispatcher` and handed to intake, admission, the effects and the handlers; it owns no decision.
Its :meth:`Runtime.write` is the only way a transition reaches the API (one guarded patch per
transition, the cache updated from the answer), :meth:`Runtime.publish` the only way an event
reaches NATS, and :meth:`Runtime.crash_point` the test-only fault injection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from nats.js import JetStreamContext
from opentelemetry.context import Context
from opentelemetry.trace import Tracer

from clearance import bus
from clearance.bus import BusMetrics
from clearance.discovery import Discovery
from clearance.events import AppWrapperRef, Event
from clearance.kube import Kube, Resource
from clearance.recording import record_appwrapper_event
from clearance_dispatcher import triage
from clearance_dispatcher.metrics import DispatcherMetrics
from clearance_dispatcher.settings import DispatcherSettings
from clearance_dispatcher.state import ClusterState, Entry, Key
from clearance_dispatcher.status import (
    AppWrapperGone,
    Patch,
    PrunedWrite,
    StatusConflict,
    Transition,
    update_status,
)
from clearance_dispatcher.storage import Bookkeeping, StorageKind
from clearance_dispatcher.workqueue import WorkQueue

log = logging.getLogger(__name__)

COMPONENT: Final = "clearance-dispatcher"
FIELDS_PRUNED: Final = "FieldsPruned"
"""Condition type and Event reason: the API server dropped fields the dispatcher wrote."""
PRUNED_FIX: Final = (
    "the installed AppWrapper CRD does not keep them; install Clearance's CRD "
    "(kubectl apply -k deploy/crd) or set CLEARANCE_BOOKKEEPING=auto or annotations"
)


class Abort(Exception):
    """Stop this reconcile; the key was already re-queued (or the AppWrapper is gone)."""


class Runtime:
    """Clients, caches and queues of one active dispatcher replica."""

    def __init__(
        self,
        settings: DispatcherSettings,
        *,
        kube: Kube,
        js: JetStreamContext,
        tracer: Tracer,
        metrics: DispatcherMetrics,
        bus_metrics: BusMetrics | None = None,
        clock: Callable[[], datetime] | None = None,
        storage: Bookkeeping | None = None,
    ) -> None:
        self.settings = settings
        self.kube = kube
        self.tracer = tracer
        self.metrics = metrics
        self.events = bus.EventPublisher(
            js, tracer=tracer, metrics=bus_metrics, fence=lambda: kube.fence
        )
        """Where this replica's events leave, fenced like its API writes (``kube.fence``)."""
        self.clock = clock or (lambda: datetime.now(UTC))
        initial: StorageKind = "annotations" if settings.bookkeeping == "annotations" else "status"
        self.storage = storage or Bookkeeping(initial)
        """Where the bookkeeping is kept (auto mode: switched by the CRD watch)."""
        group, version = settings.appwrapper_group, settings.appwrapper_version
        self.aw_resource = Resource(group, version, "appwrappers", "AppWrapper")
        self.aw_api_version = f"{group}/{version}"
        self.state = ClusterState(storage=self.storage)
        self.queue: WorkQueue[Key] = WorkQueue(urgent=self._first_look, soon=self._dispatching)
        self.discovery = Discovery(kube, ttl=settings.discovery_ttl)
        self.synced = asyncio.Event()
        self.scan_wake = asyncio.Event()
        self.on_gone: Callable[[str, str, str | None], None] = lambda ns, name, uid: None
        """Set by intake: what to do when a write finds the AppWrapper gone."""
        self._tasks: set[asyncio.Task[Any]] = set()
        self._pruned_logged: set[str] = set()

    def _first_look(self, key: Key) -> bool:
        """The work queue's lane rule: first looks go to the urgent lane (triage)."""
        entry = self.state.appwrappers.get(key)
        return entry is not None and triage.first_look(entry)

    def _dispatching(self, key: Key) -> bool:
        """The work queue's middle lane: dispatches (triage)."""
        entry = self.state.appwrappers.get(key)
        return entry is not None and triage.dispatching(entry)

    def now(self) -> datetime:
        return self.clock()

    def request_scan(self) -> None:
        self.scan_wake.set()

    def serves(self, namespace: str) -> bool:
        return not self.settings.namespaces or namespace in self.settings.namespaces

    def crash_point(self, point: str) -> None:
        """Test fault injection: die like ``kill -9`` at ``point`` (see settings)."""
        if self.settings.test_crash_at == point:
            log.warning("crash point reached; killing this process", extra={"point": point})
            for handler in logging.getLogger().handlers:
                handler.flush()
            os.kill(os.getpid(), signal.SIGKILL)

    def spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def cancel_tasks(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    def next_backoff(self, entry: Entry) -> float:
        """The delay before reconciling ``entry`` again after a failure (grows per retry)."""
        entry.local.retries += 1
        delay = self.settings.dispatch_backoff * 2.0 ** min(entry.local.retries - 1, 30)
        return float(min(delay, self.settings.dispatch_backoff_max))

    # -- identities -------------------------------------------------------------------------

    @staticmethod
    def ref(entry: Entry) -> AppWrapperRef:
        meta = entry.raw["metadata"]
        return AppWrapperRef(namespace=meta["namespace"], name=meta["name"], uid=meta["uid"])

    # -- I/O --------------------------------------------------------------------------------

    async def publish(self, event: Event, parent: Context | None = None) -> None:
        await self.events.publish(event, parent=parent)

    async def warn(
        self, entry: Entry, reason: str, message: str, *, key: str, type_: Any = "Warning"
    ) -> None:
        """A Kubernetes Event on the AppWrapper (``key`` deduplicates it)."""
        await record_appwrapper_event(
            self.kube,
            self.ref(entry),
            api_version=self.aw_api_version,
            component=COMPONENT,
            reason=reason,
            message=message,
            type_=type_,
            key=key,
        )

    async def write(self, key: Key, transition: Transition) -> dict[str, Any] | None:
        """Apply one transition to the AppWrapper's status (None: it did not apply).

        Raises :class:`Abort` when the AppWrapper is gone or keeps conflicting (re-queued)."""
        entry = self.state.appwrappers.get(key)
        if entry is None:
            raise Abort()

        async def remember(updated: dict[str, Any]) -> None:
            self.state.apply_appwrapper(updated)

        try:
            return await update_status(
                self.kube,
                self.aw_resource,
                entry.raw,
                transition,
                storage=self.storage,
                tries=self.settings.status_retries,
                on_written=remember,
                between=lambda cl: self.crash_point(f"committed.{cl.phase if cl else None}"),
            )
        except AppWrapperGone:
            meta = entry.raw["metadata"]
            self.on_gone(meta["namespace"], meta["name"], entry.uid)
            raise Abort() from None
        except StatusConflict:
            self.metrics.status_conflicts.inc()
            self.queue.add_after(key, 0.5)
            raise Abort() from None
        except PrunedWrite as exc:
            await self._pruned(key, exc.fields)
            raise Abort() from None

    async def _pruned(self, key: Key, fields: list[str]) -> None:
        """A write lost fields to the schema: never a silent stall, never a hot loop.

        Bookkeeping lost in auto mode: switch to the annotation and reconcile again (once per
        switch). Otherwise the AppWrapper gets the ``FieldsPruned`` condition and a Warning
        Event, the process logs it once per set of fields, and the key is *not* re-queued:
        the next change of the AppWrapper (or of the CRD) tries again."""
        lost = ", ".join(sorted(set(fields)))
        if any(f.startswith("status.clearance") for f in fields) and (
            self.settings.bookkeeping == "auto" and self.storage.use("annotations")
        ):
            log.warning(
                "the API server pruned status.clearance; bookkeeping now kept in the annotation",
                extra={"aw": f"{key[0]}/{key[1]}", "pruned": lost},
            )
            for other in list(self.state.appwrappers):
                self.queue.add(other)
            return
        self.storage.annotations.learn_pruned(
            {f.removeprefix("status.").split(".")[0] for f in fields if f.count(".") == 1}
        )
        message = f"the API server dropped {lost} from the dispatcher's status write: {PRUNED_FIX}"
        if lost not in self._pruned_logged:
            self._pruned_logged.add(lost)
            log.error(message, extra={"aw": f"{key[0]}/{key[1]}", "pruned": lost})
        entry = self.state.appwrappers.get(key)
        if entry is None:
            return
        now = self.now()
        condition = {FIELDS_PRUNED: (True, "PrunedBySchema", message)}
        try:
            await update_status(
                self.kube,
                self.aw_resource,
                entry.raw,
                lambda obs: Patch(at=now, conditions=condition),
                storage=self.storage,
                tries=self.settings.status_retries,
                on_written=self._remember,
            )
        except PrunedWrite:
            pass  # the condition itself is kept (conditions are MCAD's); nothing else to say
        except (AppWrapperGone, StatusConflict) as exc:
            log.info("FieldsPruned condition not written", extra={"error": str(exc)})
        await self.warn(entry, FIELDS_PRUNED, message, key=f"{entry.uid}:pruned:{lost}")

    async def _remember(self, updated: dict[str, Any]) -> None:
        self.state.apply_appwrapper(updated)
