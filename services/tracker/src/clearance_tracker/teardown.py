"""The teardown record: everything the tracker knows about one (AppWrapper, attempt).

The record is the tracker's only state. It lives in the JetStream KV bucket
`clearance-teardowns` under ``td.<aw-uid>.<attempt>`` and every change is a compare-and-swap
(``update(last=revision)``), so any replica can apply any kube event, a restarted replica
rebuilds everything (timers included) from the bucket, and two replicas can never both claim
an escalation step. Replica liveness heartbeats share the bucket under ``replica.<id>``.

Records are immutable msgspec Structs; the pure modules (:mod:`.confirmation`,
:mod:`.escalation`) return new records, and :class:`TeardownStore` writes them with CAS.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal

import msgspec
import nats.js.errors
from msgspec import Struct, field
from nats.js.kv import KeyValue

from clearance.events import (
    AppWrapperRef,
    EscalationStep,
    ObjectRef,
    TeardownPolicy,
    UtcDateTime,
)

log = logging.getLogger(__name__)

ConfirmHow = Literal["watch_deleted", "get_404", "uid_changed", "list_absent"]
Source = Literal["inventory", "watch", "list", "owner"]

RECORD_PREFIX: Final = "td"
REPLICA_PREFIX: Final = "replica"
STEPS: Final[tuple[EscalationStep, ...]] = ("stuck_alert", "force_deletion", "finalizer_removal")


class TrackedObject(Struct, frozen=True, kw_only=True):
    """One object (by UID) whose disappearance the teardown waits for."""

    kind: str
    api_version: str
    namespace: str | None = None
    name: str
    uid: str
    source: Source
    first_seen: UtcDateTime
    attempt: int | None = None
    node: str | None = None
    finalizers: tuple[str, ...] = ()
    deletion_timestamp: UtcDateTime | None = None
    owner_uids: tuple[str, ...] = ()
    confirmed_at: UtcDateTime | None = None
    confirmed_how: ConfirmHow | None = None
    confirm_span_id: str | None = None
    """Span id (16 hex) of the `deletion.confirmed` span; `cleared` links to it."""

    @property
    def gone(self) -> bool:
        return self.confirmed_at is not None

    @property
    def is_pod(self) -> bool:
        return self.kind == "Pod" and self.api_version == "v1"

    def ref(self) -> ObjectRef:
        return ObjectRef(
            kind=self.kind,
            api_version=self.api_version,
            namespace=self.namespace,
            name=self.name,
            uid=self.uid,
        )


class KindRef(Struct, frozen=True, kw_only=True):
    """A wrapped kind the final LIST must cover."""

    api_version: str
    kind: str


class StepState(Struct, frozen=True, kw_only=True):
    """An escalation step: claimed (CAS) before anything is done, then marked done."""

    claimed_by: str
    claimed_at: UtcDateTime
    done_at: UtcDateTime | None = None
    objects: tuple[ObjectRef, ...] = ()


class Clearing(Struct, frozen=True, kw_only=True):
    """Set (CAS) once the verified-empty view was seen; `cleared_at` is then fixed forever."""

    cleared_at: UtcDateTime
    by: str
    published: bool = False


class Teardown(Struct, frozen=True, kw_only=True):
    """The KV record of one teardown."""

    appwrapper: AppWrapperRef
    attempt: int
    teardown_started_at: UtcDateTime
    recorded_at: UtcDateTime
    policy: TeardownPolicy
    owner: str
    trace_id: str
    """32 hex: the cycle trace (from `cycle_traceparent`, else a fresh one)."""
    await_span_id: str
    """16 hex: id of the `deletion.await` span, exported when the teardown clears."""
    cycle_traceparent: str | None = None
    wrapped_kinds: tuple[KindRef, ...] = ()
    objects: dict[str, TrackedObject] = field(default_factory=dict)
    deadlines: dict[str, UtcDateTime] = field(default_factory=dict)
    """Step → when it becomes due, fixed when the teardown is recorded (disabled steps absent)."""
    steps: dict[str, StepState] = field(default_factory=dict)
    last_verified_at: UtcDateTime | None = None
    clearing: Clearing | None = None

    @property
    def key(self) -> str:
        return record_key(self.appwrapper.uid, self.attempt)

    @property
    def open_objects(self) -> list[TrackedObject]:
        """Tracked objects not yet confirmed gone, pods first (the force-deletion order)."""
        remaining = [o for o in self.objects.values() if not o.gone]
        return sorted(remaining, key=lambda o: (not o.is_pod, o.kind, o.name, o.uid))

    @property
    def all_confirmed(self) -> bool:
        return all(o.gone for o in self.objects.values())

    @property
    def cleared(self) -> bool:
        return self.clearing is not None and self.clearing.published

    def step_done(self, step: EscalationStep) -> bool:
        state = self.steps.get(step)
        return state is not None and state.done_at is not None


def record_key(aw_uid: str, attempt: int) -> str:
    return f"{RECORD_PREFIX}.{aw_uid}.{attempt}"


def replica_key(replica: str) -> str:
    return f"{REPLICA_PREFIX}.{replica}"


class Heartbeat(Struct, frozen=True, kw_only=True):
    replica: str
    at: UtcDateTime


_ENCODER: Final = msgspec.json.Encoder()
_RECORD: Final = msgspec.json.Decoder(Teardown)
_HEARTBEAT: Final = msgspec.json.Decoder(Heartbeat)


def encode(record: Teardown | Heartbeat) -> bytes:
    return _ENCODER.encode(record)


def decode_record(data: bytes) -> Teardown:
    return _RECORD.decode(data)


def decode_heartbeat(data: bytes) -> Heartbeat:
    return _HEARTBEAT.decode(data)


@dataclass(frozen=True, slots=True)
class Versioned:
    """A record and the KV revision it was read at (the CAS token)."""

    record: Teardown
    revision: int


class RecordConflict(Exception):
    """A CAS write lost against a concurrent writer; read again and re-apply."""


Mutation = Callable[[Teardown], Teardown | None]
AsyncMutation = Callable[[Teardown], Awaitable[Teardown | None]]


class TeardownStore:
    """CAS access to teardown records and heartbeats in the KV bucket."""

    def __init__(self, kv: KeyValue, *, max_attempts: int = 50) -> None:
        self.kv = kv
        self.max_attempts = max_attempts

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
        try:
            revision = await self.kv.create(record.key, encode(record))
        except nats.js.errors.KeyWrongLastSequenceError:
            return None
        return Versioned(record, int(revision))

    async def write(self, current: Versioned, record: Teardown) -> Versioned:
        """CAS write of ``record`` over ``current``; raises :class:`RecordConflict`."""
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
        try:
            await self.kv.delete(key, last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            return False
        return True

    async def beat(self, replica: str, at: datetime) -> None:
        await self.kv.put(replica_key(replica), encode(Heartbeat(replica=replica, at=at)))
