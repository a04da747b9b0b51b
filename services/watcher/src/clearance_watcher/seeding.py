"""What the watcher published before: the starting point of every informer after a takeover.

The CLEARANCE_KUBE stream is the watcher's memory. Reading the *last event per subject*
(an ephemeral consumer with ``DeliverPolicy.LAST_PER_SUBJECT``) gives, per object name,
the last state any watcher published; a last event that is DELETED means "gone". That is
the ``known`` set a relist is diffed against, so an object deleted while no watcher ran
still gets its tombstone.

The headers of those events also carry each informer's acknowledged watch position
(:data:`~clearance_watcher.progress.WATCH_RESUME_HEADER`); the one on the newest
event of an informer is where its watch can resume.

Caveat: the stream keeps 24 h (DESIGN §3). An object that did not change for longer has
no event left, so it is not ``known``; if it is deleted while no watcher runs *and* the
API server's history no longer covers the outage (410), its deletion is not inferred.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass, field

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext, api

from clearance import events, subjects
from clearance.events import (
    KubeAppWrapperEvent,
    KubeItemEvent,
    KubeNodeEvent,
    KubePodEvent,
    SnapshotProblem,
)
from clearance_watcher.decoding import Reading, Snapshot
from clearance_watcher.progress import WATCH_KEY_HEADER, WATCH_RESUME_HEADER
from clearance_watcher.watching import Known, known_of

log = logging.getLogger(__name__)

_BATCH = 512


@dataclass
class Seed:
    """Last published state per uid for one subject kind, and resume positions by key."""

    live: list[Snapshot] = field(default_factory=list)
    problems: dict[str, SnapshotProblem] = field(default_factory=dict)
    """uid → the ``problem`` its last event carried (a partial snapshot)."""
    resume: dict[str, str] = field(default_factory=dict)
    events: int = 0
    undecodable: int = 0

    def known_for(
        self,
        *,
        namespace: str | None,
        api_version: str | None = None,
        kind: str | None = None,
    ) -> dict[str, Known]:
        """The live objects an informer scoped to ``namespace`` (None: all) is responsible for."""
        out: dict[str, Known] = {}
        for snapshot in self.live:
            if namespace is not None and snapshot.metadata.namespace != namespace:
                continue
            if api_version is not None and snapshot.api_version != api_version:
                continue
            if kind is not None and snapshot.kind != kind:
                continue
            uid = snapshot.metadata.uid
            out[uid] = known_of(snapshot, Reading(snapshot, self.problems.get(uid)))
        return out

    def item_kinds(self) -> set[tuple[str, str]]:
        """(apiVersion, kind) of every live item: kinds that must be watched to see them go."""
        return {(s.api_version, s.kind) for s in self.live}


async def read_seed(js: JetStreamContext, kube_kind: subjects.KubeKind, *, timeout: float) -> Seed:
    """Read the last event of every ``clearance.kube.v1.<kube_kind>.>`` subject."""
    seed = Seed()
    # Items of different kinds may share a name and so a subject (a PyTorchJob and its
    # Service): for them the last event per subject is not the last per object, so the
    # whole (24 h) history is folded by uid instead.
    policy = api.DeliverPolicy.ALL if kube_kind == "item" else api.DeliverPolicy.LAST_PER_SUBJECT
    filter_subject = subjects.kube_filter(kind=kube_kind).rsplit(".", 2)[0] + ".>"
    config = api.ConsumerConfig(
        deliver_policy=policy,
        ack_policy=api.AckPolicy.NONE,
        filter_subject=filter_subject,
        inactive_threshold=max(timeout, 5.0),
        mem_storage=True,
    )
    sub = await js.pull_subscribe(filter_subject, stream=subjects.KUBE_STREAM, config=config)
    latest: dict[str, tuple[int, str]] = {}
    last: dict[str, tuple[Snapshot, SnapshotProblem | None] | None] = {}
    info: api.ConsumerInfo | None = None
    try:
        info = await sub.consumer_info()
        if info.num_pending:
            deadline = time.monotonic() + timeout
            done = False
            while not done:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(
                        f"reading the last {kube_kind} events took longer than {timeout}s"
                    )
                try:
                    msgs = await sub.fetch(batch=_BATCH, timeout=min(remaining, 2.0))
                except nats.errors.TimeoutError:
                    continue
                for msg in msgs:
                    _take(seed, latest, last, msg.data, msg.headers, msg.metadata.sequence.stream)
                    if msg.metadata.num_pending == 0:
                        done = True
    finally:
        try:
            await sub.unsubscribe()
        except Exception:  # the consumer is ephemeral; the server reaps it anyway
            log.debug("seed consumer unsubscribe failed", exc_info=True)
        if info is not None:
            try:
                await js.delete_consumer(subjects.KUBE_STREAM, info.name)
            except Exception:
                log.debug("seed consumer delete failed", exc_info=True)
    seed.live = [entry[0] for entry in last.values() if entry is not None]
    seed.problems = {
        uid: entry[1] for uid, entry in last.items() if entry is not None and entry[1] is not None
    }
    seed.resume = {key: rv for key, (_, rv) in latest.items()}
    return seed


def _take(
    seed: Seed,
    latest: dict[str, tuple[int, str]],
    last: dict[str, tuple[Snapshot, SnapshotProblem | None] | None],
    data: bytes,
    headers: dict[str, str] | None,
    sequence: int,
) -> None:
    seed.events += 1
    try:
        event = events.decode(data)
    except events.EventDecodeError:
        seed.undecodable += 1
        return
    if not isinstance(event, KubeAppWrapperEvent | KubePodEvent | KubeNodeEvent | KubeItemEvent):
        return
    obj = event.object
    last[obj.metadata.uid] = None if event.action == "DELETED" else (obj, event.problem)
    if headers:
        key = headers.get(WATCH_KEY_HEADER)
        rv = headers.get(WATCH_RESUME_HEADER)
        if key and rv and sequence > latest.get(key, (0, ""))[0]:
            latest[key] = (sequence, rv)


def live_item_kinds(seeds: Iterable[Seed]) -> set[tuple[str, str]]:
    kinds: set[tuple[str, str]] = set()
    for seed in seeds:
        kinds |= seed.item_kinds()
    return kinds
