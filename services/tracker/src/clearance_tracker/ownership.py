"""Ownership: which replica acts for which teardown, and how a dead replica's records move.

This module owns the liveness side of the division of labour between replicas. Any replica
handles any message, but only a record's *owner* acts on the world (verification, ladder
steps, `cleared`); the replica that records a teardown owns it. Every replica writes a
heartbeat key every `heartbeat_interval`; a record whose owner's heartbeat is older than
`owner_timeout` is taken over by a live replica (CAS on `owner`, after re-reading the
heartbeat itself in case the view lags). A replica never seen is given `owner_timeout`
after our own start before it counts as dead; a restarted pod keeps its replica id (HOSTNAME)
and so its records. The rules (:func:`owner_alive`, :func:`retention_over`) are pure; the
heartbeat loop also notices a stalled KV watch (our own beats stop coming back).

Fencing (DESIGN §5): other replicas judge this one dead `owner_timeout` after its last beat,
so this replica's right to act (:attr:`Ownership.term`) lasts as long, measured on the monotonic
clock from the moment the beat was sent. A replica frozen past it wakes up with its term over:
its API writes are refused (the tracker's `Kube.fence`) until a new beat starts a new term, by
which time its records have moved to another owner and its stale claims fail their CAS.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta

import msgspec

from clearance import testfaults
from clearance.fencing import Term
from clearance_tracker.commits import RecordWriter
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.store import TeardownStore
from clearance_tracker.teardown import Teardown
from clearance_tracker.view import TeardownView

log = logging.getLogger(__name__)


def owner_alive(
    owner: str,
    *,
    me: str,
    heartbeats: Mapping[str, datetime],
    now: datetime,
    started_at: datetime,
    timeout: float,
) -> bool:
    """Whether `owner` counts as alive for replica `me` at `now`."""
    if owner == me:
        return True
    beat = heartbeats.get(owner)
    if beat is None:
        # Never seen: give a replica that just started the benefit of the doubt.
        return now - started_at < timedelta(seconds=timeout)
    return now - beat < timedelta(seconds=timeout)


def retention_over(record: Teardown, *, now: datetime, retention: float) -> bool:
    """A published `cleared` older than the retention: the record may be deleted."""
    clearing = record.clearing
    return (
        record.cleared
        and clearing is not None
        and now - clearing.cleared_at > timedelta(seconds=retention)
    )


class Ownership:
    """This replica's heartbeat, and takeovers of records whose owner stopped beating."""

    def __init__(
        self,
        *,
        store: TeardownStore,
        view: TeardownView,
        writer: RecordWriter,
        metrics: TrackerMetrics,
        me: str,
        heartbeat_interval: float,
        owner_timeout: float,
        clock: Callable[[], datetime],
        poke: Callable[[str], None],
    ) -> None:
        self.store = store
        self.view = view
        self.writer = writer
        self.metrics = metrics
        self.me = me
        self.heartbeat_interval = heartbeat_interval
        self.owner_timeout = owner_timeout
        self.now = clock
        self.poke = poke
        self.started_at = clock()
        self.term = Term(
            name=f"tracker replica {me}", duration=owner_timeout, margin=owner_timeout / 10
        )
        """This replica's right to act; renewed by every heartbeat written."""

    def alive(self, owner: str, now: datetime) -> bool:
        return owner_alive(
            owner,
            me=self.me,
            heartbeats=self.view.heartbeats,
            now=now,
            started_at=self.started_at,
            timeout=self.owner_timeout,
        )

    async def beat(self) -> None:
        sent_at = time.monotonic()
        await self.store.beat(self.me, self.now())
        self.term.began(sent_at=sent_at)

    async def heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            if testfaults.active("heartbeat-crash"):
                raise RuntimeError("test fault heartbeat-crash: the heartbeat loop ends")
            try:
                await self.beat()
            except Exception as exc:
                log.warning("heartbeat failed", extra={"error": repr(exc)})
                continue
            # Our own beats come back through the KV watch; if they stopped arriving, the
            # watch is stuck (e.g. after a NATS outage) and the whole view is stale.
            seen = self.view.heartbeats.get(self.me)
            stale = timedelta(seconds=self.owner_timeout)
            if seen is not None and self.now() - seen > stale and self.view.task is not None:
                log.warning("kv watch stalled; restarting it")
                self.view.restart()

    async def take_over(self, key: str, dead: str) -> None:
        """Become the owner of `key` if `dead` really stopped beating (CAS on `owner`)."""
        # The view may lag (a slow watch): read the heartbeat itself before taking over.
        with contextlib.suppress(Exception):
            beat = await self.store.last_beat(dead)
            if beat is not None and self.now() - beat < timedelta(seconds=self.owner_timeout):
                return

        def change(record: Teardown) -> Teardown | None:
            if record.owner != dead or record.cleared:
                return None
            return msgspec.structs.replace(record, owner=self.me)

        _version, wrote = await self.writer.mutate(key, change)
        if wrote:
            self.metrics.takeovers.inc()
            log.warning(
                "took over a teardown from a replica whose heartbeat stopped",
                extra={"key": key, "previous_owner": dead, "replica": self.me},
            )
            self.poke(key)
