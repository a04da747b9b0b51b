"""What the streams, consumers and buckets must look like: specs, and Clearance's own.

Specs are plain frozen values; :mod:`clearance.bus.provisioning` makes the server
agree with them. The streams themselves are named in :mod:`clearance.subjects`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from nats.js import api

from clearance import subjects

_DUPLICATE_WINDOW: Final = 120.0


@dataclass(frozen=True)
class StreamSpec:
    """What a stream must look like; ``ensure_stream`` makes the server agree."""

    name: str
    subjects: tuple[str, ...]
    max_age: float
    """Seconds a message is kept (LIMITS retention)."""
    duplicate_window: float = _DUPLICATE_WINDOW
    storage: api.StorageType = api.StorageType.FILE
    retention: api.RetentionPolicy = api.RetentionPolicy.LIMITS
    description: str | None = None
    replicas: int = 1

    def to_config(self) -> api.StreamConfig:
        return api.StreamConfig(
            name=self.name,
            num_replicas=self.replicas,
            description=self.description,
            subjects=list(self.subjects),
            retention=self.retention,
            storage=self.storage,
            max_age=self.max_age,
            duplicate_window=min(self.duplicate_window, self.max_age),
            discard=api.DiscardPolicy.OLD,
        )

    def covers(self, subject: str) -> bool:
        return any(subject_matches(pattern, subject) for pattern in self.subjects)


def dlq_subject(stream: str) -> str:
    """Where undecodable messages of ``stream`` are copied: ``clearance.dlq.v1.<stream>``."""
    return subjects.dlq_subject(stream)


def _spec_from(stream: subjects.StreamSpec, *, replicas: int) -> StreamSpec:
    return StreamSpec(
        stream.name,
        stream.subjects,
        max_age=stream.max_age_seconds,
        description=stream.description,
        replicas=replicas,
    )


def dlq_stream(*, replicas: int = 1) -> StreamSpec:
    return _spec_from(subjects.DLQ, replicas=replicas)


def default_streams(*, replicas: int = 1) -> tuple[StreamSpec, ...]:
    """Clearance's streams (DESIGN §3), as :mod:`clearance.subjects` defines them.

    ``replicas`` is the JetStream replication factor: 1 on a single server, 3 on a
    production cluster (``CLEARANCE_STREAM_REPLICAS``).
    """
    return tuple(_spec_from(stream, replicas=replicas) for stream in subjects.STREAMS)


def stream_spec(name: str, *, replicas: int) -> StreamSpec:
    """The declared spec of one of Clearance's streams (what a consumer is bound to)."""
    for spec in default_streams(replicas=replicas):
        if spec.name == name:
            return spec
    raise LookupError(f"no Clearance stream named {name!r}")


@dataclass(frozen=True)
class KvSpec:
    """A JetStream key-value bucket; ``ensure_kv`` creates it or corrects its limits."""

    bucket: str
    history: int = 5
    ttl: float | None = None
    storage: api.StorageType = api.StorageType.FILE
    description: str | None = None
    replicas: int = 1


@dataclass(frozen=True)
class ConsumerSpec:
    """A durable pull consumer with explicit ack on ``stream``."""

    stream: StreamSpec
    durable: str
    filter_subjects: tuple[str, ...] = ()
    ack_wait: float = 30.0
    max_deliver: int = -1
    max_ack_pending: int = 1000
    backoff: tuple[float, ...] | None = None
    deliver_policy: api.DeliverPolicy = api.DeliverPolicy.ALL
    description: str | None = None

    def to_config(self) -> api.ConsumerConfig:
        single = len(self.filter_subjects) == 1
        return api.ConsumerConfig(
            name=self.durable,
            durable_name=self.durable,
            description=self.description,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_deliver=self.max_deliver,
            max_ack_pending=self.max_ack_pending,
            backoff=list(self.backoff) if self.backoff else None,
            deliver_policy=self.deliver_policy,
            filter_subject=self.filter_subjects[0] if single else None,
            filter_subjects=list(self.filter_subjects) if len(self.filter_subjects) > 1 else None,
        )


def subject_matches(pattern: str, subject: str) -> bool:
    """NATS wildcard match: ``*`` is one token, a trailing ``>`` one or more tokens."""
    pat = pattern.split(".")
    sub = subject.split(".")
    for i, token in enumerate(pat):
        if token == ">":
            return len(sub) > i
        if i >= len(sub) or (token != "*" and token != sub[i]):
            return False
    return len(pat) == len(sub)
