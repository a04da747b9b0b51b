"""Events above the NATS max payload: trimmed to fit, or dropped with an error naming them.

Only an event NATS can never accept is touched: foreign labels go first, then everything but
identity (a pod or node, or any DELETED); an ADDED/MODIFIED AppWrapper cannot lose its spec
(the dispatcher acts on it), so it is dropped with an error instead.
"""

from __future__ import annotations

import logging
from typing import Final

import msgspec

from clearance import labels
from clearance.events import AppWrapperObject, KubeEvent, NodeObject, PodObject, SnapshotProblem
from clearance.telemetry import ContextLogger
from clearance_watcher.decoding import Snapshot, encode_event
from clearance_watcher.metrics import WatcherMetrics

log = ContextLogger(logging.getLogger(__name__))

_KEEP_LABELS: Final = frozenset(
    {
        labels.MCAD_APPWRAPPER,
        labels.CODEFLARE_APPWRAPPER,
        labels.NAMESPACE,
        labels.ATTEMPT,
        labels.APPWRAPPER_UID,
    }
)


def identity_only(obj: Snapshot) -> Snapshot:
    """The same object with nothing but identity (kind, apiVersion, metadata)."""
    if isinstance(obj, PodObject):
        return PodObject(metadata=obj.metadata)
    if isinstance(obj, NodeObject):
        return NodeObject(metadata=obj.metadata)
    if isinstance(obj, AppWrapperObject):
        return AppWrapperObject(metadata=obj.metadata, kind=obj.kind, api_version=obj.api_version)
    return obj


def _reduced(event: KubeEvent, obj: Snapshot, message: str, dropped: tuple[str, ...]) -> KubeEvent:
    """``event`` carrying the reduced ``obj``, its ``problem`` saying what was left out."""
    before = event.problem
    if before is None:
        problem = SnapshotProblem(message=message, path="$", dropped=dropped)
    else:  # already partial: keep what failed first, add what the reduction left out
        problem = msgspec.structs.replace(before, dropped=(*before.dropped, *dropped))
    return msgspec.structs.replace(event, object=obj, problem=problem)


def shrink(
    event: KubeEvent, data: bytes, *, metrics: WatcherMetrics
) -> tuple[KubeEvent, bytes] | None:
    """Fit an event above the NATS max payload: drop foreign labels, then all but identity.

    An ADDED/MODIFIED AppWrapper cannot lose its spec (the dispatcher acts on it), so
    it is dropped with an error instead; a DELETED is always kept, as identity at least.
    """
    obj = event.object
    meta = obj.metadata
    who = {
        "kind": event.kube_kind,
        "action": event.action,
        "namespace": meta.namespace,
        "object_name": meta.name,
        "uid": meta.uid,
        "bytes": len(data),
    }
    smaller: KubeEvent | None = None
    outcome = ""
    too_large = f"event of {len(data)} bytes is above the NATS max payload"
    if any(key not in _KEEP_LABELS for key in meta.labels):
        kept = {k: v for k, v in meta.labels.items() if k in _KEEP_LABELS}
        trimmed = msgspec.structs.replace(meta, labels=kept)
        smaller = _reduced(
            event,
            msgspec.structs.replace(obj, metadata=trimmed),
            f"{too_large}: labels not set by Clearance or MCAD dropped",
            ("$.metadata.labels",),
        )
        outcome = "trimmed"
    elif event.action == "DELETED" or event.kube_kind in ("pod", "node"):
        bare = identity_only(obj)
        if bare is not obj:
            smaller = _reduced(
                event,
                bare,
                f"{too_large}: only its identity is published",
                ("$.spec", "$.status"),
            )
            outcome = "identity"
    if smaller is not None:
        encoded = encode_event(smaller)
        if len(encoded) < len(data):
            log.warning(
                "event above the NATS max payload; publishing a reduced snapshot",
                extra={**who, "reduced_to": outcome, "reduced_bytes": len(encoded)},
            )
            metrics.oversized.labels(event.kube_kind, outcome).inc()
            return smaller, encoded
    log.error("event above the NATS max payload cannot be published; dropped", extra=who)
    metrics.oversized.labels(event.kube_kind, "dropped").inc()
    return None
