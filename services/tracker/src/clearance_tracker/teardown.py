"""The teardown record: everything the tracker knows about one (AppWrapper, attempt).

This module owns the shape of the tracker's only state and its JSON encoding: the record
(`Teardown`: the tracked objects by UID, the policy and its fixed deadlines, the escalation
steps claimed and done, the `cleared` fact), the replica heartbeat, and their KV keys
(``td.<aw-uid>.<attempt>``, ``replica.<id>``). Records are immutable msgspec Structs,
untracked by the garbage collector (``gc=False``: plain data, never part of a reference
cycle; at 10,000 teardowns x 8 pods the collector's walks over them cost a fifth of the
tracker's CPU per object); the pure modules (:mod:`.inventory`, :mod:`.confirmation`,
:mod:`.escalation`) return new records and :mod:`.store` writes them with compare-and-swap, so
a restarted replica rebuilds everything, timers included, by decoding what the bucket holds.
"""

from __future__ import annotations

from typing import Final, Literal

import msgspec
from msgspec import Struct, field

from clearance.events import (
    AppWrapperRef,
    EscalationStep,
    ObjectRef,
    TeardownPolicy,
    UtcDateTime,
)

ConfirmHow = Literal["watch_deleted", "get_404", "uid_changed", "list_absent"]
Source = Literal["inventory", "watch", "list", "owner"]

RECORD_PREFIX: Final = "td"
REPLICA_PREFIX: Final = "replica"
STEPS: Final[tuple[EscalationStep, ...]] = ("stuck_alert", "force_deletion", "finalizer_removal")


class TrackedObject(Struct, frozen=True, kw_only=True, gc=False):
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


class KindRef(Struct, frozen=True, kw_only=True, gc=False):
    """A wrapped kind the final LIST must cover."""

    api_version: str
    kind: str


class StepState(Struct, frozen=True, kw_only=True, gc=False):
    """An escalation step: claimed (CAS) before anything is done, then marked done."""

    claimed_by: str
    claimed_at: UtcDateTime
    done_at: UtcDateTime | None = None
    objects: tuple[ObjectRef, ...] = ()


class Clearing(Struct, frozen=True, kw_only=True, gc=False):
    """Set (CAS) once the verified-empty view was seen; `cleared_at` is then fixed forever."""

    cleared_at: UtcDateTime
    by: str
    published: bool = False


class Teardown(Struct, frozen=True, kw_only=True, gc=False):
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
