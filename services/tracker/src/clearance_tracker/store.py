"""The tracker's KV bucket: its definition, and compare-and-swap access to what it holds.

This module owns the bucket `clearance-teardowns` (name from `CLEARANCE_KV_BUCKET`): its
declaration (history, replicas, no TTL — cleared records are deleted by the retention scan,
heartbeats are overwritten), provisioning at start-up, and :class:`TeardownStore`, the only
code that reads or writes records and heartbeats. Every record write is a CAS
(``update(last=revision)``): any replica may apply any fact, a lost race re-reads and
re-applies the pure change, and two replicas can never both claim an escalation step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final

import nats.js.errors
from nats.js import JetStreamContext
from nats.js.kv import KeyValue

from clearance import bus
from clearance.fencing import Term
from clearance_tracker.settings import TrackerSettings
from clearance_tracker.teardown import (
    Heartbeat,
    Teardown,
    decode_heartbeat,
    decode_record,
    encode,
    replica_key,
)

HISTORY: Final = 5
"""Revisions kept per key: enough to read what a record looked like a few writes ago."""


def bucket_spec(settings: TrackerSettings) -> bus.KvSpec:
    """The bucket as this tracker declares it (the replica count is the streams' one)."""
    return bus.KvSpec(
        settings.kv_bucket,
        history=HISTORY,
        description="Per-AppWrapper teardown state (tracker records + heartbeats).",
        replicas=settings.stream_replicas,
    )


async def ensure_bucket(js: JetStreamContext, settings: TrackerSettings) -> KeyValue:
    """Create the bucket, or correct its limits (every replica does this at start-up)."""
    return await bus.ensure_kv(js, bucket_spec(settings))


@dataclass(frozen=True, slots=True)
class Versioned:
    """A record and the KV revision it was read at (the CAS token)."""

    record: Teardown
    revision: int


class RecordConflict(Exception):
    """A CAS write lost against a concurrent writer; read again and re-apply."""


Mutation = Callable[[Teardown], Teardown | None]


class TeardownStore:
    """CAS access to teardown records and heartbeats in the KV bucket."""

    def __init__(self, kv: KeyValue, *, max_attempts: int = 50) -> None:
        self.kv = kv
        self.max_attempts = max_attempts
        self.fence: Term | None = None
        """The replica's term; record writes (not heartbeats, which renew it) are refused with
        :class:`~clearance.fencing.Fenced` outside it, like the API writes (``Kube.fence``)."""

    def _check(self, effect: str) -> None:
        if self.fence is not None:
            self.fence.check(effect)

    async def get(self, key: str) -> Versioned | None:
        try:
            entry = await self.kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        if entry.value is None or entry.operation in ("DEL", "PURGE"):
            return None
        return Versioned(decode_record(entry.value), int(entry.revision or 0))

    async def create(self, record: Teardown) -> Versioned | None:
        """Create the record; None when it already exists (a redelivered teardown.started)."""
        self._check(f"create record {record.key}")
        try:
            revision = await self.kv.create(record.key, encode(record))
        except nats.js.errors.KeyWrongLastSequenceError:
            return None
        return Versioned(record, int(revision))

    async def write(self, current: Versioned, record: Teardown) -> Versioned:
        """CAS write of ``record`` over ``current``; raises :class:`RecordConflict`."""
        self._check(f"write record {record.key}")
        try:
            revision = await self.kv.update(record.key, encode(record), last=current.revision)
        except nats.js.errors.KeyWrongLastSequenceError as exc:
            raise RecordConflict(record.key) from exc
        return Versioned(record, int(revision))

    async def mutate(
        self, key: str, change: Mutation, *, known: Versioned | None = None
    ) -> tuple[Versioned | None, bool]:
        """Read, apply the pure ``change``, CAS write; repeat on conflicts.

        ``known`` (e.g. from the replica's cache) saves the first read; a stale one only
        costs a conflict. Returns (latest version, whether this call wrote it). ``change``
        returning None or an equal record means "nothing to write".
        """
        for attempt in range(self.max_attempts):
            current = known if (attempt == 0 and known is not None) else await self.get(key)
            if current is None:
                return None, False
            new = change(current.record)
            if new is None or new == current.record:
                if attempt == 0 and known is not None:
                    continue  # the cached copy may be stale: decide on a fresh read
                return current, False
            try:
                return await self.write(current, new), True
            except RecordConflict:
                continue
        raise RecordConflict(f"{key}: gave up after {self.max_attempts} conflicting writes")

    async def delete(self, key: str, revision: int) -> bool:
        self._check(f"delete record {key}")
        try:
            await self.kv.delete(key, last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def beat(self, replica: str, at: datetime) -> None:
        await self.kv.put(replica_key(replica), encode(Heartbeat(replica=replica, at=at)))

    async def last_beat(self, replica: str) -> datetime | None:
        """When `replica` last wrote its heartbeat, read from the bucket (not the view)."""
        try:
            entry = await self.kv.get(replica_key(replica))
        except nats.js.errors.KeyNotFoundError:
            return None
        if not entry.value or entry.operation in ("DEL", "PURGE"):
            return None
        return decode_heartbeat(entry.value).at

    async def release(self, replica: str) -> None:
        """Delete the heartbeat: other replicas take this one's records over at once."""
        await self.kv.delete(replica_key(replica))
