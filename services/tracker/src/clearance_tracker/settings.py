"""Configuration of `clearance-tracker`: one frozen object built from `CLEARANCE_*` variables.

The teardown deadlines normally arrive with each `cycle.teardown.started` event (the
dispatcher resolves them from the AppWrapper and its own operator defaults). The deadline
settings here are the tracker's operator defaults, used only when an event carries no
`policy` at all (a producer that predates the field, or a hand-written event).

The timing settings below the deadlines exist so tests (and impatient operators) can make
the tracker react in milliseconds without sleeping through production defaults.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from clearance.bounds import Range, durations
from clearance.events import TeardownPolicy
from clearance.settings import CommonSettings, Seconds, SettingsError, doc
from clearance_tracker.escalation import MAX_SECONDS

FinalizerRemoval = Literal["Never", "AfterForceDeletion"]

_REPLICA_ID = re.compile(r"^[A-Za-z0-9_=-]{1,64}$")


def _positive(value: float) -> str | None:
    return None if value > 0 else f"expected a value > 0, got {value}"


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else f"expected an integer >= 1, got {value}"


def _under_dedup_window(value: float) -> str | None:
    # A re-done step republishes with the same Msg-Id; JetStream only drops the duplicate
    # inside the stream's 120 s duplicate window, so a re-claim must happen well inside it.
    if 0 < value <= 90:
        return None
    return f"expected a duration in (0, 90s] (inside the 120s JetStream dedup window), got {value}"


def default_replica_id() -> str:
    """HOSTNAME (the pod name in Kubernetes) or the host name, made KV-key safe."""
    raw = os.environ.get("HOSTNAME") or socket.gethostname() or "tracker"
    return re.sub(r"[^A-Za-z0-9_=-]", "-", raw)[:64]


@dataclass(frozen=True, kw_only=True)
class TrackerSettings(CommonSettings):
    """Settings of the deletion tracker (plus the common NATS/HTTP/logging settings)."""

    # ---- operator defaults of the teardown policy ---------------------------------------
    stuck_alert_time: Seconds = field(
        default=60.0,
        metadata=doc(
            "Operator default of requeuing.stuckAlertTimeInSeconds: a Warning alert with a\n"
            "diagnosis when objects of a teardown are still present this long after\n"
            "teardown.started. Used only when a teardown.started event carries no policy.",
            bounds=durations(),
        ),
    )
    force_deletion_time: Seconds = field(
        default=570.0,
        metadata=doc(
            "Operator default of requeuing.forceDeletionTimeInSeconds: grace-0 deletion of\n"
            "what is left (pods first, then items). 0 disables force deletion (and with it\n"
            "finalizer removal). Used only when an event carries no policy.",
            bounds=durations(),
        ),
    )
    finalizer_removal: FinalizerRemoval = field(
        default="Never",
        metadata=doc(
            "Operator default of requeuing.finalizerRemoval: AfterForceDeletion strips the\n"
            "finalizers of objects still present after force deletion. Used only when an\n"
            "event carries no policy."
        ),
    )
    finalizer_removal_delay: Seconds = field(
        default=10.0,
        metadata=doc(
            "Wait after the force-deletion deadline before finalizers are stripped, so that\n"
            "a live finalizer owner can finish its own cleanup first.",
            bounds=durations(),
        ),
    )

    # ---- verification and timers -----------------------------------------------------
    verify_interval: Seconds = field(
        default=10.0,
        metadata=doc(
            "Re-verification period of an open teardown: quorum LIST by the AppWrapper\n"
            "label and GET of every unconfirmed object, so a missed watch event (or a\n"
            "deletion while the watcher was down) cannot hang a teardown.",
            check=_positive,
        ),
    )
    verify_rate: float = field(
        default=50.0,
        metadata=doc(
            "Periodic re-checks (the verify_interval ones) this replica starts per second,\n"
            "at most. Each is a LIST (shared per namespace) and a CAS write; without a cap,\n"
            "10,000 open teardowns would ask for 1,000 a second and starve the real work\n"
            "(the 10,000 x 8 benchmark never finished recording). With more open teardowns\n"
            "than verify_interval x verify_rate, each is re-checked less often than\n"
            "verify_interval. First and final verifications are never capped. Default: the\n"
            "kube client's default QPS (CLEARANCE_KUBE_QPS), range > 0.",
            check=_positive,
        ),
    )
    scan_interval: Seconds = field(
        default=1.0,
        metadata=doc(
            "How often this replica looks at its teardowns for passed deadlines and due\n"
            "verifications (timers are recomputed from the KV records on every scan).",
            check=_positive,
        ),
    )
    heartbeat_interval: Seconds = field(
        default=5.0,
        metadata=doc(
            "Period of this replica's liveness heartbeat in the KV bucket.", check=_positive
        ),
    )
    owner_timeout: Seconds = field(
        default=20.0,
        metadata=doc(
            "A replica whose heartbeat is older than this is presumed dead and its open\n"
            "teardowns are taken over (CAS) by a live replica. Must exceed the heartbeat\n"
            "interval and the clock skew between replicas.",
            check=_positive,
        ),
    )
    claim_timeout: Seconds = field(
        default=30.0,
        metadata=doc(
            "An escalation step claimed by a replica but not marked done after this long\n"
            "is completed by the current owner (same Msg-Ids, so nothing is duplicated).",
            check=_under_dedup_window,
        ),
    )
    replica_id: str = field(
        default="",
        metadata=doc(
            "Identity of this replica in the KV bucket (empty: HOSTNAME, i.e. the pod\n"
            "name). A restarted pod keeps its name and so resumes its own teardowns at once.\n"
            "Letters, digits, '-', '_' and '=' only."
        ),
    )
    record_retention: Seconds = field(
        default=7 * 86400.0,
        metadata=doc(
            "How long a cleared teardown record stays in KV (for audit and to make a\n"
            "redelivered teardown.started harmless) before it is deleted.",
            check=_positive,
        ),
    )

    # ---- NATS consumers ------------------------------------------------------------------
    kv_bucket: str = field(
        default="clearance-teardowns",
        metadata=doc("JetStream KV bucket holding one record per (AppWrapper UID, attempt)."),
    )
    teardown_durable: str = field(
        default="clearance-tracker-teardowns",
        metadata=doc("Durable pull consumer on CLEARANCE_CYCLE for teardown.started."),
    )
    kube_durable: str = field(
        default="clearance-tracker-kube",
        metadata=doc("Durable pull consumer on CLEARANCE_KUBE for pod and item events."),
    )
    consumer_concurrency: int = field(
        default=64,
        metadata=doc(
            "Messages handled at once per consumer. A handler holds its slot across KV\n"
            "round trips (and, for a teardown's last DELETED, its final LIST and `cleared`),\n"
            "so a burst is bound by slots x round-trip time: 64 keeps a 1,000-teardown burst\n"
            "CPU-bound rather than waiting (16: ~10 % slower; 256: more memory, little gain).",
            check=_at_least_one,
        ),
    )
    kube_span_ratio: float = field(
        default=0.1,
        metadata=doc(
            "Share of pod and item events handled under a CONSUMER span (0..1). They come by\n"
            "the thousand per second and most change nothing; the span per message was ~8 %\n"
            "of the tracker's CPU in the 1,000 x 8 burst. What a teardown went through is in\n"
            "its own spans (deletion.confirmed per object, cleared). Sampled by the watcher's\n"
            "trace id, so a trace keeps all of them or none. Default 0.1; 1: every event.",
            bounds=Range(0.0, 1.0),
        ),
    )
    ack_wait: Seconds = field(
        default=30.0,
        metadata=doc(
            "JetStream ack wait of the tracker's consumers (handlers send in_progress\n"
            "heartbeats, so this bounds only the redelivery delay after a crash).",
            check=_positive,
        ),
    )
    fetch_timeout: Seconds = field(
        default=1.0,
        metadata=doc("Longest wait of one pull fetch (also bounds shutdown).", check=_positive),
    )

    # ---- Kubernetes ----------------------------------------------------------------------
    kubeconfig: Path | None = field(
        default=None,
        metadata=doc(
            "kubeconfig file; unset: $KUBECONFIG, else the in-cluster service account.",
            env="CLEARANCE_KUBECONFIG",
        ),
    )
    kube_context: str | None = field(
        default=None, metadata=doc("kubeconfig context (unset: the current context).")
    )
    kube_request_timeout: Seconds = field(
        default=30.0,
        metadata=doc("Timeout of one Kubernetes API request.", check=_positive),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        problems: list[str] = []
        if self.replica_id and not _REPLICA_ID.match(self.replica_id):
            problems.append(
                f"{self.env_name('replica_id')}={self.replica_id!r}: only letters, digits, "
                "'-', '_' and '=' (at most 64) are allowed"
            )
        if self.kubeconfig is not None and not self.kubeconfig.is_file():
            problems.append(f"{self.env_name('kubeconfig')}={str(self.kubeconfig)!r}: no such file")
        if self.owner_timeout <= self.heartbeat_interval:
            problems.append(
                f"{self.env_name('owner_timeout')} ({self.owner_timeout}s) must exceed "
                f"{self.env_name('heartbeat_interval')} ({self.heartbeat_interval}s)"
            )
        if problems:
            raise SettingsError(problems)

    @property
    def identity(self) -> str:
        """The replica id in effect (the setting, else derived from the host name)."""
        return self.replica_id or default_replica_id()

    def default_policy(self) -> TeardownPolicy:
        """The teardown policy of a `teardown.started` that carries none (operator defaults).

        Durations are clamped to a century (:data:`.escalation.MAX_SECONDS`): a larger one
        means "never" anyway, and would not fit the record's 64-bit integers.
        """
        return TeardownPolicy(
            stuck_alert_seconds=min(round(self.stuck_alert_time), MAX_SECONDS),
            force_deletion_seconds=min(round(self.force_deletion_time), MAX_SECONDS),
            finalizer_removal=self.finalizer_removal,
        )
