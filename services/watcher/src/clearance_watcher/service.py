"""The watcher process: leader election around one publishing session at a time.

A :class:`Session` is one leadership term: it reads what was published before from
CLEARANCE_KUBE (:mod:`clearance_watcher.seeding`), starts the informers (AppWrappers and
pods per namespace scope, nodes, wrapped kinds), and publishes until it is stopped. When
leadership is lost the session stops at once and its pending publishes are abandoned
(they are idempotent; the new leader resumes from the published position). On SIGTERM
the session stops reading, flushes what it accepted, and only then is the Lease released,
so the successor starts from a complete stream.

Readiness (``/readyz``): NATS connected, and either this replica is the standby (a healthy
hot standby is ready; ``clearance_watcher_leader`` says which one publishes) or the
leader's initial LISTs (or watch resumes) are all published.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import msgspec
from nats.aio.client import Client as NatsClient
from nats.js import JetStreamContext
from opentelemetry.trace import Tracer

from clearance import bus, labels, subjects, testfaults
from clearance.discovery import Discovery
from clearance.entrypoint import freeze_startup_heap
from clearance.events import AppWrapperObject
from clearance.kube import LEASES, NODES, PODS, Kube, KubeError, Resource
from clearance.leadership import LeaderElector, LeaseSpec, Step, decide
from clearance.tasks import CrashWatch, TaskCrashed, cancel_and_wait
from clearance_watcher.decoding import Codec, Snapshot
from clearance_watcher.kinds import KindInformers, Running
from clearance_watcher.metrics import WatcherMetrics
from clearance_watcher.publishing import Publisher
from clearance_watcher.seeding import Seed, read_seed
from clearance_watcher.settings import WatcherSettings
from clearance_watcher.watching import Informer, Known, Observer, Scope, WatcherTiming

log = logging.getLogger(__name__)


class _LeaseObject(msgspec.Struct):
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)


def appwrapper_resource(settings: WatcherSettings) -> Resource:
    return Resource(
        settings.appwrapper_group, settings.appwrapper_version, "appwrappers", "AppWrapper"
    )


@dataclass
class _Task:
    informer: Informer
    task: asyncio.Task[None]


@dataclass
class Session:
    """One leadership term: seed, informers, publisher."""

    settings: WatcherSettings
    kube: Kube
    js: JetStreamContext
    metrics: WatcherMetrics
    bus_metrics: bus.BusMetrics
    tracer: Tracer | None = None
    cycle_tracer: Tracer | None = None
    synced: asyncio.Event = field(default_factory=asyncio.Event)
    _tasks: list[_Task] = field(default_factory=list)
    _kinds_task: asyncio.Task[None] | None = None
    _kinds: KindInformers | None = None
    _item_seed: Seed = field(default_factory=Seed)
    _stopped: dict[str, tuple[dict[str, Known], str | None]] = field(default_factory=dict)
    """Last known state and position of informers stopped during this session."""
    publisher: Publisher | None = None

    @property
    def namespaces(self) -> tuple[str | None, ...]:
        return self.settings.namespaces or (None,)

    def _timing(self) -> WatcherTiming:
        s = self.settings
        return WatcherTiming(
            watch_timeout=s.watch_timeout,
            inactivity_timeout=s.inactivity_timeout,
            retry_delay=s.retry_delay,
            resync_interval=s.resync_interval,
        )

    def _start_informer(
        self,
        scope: Scope,
        codec: Codec,
        seed: Seed,
        *,
        observer: Observer | None = None,
        api_version: str | None = None,
        kind: str | None = None,
    ) -> Informer:
        assert self.publisher is not None
        saved = self._stopped.pop(scope.key, None)
        if saved is not None:
            # Restarted within this session: the seed is stale by now, its own last state
            # is not (resuming from the seed's position would republish old states).
            known, resume = saved
        else:
            known = seed.known_for(namespace=scope.namespace, api_version=api_version, kind=kind)
            resume = seed.resume.get(scope.key)
        informer = Informer(
            kube=self.kube,
            scope=scope,
            codec=codec,
            publisher=self.publisher,
            metrics=self.metrics,
            timing=self._timing(),
            known=known,
            resume=resume,
            observer=observer,
        )
        task = asyncio.create_task(informer.run(), name=f"informer:{scope.key}")
        task.add_done_callback(_crashed)
        self._tasks.append(_Task(informer, task))
        self.metrics.informers.labels(codec.kube_kind).inc()
        log.info(
            "informer started",
            extra={
                "informer": scope.key,
                "known": len(known),
                "resume_from": informer.resume,
            },
        )
        return informer

    async def _stop_informers(self, informers: list[Informer]) -> None:
        targets = [t for t in self._tasks if t.informer in informers]
        for t in targets:
            self._tasks.remove(t)
            self.metrics.informers.labels(t.informer.kind).dec()
        # A crash was already logged by _crashed. A caller cancelled meanwhile (the
        # wrapped-kinds loop, stopped by the session's end) stays cancelled.
        await cancel_and_wait(*(t.task for t in targets))
        for t in targets:
            self._stopped[t.informer.scope.key] = (
                dict(t.informer.known),
                t.informer.progress.committed,
            )

    async def run(self) -> None:
        """Seed, start every informer, set ``synced`` once all initial work is published."""
        s = self.settings
        seeds = {
            kind: await read_seed(self.js, kind, timeout=s.seed_timeout)
            for kind in subjects.KUBE_KINDS
        }
        log.info(
            "read the published state",
            extra={kind: len(seed.live) for kind, seed in seeds.items()}
            | {"resume_positions": sum(len(seed.resume) for seed in seeds.values())},
        )
        self.publisher = Publisher(
            self.js,
            max_in_flight=s.max_in_flight,
            publish_timeout=s.publish_timeout,
            metrics=self.metrics,
            bus_metrics=self.bus_metrics,
            tracer=self.tracer,
            cycle_tracer=self.cycle_tracer,
        )
        selector = labels.ANY_APPWRAPPER
        kinds = KindInformers(
            discovery=Discovery(self.kube, miss_retry=s.discovery_retry),
            start=self._start_kind,
            metrics=self.metrics,
            linger=s.kind_linger,
            retry=s.discovery_retry,
            sync_timeout=s.seed_timeout,
        )
        self._kinds = kinds
        self._item_seed = seeds["item"]
        for snapshot in seeds["appwrapper"].live:
            if s.namespaces and snapshot.metadata.namespace not in s.namespaces:
                continue
            if snapshot.api_version != appwrapper_resource(s).api_version:
                continue
            assert isinstance(snapshot, AppWrapperObject)
            if snapshot.metadata.uid in seeds["appwrapper"].problems:
                continue  # its spec was not published: its kinds come with its next LIST
            await kinds.observe(
                uid=snapshot.metadata.uid,
                namespace=snapshot.metadata.namespace,
                name=snapshot.metadata.name,
                snapshot=snapshot,
                raw=None,
                deleted=False,
            )
        kinds.pinned = {
            key
            for key in seeds["item"].item_kinds()
            if not s.namespaces
            or any(
                snap.metadata.namespace in s.namespaces
                for snap in seeds["item"].live
                if (snap.api_version, snap.kind) == key
            )
        }

        async def observe_appwrapper(
            uid: str,
            namespace: str | None,
            name: str,
            snapshot: Snapshot | None,
            raw: Any,
            deleted: bool,
        ) -> None:
            await kinds.observe(
                uid=uid,
                namespace=namespace,
                name=name,
                snapshot=snapshot if isinstance(snapshot, AppWrapperObject) else None,
                raw=raw,
                deleted=deleted,
            )

        aw_resource = appwrapper_resource(s)
        fixed: list[Informer] = []
        appwrappers: list[Informer] = []
        for namespace in self.namespaces:
            appwrappers.append(
                self._start_informer(
                    Scope(aw_resource, namespace),
                    Codec(aw_resource, "appwrapper"),
                    seeds["appwrapper"],
                    observer=observe_appwrapper,
                    # Only AppWrappers of the configured group/version: a switch to the
                    # legacy group must not turn every other AppWrapper into a tombstone.
                    api_version=aw_resource.api_version,
                )
            )
            fixed.append(
                self._start_informer(
                    Scope(PODS, namespace, selector), Codec(PODS, "pod"), seeds["pod"]
                )
            )
        fixed.append(self._start_informer(Scope(NODES), Codec(NODES, "node"), seeds["node"]))
        fixed.extend(appwrappers)
        await asyncio.gather(*(i.synced.wait() for i in appwrappers))
        await kinds.reconcile()
        self._kinds_task = asyncio.create_task(
            kinds.run(period=min(s.discovery_retry, max(1.0, s.kind_linger / 4))),
            name="wrapped-kinds",
        )
        self._kinds_task.add_done_callback(_crashed)
        await asyncio.gather(*(i.synced.wait() for i in fixed))
        await kinds.all_synced()
        self.synced.set()
        self.metrics.synced.set(1)
        freeze_startup_heap()
        log.info("initial state published; watching", extra={"informers": len(self._tasks)})
        await self._supervise()

    async def _supervise(self) -> None:
        """Run until cancelled; an informer or the wrapped-kinds loop that ended (a bug) fails
        the session (the next one starts them again)."""
        while True:
            for t in list(self._tasks):
                if t.task.done():
                    error = None if t.task.cancelled() else t.task.exception()
                    raise RuntimeError(f"informer {t.informer.scope.key} ended: {error!r}")
            kinds = self._kinds_task
            if kinds is not None and kinds.done():
                error = None if kinds.cancelled() else kinds.exception()
                raise RuntimeError(f"the wrapped-kinds loop ended: {error!r}")
            await asyncio.sleep(1.0)

    async def _start_kind(self, resource: Resource) -> Running:
        scopes = (
            [Scope(resource, ns, labels.ANY_APPWRAPPER) for ns in self.namespaces]
            if resource.namespaced
            else [Scope(resource, None, labels.ANY_APPWRAPPER)]
        )
        codec = Codec(resource, "item")
        started = [
            self._start_informer(
                scope,
                codec,
                self._item_seed,
                api_version=resource.api_version,
                kind=resource.kind,
            )
            for scope in scopes
        ]

        async def synced() -> None:
            await asyncio.gather(*(i.synced.wait() for i in started))

        async def stop() -> None:
            await self._stop_informers(started)

        return Running(
            known_count=lambda: sum(len(i.known) for i in started),
            synced=synced,
            is_synced=lambda: all(i.synced.is_set() for i in started),
            stop=stop,
        )

    async def stop(self, *, flush: bool, timeout: float) -> None:
        """Stop reading; with ``flush``, wait (≤ timeout) for accepted events to be acked."""
        if self._kinds_task is not None:
            await cancel_and_wait(self._kinds_task)
        await self._stop_informers([t.informer for t in self._tasks])
        self.metrics.synced.set(0)
        if self.publisher is None:
            return
        if flush:
            flushed = await self.publisher.flush(timeout=timeout)
            if not flushed:
                log.warning(
                    "publishes still pending at shutdown were abandoned; the next leader "
                    "republishes them from the last published position",
                    extra={"pending": self.publisher.in_flight},
                )
        await self.publisher.abort()


def _crashed(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error(
            "background task crashed", exc_info=task.exception(), extra={"task": task.get_name()}
        )


@dataclass
class Watcher:
    """Runs sessions while this replica leads (or always, without leader election)."""

    settings: WatcherSettings
    kube: Kube
    nc: NatsClient
    metrics: WatcherMetrics
    bus_metrics: bus.BusMetrics
    tracer: Tracer | None = None
    cycle_tracer: Tracer | None = None
    session: Session | None = None
    elector: LeaderElector | None = None

    async def ready(self) -> bool:
        """Leader: every initial LIST published. Standby: another replica holds the Lease."""
        elector = self.elector
        if elector is not None and not elector.is_leader.is_set():
            return await self._standby_of_live_leader(elector)
        return self.session is not None and self.session.synced.is_set()

    async def _standby_of_live_leader(self, elector: LeaderElector) -> bool:
        try:
            data = await self.kube.get(LEASES, elector.name, namespace=elector.namespace)
        except KubeError:
            return False
        spec = msgspec.json.decode(data, type=_LeaseObject).spec
        return decide(spec, identity=elector.identity, now=datetime.now(UTC)) is Step.FOLLOW

    def oldest_pending(self) -> float:
        session = self.session
        if session is None or session.publisher is None:
            return 0.0
        return session.publisher.oldest_pending_age()

    async def run(self, stop: asyncio.Event) -> None:
        js = self.nc.jetstream(timeout=self.settings.publish_timeout)
        kube_stream = [
            spec
            for spec in bus.default_streams(replicas=self.settings.stream_replicas)
            if spec.name == subjects.KUBE_STREAM
        ]
        await bus.ensure_topology(js, streams=kube_stream, buckets=())
        s = self.settings
        if not s.leader_election:
            self.metrics.leader.set(1)
            while not stop.is_set():
                await self._lead(js, stop, lost=None)
            return
        self.elector = LeaderElector(
            kube=self.kube,
            namespace=s.resolved_lease_namespace(),
            name=s.lease_name,
            identity=s.resolved_lease_identity(),
            lease_duration=s.lease_duration,
            retry_period=s.lease_retry_period,
        )
        elector = self.elector
        if not testfaults.active("unfenced"):
            self.kube.fence = elector.term  # fencing: no write outside the leader's term
        crashes = CrashWatch()
        campaign = crashes.watch(asyncio.create_task(_campaign(elector), name="leader-election"))
        log.info(
            "campaigning for the lease",
            extra={"lease": s.lease_name, "identity": s.resolved_lease_identity()},
        )
        try:
            while not stop.is_set() and not crashes.crashed.is_set():
                if not await _first(elector.is_leader.wait(), stop.wait(), crashes.crashed.wait()):
                    break
                elector.lost.clear()
                self.metrics.leader.set(1)
                log.info("leading: publishing events")
                await self._lead(js, stop, lost=elector.lost, crashed=crashes.crashed)
                self.metrics.leader.set(0)
        finally:
            # Cancelling the campaign releases the Lease (after the flush above), so the
            # standby takes over at once instead of after the lease duration.
            await cancel_and_wait(campaign)
            self.metrics.leader.set(0)
        if crashes.crashed.is_set():
            # Without its campaign the replica can neither keep nor win the Lease.
            raise TaskCrashed("the leader-election campaign crashed")

    async def _lead(
        self,
        js: JetStreamContext,
        stop: asyncio.Event,
        *,
        lost: asyncio.Event | None,
        crashed: asyncio.Event | None = None,
    ) -> None:
        session = Session(
            settings=self.settings,
            kube=self.kube,
            js=js,
            metrics=self.metrics,
            bus_metrics=self.bus_metrics,
            tracer=self.tracer,
            cycle_tracer=self.cycle_tracer,
        )
        self.session = session
        runner = asyncio.create_task(session.run(), name="session")
        waits: list[Awaitable[Any]] = [stop.wait(), runner]
        if lost is not None:
            waits.append(lost.wait())
        if crashed is not None:
            waits.append(crashed.wait())
        await _first(*waits)
        if runner.done() and not runner.cancelled() and runner.exception() is not None:
            log.error("session failed; starting over", exc_info=runner.exception())
        await cancel_and_wait(runner)
        leadership_lost = lost is not None and lost.is_set()
        if leadership_lost:
            log.warning("leadership lost: stopped publishing")
        await session.stop(flush=not leadership_lost, timeout=self.settings.shutdown_timeout)
        self.session = None
        if not stop.is_set() and not leadership_lost and not (crashed and crashed.is_set()):
            await asyncio.sleep(self.settings.retry_delay)  # the session failed; retry


async def _campaign(elector: LeaderElector) -> None:
    """The elector's campaign; with the test fault ``campaign-crash`` it ends with an error
    one second after this replica first leads (the process must exit, not publish on)."""
    if not testfaults.active("campaign-crash"):
        await elector.run()
        return
    running = asyncio.create_task(elector.run())
    try:
        await elector.is_leader.wait()
        await asyncio.sleep(1.0)
        raise RuntimeError("test fault campaign-crash: the campaign ends")
    finally:
        await cancel_and_wait(running)


async def _first(*awaitables: Awaitable[Any]) -> bool:
    """Wait until the first awaitable finishes; True if it was the first one given."""
    tasks = [asyncio.ensure_future(a) for a in awaitables]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        return tasks[0] in done
    finally:
        for task, original in zip(tasks, awaitables, strict=True):
            # A task passed in by the caller (the session runner) is the caller's to end.
            if task is not original and not task.done():
                task.cancel()
