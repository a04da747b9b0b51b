"""The constrained field types every event uses (names, uids, attempts, timestamps,
traceparents) and the base Struct that spells Python attributes the Kubernetes way on
the wire. Nothing here is an event; it is the vocabulary the other event modules share.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Final, Literal

from msgspec import Meta, Struct

from clearance import subjects

UtcDateTime = Annotated[
    datetime, Meta(tz=True, description="RFC 3339 timestamp with a UTC offset.")
]
Name = Annotated[str, Meta(min_length=1, max_length=253, description="Kubernetes object name.")]
Namespace = Annotated[str, Meta(min_length=1, max_length=63, description="Kubernetes namespace.")]
# Kubernetes UIDs are UUIDs; the pattern is looser on purpose (any simulator or
# future format), but forbids ':' because uids are joined with ':' in message ids.
Uid = Annotated[
    str,
    Meta(
        min_length=1,
        max_length=128,
        pattern=r"^[0-9A-Za-z][0-9A-Za-z._-]*$",
        description="Kubernetes object UID.",
    ),
]
Kind = Annotated[str, Meta(min_length=1, max_length=128, description="Kubernetes kind.")]
ApiVersion = Annotated[
    str, Meta(min_length=1, max_length=253, description="Kubernetes apiVersion.")
]
Attempt = Annotated[
    int, Meta(ge=1, description="Dispatch attempt: 1 for the first dispatch, +1 per requeue.")
]
Count = Annotated[int, Meta(ge=0)]
Traceparent = Annotated[
    str,
    Meta(
        pattern=r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
        description="W3C traceparent of the requeue.cycle root span.",
    ),
]
Severity = subjects.Severity
WatchAction = Literal["ADDED", "MODIFIED", "DELETED"]

_KUBE_NAMES: Final = {"generic_items": "GenericItems", "nvidia_gpu": "nvidia.com/gpu"}


def _kube_name(name: str) -> str:
    """Python attribute → Kubernetes JSON name (camelCase plus a few exceptions)."""
    if name in _KUBE_NAMES:
        return _KUBE_NAMES[name]
    head, *rest = name.split("_")
    return head + "".join(part.capitalize() for part in rest)


class _Kube(Struct, frozen=True, kw_only=True, rename=_kube_name):
    """Base of every Struct that mirrors Kubernetes JSON."""
