"""Settings of ``clearance-dispatcher`` (``CLEARANCE_*`` environment variables).

Operator defaults for the AppWrapper fields users leave unset are here; their defaults are
MCAD's (timeInSeconds 300, MCAD v2's pauseTimeInSeconds 90 and forceDeletionTimeInSeconds 570)
so an AppWrapper behaves as it did under MCAD unless the operator says otherwise.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import field
from typing import Literal

from clearance.bounds import Range, counts, durations
from clearance.settings import CommonSettings, Seconds, SettingsError, doc


def _positive(value: float) -> str | None:
    return None if value > 0 else f"expected a value > 0, got {value}"


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else f"expected an integer >= 1, got {value}"


def _default_identity() -> str:
    return os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"


@dataclasses.dataclass(frozen=True, kw_only=True)
class DispatcherSettings(CommonSettings):
    """Configuration of the dispatcher; every field is one ``CLEARANCE_<NAME>`` variable."""

    requeue_time: Seconds = field(
        default=300.0,
        metadata=doc(
            "Default requeuing.timeInSeconds: wait after a dispatch before pods are counted "
            "(MCAD v1 default 300s). Rounded up to whole seconds like the AppWrapper field.",
            check=_positive,
        ),
    )
    pause_time: Seconds = field(
        default=90.0,
        metadata=doc(
            "Default requeuing.pauseTimeInSeconds: pause counted from cleared before the next "
            "attempt is dispatched (MCAD v2 default 90s; 0 redispatches at once)."
        ),
    )
    force_deletion_time: Seconds = field(
        default=570.0,
        metadata=doc(
            "Default requeuing.forceDeletionTimeInSeconds sent to the tracker in "
            "teardown.started (MCAD v2 default 570s); 0 disables force deletion."
        ),
    )
    stuck_alert_time: Seconds = field(
        default=60.0,
        metadata=doc(
            "Default requeuing.stuckAlertTimeInSeconds sent to the tracker: alert when an "
            "object of a teardown outlives it."
        ),
    )
    finalizer_removal: Literal["Never", "AfterForceDeletion"] = field(
        default="Never",
        metadata=doc(
            "Default requeuing.finalizerRemoval sent to the tracker; finalizers are only "
            "stripped when an AppWrapper or the operator opts in."
        ),
    )
    bookkeeping: Literal["auto", "status", "annotations"] = field(
        default="auto",
        metadata=doc(
            "Where the per-AppWrapper bookkeeping is kept. status: status.clearance (needs the "
            "CRD of deploy/crd, which preserves it); annotations: the annotation "
            "clearance.dev/bookkeeping, written in one guarded patch (works under any CRD, e.g. "
            "MCAD v1's upstream one, which prunes status.clearance); auto: status when the "
            "served CRD keeps status.clearance, else annotations (read at start-up and on "
            "every change of the CRD)."
        ),
    )
    crd_check_interval: Seconds = field(
        default=30.0,
        metadata=doc(
            "Period of the re-read of the served AppWrapper CRD (GET by name): a changed schema "
            "is logged once with what it prunes, and in auto bookkeeping mode decides where the "
            "bookkeeping goes. A chart upgrade that re-applies MCAD's CRD is noticed within it "
            "(a pruned write is noticed at once, by read-back).",
            bounds=durations(0.1, 3600.0),
        ),
    )
    intake: Literal["nats", "kube"] = field(
        default="nats",
        metadata=doc(
            "Where Kubernetes state comes from after the initial LIST. nats: AppWrapper, pod "
            "and node events of the watcher on CLEARANCE_KUBE (DESIGN); kube: the dispatcher's "
            "own list-then-watch of AppWrappers, pods and nodes (no watcher needed)."
        ),
    )
    resync_interval: Seconds = field(
        default=60.0,
        metadata=doc(
            "nats intake: period of a full consistent re-LIST of AppWrappers, pods and nodes. "
            "It heals lost events and refreshes the pods that carry no AppWrapper label (the "
            "watcher does not publish them, but they use capacity).",
            check=_positive,
        ),
    )
    queue_scan_interval: Seconds = field(
        default=5.0,
        metadata=doc(
            "Longest pause between two queue scans (capacity check + dispatch plan); scans "
            "also run right after any change to AppWrappers, pods or nodes.",
            check=_positive,
        ),
    )
    monitor_interval: Seconds = field(
        default=5.0,
        metadata=doc(
            "Period of the completion check of dispatched items that have a completionstatus "
            "(MCAD v1 polls every 5s).",
            check=_positive,
        ),
    )
    counts_write_interval: Seconds = field(
        default=1.0,
        metadata=doc(
            "Least time between two status writes of one AppWrapper that only update its pod "
            "counts (pending/running/succeeded/failed, terminating): changes in between are "
            "written together at the end of it. Condition changes (Running, a requeue, a "
            "failure) are written at once. 0 writes every change. Each write is an API request: "
            "a gang of eight pods starting one by one made up to eight count writes, about a "
            "fifth of the dispatcher's requests in the rack-loss benchmark.",
            bounds=durations(0.0, 60.0),
        ),
    )
    head_of_line: Literal["backfill", "strict"] = field(
        default="backfill",
        metadata=doc(
            "backfill: AppWrappers that fit are dispatched behind a blocked one of the same "
            "priority, never past a blocked higher-priority one; strict: nothing passes the "
            "first AppWrapper that does not fit."
        ),
    )
    dispatch_backoff: Seconds = field(
        default=1.0,
        metadata=doc(
            "First retry delay after a transient item-creation error or an item still held by "
            "an older object; doubles per retry up to dispatch_backoff_max.",
            check=_positive,
        ),
    )
    dispatch_backoff_max: Seconds = field(
        default=60.0, metadata=doc("Cap of the dispatch retry delay.", check=_positive)
    )
    status_retries: int = field(
        default=5,
        metadata=doc(
            "Status writes re-read and retried this many times on 409 Conflict before the "
            "AppWrapper is reconciled again later.",
            check=_at_least_one,
        ),
    )
    workers: int = field(
        default=4,
        metadata=doc(
            "AppWrappers reconciled concurrently (one AppWrapper is never reconciled twice "
            "at once).",
            check=_at_least_one,
        ),
    )
    intake_workers: int = field(
        default=2,
        metadata=doc(
            "Workers beside ``workers`` that take only first looks: refusing an invalid spec "
            "(a Failed condition naming the field) and queueing a new AppWrapper. Each costs "
            "one status write and at most one Event, so a refusal never waits behind the "
            "dispatch of a large AppWrapper (default 2, range 1..64).",
            bounds=counts(1, 64),
        ),
    )
    discovery_ttl: Seconds = field(
        default=30.0,
        metadata=doc("How long API discovery answers (which kinds are served) are cached."),
    )
    lease_name: str = field(
        default="clearance-dispatcher",
        metadata=doc("Name of the coordination.k8s.io Lease that elects the active replica."),
    )
    lease_namespace: str = field(
        default="default",
        metadata=doc("Namespace of that Lease (usually the one the dispatcher runs in)."),
    )
    lease_duration: Seconds = field(
        default=15.0,
        metadata=doc(
            "Seconds a leader's claim is valid without renewal; a standby takes over after "
            "it (client-go default 15s).",
            check=_positive,
        ),
    )
    lease_retry_period: Seconds = field(
        default=2.0,
        metadata=doc(
            "Seconds between Lease acquire/renew attempts (client-go 2s).", check=_positive
        ),
    )
    lease_identity: str = field(
        default="",
        metadata=doc("Lease holder identity; empty: $POD_NAME, else host name and pid."),
    )
    kube_request_timeout: Seconds = field(
        default=30.0,
        metadata=doc("Timeout of one Kubernetes API request.", check=_positive),
    )
    test_crash_at: str = field(
        default="",
        metadata=doc(
            "Fault injection for crash tests only: the process SIGKILLs itself the first time "
            "it reaches this step (dispatch.started, dispatch.created, dispatch.published, "
            "requeue.decided, teardown.deleted, teardown.published, cleared.recorded, and "
            "committed.<phase>: between the annotation commit of a transition into <phase> and "
            "its /status write). Never set it in production."
        ),
    )
    consumer_ack_wait: Seconds = field(
        default=30.0,
        metadata=doc("JetStream ack wait of the dispatcher's consumers.", check=_positive),
    )
    kube_qps: float = field(
        default=100.0,
        metadata=doc(
            "Client-side limit on this dispatcher's Kubernetes API requests per second "
            "(default 100, twice the other services': 0 = no limit). The dispatcher's requests "
            "are the redispatch path itself - per requeue cycle of a gang about 10 (the "
            "leftover GETs and LIST, two status writes, a create and a delete per item, "
            "Events), measured in the clearance benchmark - so 100 sustains ~10 redispatches "
            "a second; at 50 the benchmark's 8 cycling gangs queued behind the bucket "
            "(removal → redispatch p50 0.9 s instead of 60 ms). Like kube-scheduler, which "
            "binds every pod and runs at 50-100; keep it below the API server's per-client "
            "share (API Priority and Fairness), which answers 429s above it.",
            bounds=Range(0.0, 10_000.0),
        ),
    )
    kube_burst: int = field(
        default=200,
        metadata=doc(
            "Requests the dispatcher's rate limit lets through at once after an idle spell "
            "(default 200 = 2 s of the rate, client-go's usual burst/QPS ratio): a wave of "
            "cleared gangs is redispatched without waiting for tokens.",
            bounds=counts(1, 100_000),
        ),
    )

    @property
    def holder_identity(self) -> str:
        return self.lease_identity or _default_identity()

    def __post_init__(self) -> None:
        super().__post_init__()
        problems = []
        if self.lease_retry_period >= self.lease_duration:
            problems.append(
                f"{self.env_name('lease_retry_period')} must be shorter than "
                f"{self.env_name('lease_duration')}"
            )
        if self.dispatch_backoff > self.dispatch_backoff_max:
            problems.append(
                f"{self.env_name('dispatch_backoff')} must not exceed "
                f"{self.env_name('dispatch_backoff_max')}"
            )
        if problems:
            raise SettingsError(problems)
