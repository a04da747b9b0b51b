"""The watcher's configuration: one frozen object built from ``CLEARANCE_*`` variables.

Every field documents its default and why it has that default, because ``--help`` is
generated from these docs (``clearance.settings.render_help``). Defaults are the ones a
real cluster wants; tests shorten the timings through the same variables.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from dataclasses import field
from pathlib import Path

from clearance.settings import CommonSettings, Seconds, SettingsError, doc

_NAMESPACE_FILE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def _at_least_one(value: int) -> str | None:
    return None if value >= 1 else f"expected an integer >= 1, got {value}"


def _positive(value: float) -> str | None:
    return None if value > 0 else f"expected a value > 0, got {value}"


def _watch_timeout(value: float) -> str | None:
    return (
        None if value >= 1 else f"expected at least 1s (the API takes whole seconds), got {value}"
    )


@dataclasses.dataclass(frozen=True, kw_only=True)
class WatcherSettings(CommonSettings):
    """Settings of ``clearance-watcher`` (common NATS/HTTP/namespace settings included)."""

    kubeconfig: Path | None = field(
        default=None,
        metadata=doc(
            "Kubeconfig file. Unset: $KUBECONFIG, else in-cluster service-account config.",
            env="KUBECONFIG",
        ),
    )
    watch_timeout: Seconds = field(
        default=300.0,
        metadata=doc(
            "Server-side timeoutSeconds of one watch request (default 5m). The watch resumes\n"
            "from its last resourceVersion afterwards, so this only bounds how long one HTTP\n"
            "request lives; real API servers cap it at 30-60 min anyway.",
            check=_watch_timeout,
        ),
    )
    inactivity_timeout: Seconds = field(
        default=90.0,
        metadata=doc(
            "Reconnect a watch that delivered no event and no bookmark for this long\n"
            "(default 90s). API servers send a bookmark about every minute, so silence past\n"
            "that means a half-dead connection (like kopf's 70s idle reconnect).",
            check=_positive,
        ),
    )
    retry_delay: Seconds = field(
        default=1.0,
        metadata=doc(
            "Pause before retrying a failed LIST/WATCH request or discovery call (default\n"
            "1s): short enough to recover quickly, long enough not to hammer a sick server.",
            check=_positive,
        ),
    )
    max_in_flight: int = field(
        default=256,
        metadata=doc(
            "Publishes awaiting their JetStream ack, across all watches (default 256). When\n"
            "all are taken the watches stop reading (TCP backpressure to the API server)\n"
            "instead of buffering without bound while NATS is slow.",
            check=_at_least_one,
        ),
    )
    publish_timeout: Seconds = field(
        default=5.0,
        metadata=doc(
            "Wait for one PubAck before retrying with the same Nats-Msg-Id (default 5s).\n"
            "Retries never give up while the watcher runs: an event is never dropped.",
            check=_positive,
        ),
    )
    resync_interval: Seconds = field(
        default=43200.0,
        metadata=doc(
            "Re-publish the last state of every known object this often (default 12h;\n"
            "0 disables). CLEARANCE_KUBE keeps 24h and a new leader learns from it what\n"
            "exists; without this, an object unchanged for a day would be forgotten and its\n"
            "deletion during an outage longer than the API history not inferred. The copy\n"
            "carries the original Nats-Msg-Id, so inside the dedup window it is dropped.",
        ),
    )
    kind_linger: Seconds = field(
        default=600.0,
        metadata=doc(
            "How long the informer of a wrapped kind keeps running after no AppWrapper\n"
            "names that kind any more, while objects of it are still known (default 10m).\n"
            "It stops at once when it knows no object; the lingering catches the DELETED\n"
            "events of items garbage-collected after their AppWrapper went away.",
        ),
    )
    discovery_retry: Seconds = field(
        default=30.0,
        metadata=doc(
            "Pause before asking discovery again about a kind the API server did not serve\n"
            "(default 30s): a CRD installed after the AppWrapper is picked up without restart.",
            check=_positive,
        ),
    )
    seed_timeout: Seconds = field(
        default=30.0,
        metadata=doc(
            "Longest wait for the CLEARANCE_KUBE stream to deliver the last event per subject\n"
            "when taking over (default 30s); the informers start from it, so a deletion\n"
            "that happened while no watcher ran is published as a tombstone.",
            check=_positive,
        ),
    )
    trace_events: bool = field(
        default=False,
        metadata=doc(
            "Make a PRODUCER span (and send traceparent) for every kube event (default\n"
            "false). Kube events belong to no requeue cycle; a span each would flood the\n"
            "trace store with one-span traces and cost more than decoding the event.",
        ),
    )
    leader_election: bool = field(
        default=True,
        metadata=doc(
            "Campaign for a coordination.k8s.io Lease and publish only while holding it\n"
            "(default true), so two replicas can run. false: always publish (one replica).",
        ),
    )
    lease_name: str = field(
        default="clearance-watcher",
        metadata=doc("Name of the Lease the replicas compete for (default clearance-watcher)."),
    )
    lease_namespace: str = field(
        default="",
        metadata=doc(
            "Namespace of the Lease. Empty (default): the pod's namespace from\n"
            "$POD_NAMESPACE or the service-account mount, else 'default'.",
        ),
    )
    lease_identity: str = field(
        default="",
        metadata=doc(
            "Holder identity written into the Lease. Empty (default): the host name, i.e.\n"
            "the pod name, so a restarted pod renews its own Lease at once instead of\n"
            "waiting for it to expire. Replicas must have distinct identities.",
        ),
    )
    lease_duration: Seconds = field(
        default=15.0,
        metadata=doc(
            "How long a Lease stays valid without renewal (default 15s, as client-go): the\n"
            "standby takes over at most this long after the leader died. Must exceed the\n"
            "clock skew between nodes.",
            check=_positive,
        ),
    )
    lease_retry_period: Seconds = field(
        default=2.0,
        metadata=doc(
            "Pause between Lease acquire/renew attempts (default 2s, as client-go).",
            check=_positive,
        ),
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        problems = []
        if self.lease_retry_period >= self.lease_duration:
            problems.append(
                f"{self.env_name('lease_retry_period')} must be shorter than "
                f"{self.env_name('lease_duration')} (the leader renews within the duration)"
            )
        if problems:
            raise SettingsError(problems)

    def resolved_lease_identity(self) -> str:
        """The Lease holder identity: explicit, else the host name."""
        return self.lease_identity.strip() or socket.gethostname()

    def resolved_lease_namespace(self) -> str:
        """The Lease namespace: explicit, else the pod's own namespace, else ``default``."""
        if self.lease_namespace:
            return self.lease_namespace
        if os.environ.get("POD_NAMESPACE"):
            return os.environ["POD_NAMESPACE"]
        try:
            text = _NAMESPACE_FILE.read_text().strip()
        except OSError:
            text = ""
        return text or "default"
