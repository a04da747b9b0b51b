"""Span attribute names: OpenTelemetry semantic conventions, plus one `clearance.*` namespace.

This module owns the vocabulary of span attributes shared by the three services. Where the
semantic conventions (the `opentelemetry-semantic-conventions` package) name a concept —
the Kubernetes namespace, pod, node and workload kinds, the messaging system and destination
— the constant is taken from the package, so a rename upstream shows up here; everything the
conventions do not cover (the AppWrapper, the attempt, teardown evidence, escalation steps,
object counts) lives under `clearance.` and is defined once below. Builders return plain dicts
so callers can merge them into `attributes=`; :func:`object_attributes` adds the semconv
`k8s.<kind>.name`/`.uid` pair for the kinds the conventions know, beside the generic
`clearance.object.*` triple that every object carries whatever its kind.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes import messaging_attributes as _messaging
from opentelemetry.semconv.attributes import k8s_attributes as _k8s

# ---------------------------------------------------------------- semantic conventions

K8S_NAMESPACE_NAME: Final = _k8s.K8S_NAMESPACE_NAME
K8S_POD_NAME: Final = _k8s.K8S_POD_NAME
K8S_POD_UID: Final = _k8s.K8S_POD_UID
K8S_NODE_NAME: Final = _k8s.K8S_NODE_NAME
K8S_JOB_NAME: Final = _k8s.K8S_JOB_NAME
K8S_JOB_UID: Final = _k8s.K8S_JOB_UID

MESSAGING_SYSTEM: Final = _messaging.MESSAGING_SYSTEM
MESSAGING_DESTINATION_NAME: Final = _messaging.MESSAGING_DESTINATION_NAME
MESSAGING_MESSAGE_ID: Final = _messaging.MESSAGING_MESSAGE_ID
MESSAGING_OPERATION_TYPE: Final = _messaging.MESSAGING_OPERATION_TYPE

_SEMCONV_KINDS: Final[dict[str, tuple[str, str]]] = {
    # kind (core or apps/batch group) → (name attribute, uid attribute)
    "Pod": (_k8s.K8S_POD_NAME, _k8s.K8S_POD_UID),
    "Job": (_k8s.K8S_JOB_NAME, _k8s.K8S_JOB_UID),
    "CronJob": (_k8s.K8S_CRONJOB_NAME, _k8s.K8S_CRONJOB_UID),
    "Deployment": (_k8s.K8S_DEPLOYMENT_NAME, _k8s.K8S_DEPLOYMENT_UID),
    "ReplicaSet": (_k8s.K8S_REPLICASET_NAME, _k8s.K8S_REPLICASET_UID),
    "StatefulSet": (_k8s.K8S_STATEFULSET_NAME, _k8s.K8S_STATEFULSET_UID),
    "DaemonSet": (_k8s.K8S_DAEMONSET_NAME, _k8s.K8S_DAEMONSET_UID),
}
_SEMCONV_GROUPS: Final = frozenset({"", "apps", "batch"})

# ------------------------------------------------------------------------ clearance.*

APPWRAPPER_NAME: Final = "clearance.appwrapper.name"
"""Name of the AppWrapper (its namespace is `k8s.namespace.name`)."""
APPWRAPPER_UID: Final = "clearance.appwrapper.uid"
ATTEMPT: Final = "clearance.attempt"
"""The attempt the span is about: the torn-down attempt for teardown spans (as in events)."""
REASON: Final = "clearance.reason"
OUTCOME: Final = "clearance.outcome"
"""How a `requeue.cycle` root ended (redispatched, failed, appwrapper deleted, …)."""
RECOVERED: Final = "clearance.recovered"
"""True on a cycle root re-created after a restart (its original ids and start time)."""
STEP: Final = "clearance.step"
"""Escalation step: stuck_alert, force_deletion or finalizer_removal."""
OBJECT_KIND: Final = "clearance.object.kind"
OBJECT_NAME: Final = "clearance.object.name"
OBJECT_UID: Final = "clearance.object.uid"
CONFIRMATION_HOW: Final = "clearance.confirmation.how"
"""Evidence that an object is gone: watch_deleted, get_404 or uid_changed."""
OBJECT_COUNT: Final = "clearance.object_count"
"""Objects a teardown tracked (or confirmed, on `cleared`)."""
OPEN_OBJECT_COUNT: Final = "clearance.open_object_count"
STUCK_OBJECT_COUNT: Final = "clearance.stuck_object_count"
FORCED_OBJECT_COUNT: Final = "clearance.forced_object_count"
UNFINALIZED_OBJECT_COUNT: Final = "clearance.unfinalized_object_count"

# The semantic conventions define system-specific messaging attributes for Kafka, RabbitMQ and
# others but none for NATS, and custom names must not be put in their namespaces: the JetStream
# facts of a publish or a delivery are ours.
NATS_STREAM: Final = "clearance.nats.stream"
"""The JetStream stream that stored (or delivered) the message."""
NATS_SEQUENCE: Final = "clearance.nats.sequence"
"""Its stream sequence number."""
NATS_DUPLICATE: Final = "clearance.nats.duplicate"
"""True when JetStream dropped the publish as a duplicate of its Msg-Id."""
NATS_PUBLISH_ATTEMPTS: Final = "clearance.nats.publish_attempts"
"""Attempts a publish needed (set only when more than one)."""
NATS_DELIVERY_COUNT: Final = "clearance.nats.delivery_count"
"""How many times JetStream has delivered this message (1 = first delivery)."""

Attributes = dict[str, str | int | bool]


def appwrapper_attributes(*, namespace: str, name: str, uid: str, attempt: int) -> Attributes:
    """The AppWrapper and attempt a span belongs to."""
    return {
        K8S_NAMESPACE_NAME: namespace,
        APPWRAPPER_NAME: name,
        APPWRAPPER_UID: uid,
        ATTEMPT: attempt,
    }


def object_attributes(
    *, api_version: str, kind: str, name: str, uid: str, namespace: str | None
) -> Attributes:
    """One Kubernetes object: `clearance.object.*` always, `k8s.<kind>.*` where semconv has it."""
    attributes: Attributes = {OBJECT_KIND: kind, OBJECT_NAME: name, OBJECT_UID: uid}
    if namespace:
        attributes[K8S_NAMESPACE_NAME] = namespace
    group = api_version.rpartition("/")[0]
    semconv = _SEMCONV_KINDS.get(kind)
    if semconv is not None and group in _SEMCONV_GROUPS:
        attributes[semconv[0]] = name
        attributes[semconv[1]] = uid
    return attributes


__all__ = [
    "APPWRAPPER_NAME",
    "APPWRAPPER_UID",
    "ATTEMPT",
    "CONFIRMATION_HOW",
    "FORCED_OBJECT_COUNT",
    "K8S_JOB_NAME",
    "K8S_JOB_UID",
    "K8S_NAMESPACE_NAME",
    "K8S_NODE_NAME",
    "K8S_POD_NAME",
    "K8S_POD_UID",
    "MESSAGING_DESTINATION_NAME",
    "MESSAGING_MESSAGE_ID",
    "MESSAGING_OPERATION_TYPE",
    "MESSAGING_SYSTEM",
    "OBJECT_COUNT",
    "OBJECT_KIND",
    "OBJECT_NAME",
    "OBJECT_UID",
    "OPEN_OBJECT_COUNT",
    "OUTCOME",
    "REASON",
    "RECOVERED",
    "STEP",
    "STUCK_OBJECT_COUNT",
    "UNFINALIZED_OBJECT_COUNT",
    "Attributes",
    "appwrapper_attributes",
    "object_attributes",
]
