"""Helpers over raw Kubernetes object dicts shared by the controllers: timestamps, keys, conditions.

The controllers work on plain JSON dicts (no client models: decoding thousands of pods into
classes would dominate the simulator's CPU), so the few accessors they share live here.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

__all__ = [
    "Obj",
    "condition",
    "controller_ref",
    "format_micro_time",
    "format_time",
    "is_terminal",
    "key_of",
    "owner_uids",
    "parse_time",
    "rv_int",
    "set_condition",
]

Obj = dict[str, Any]


def format_time(ts: float) -> str:
    """RFC 3339 with second precision, like `metav1.Time` on the wire."""
    return dt.datetime.fromtimestamp(int(ts), tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def format_micro_time(ts: float) -> str:
    """RFC 3339 with microseconds, like `metav1.MicroTime` (Lease renewTime, Event eventTime)."""
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> float | None:
    """Parse a `metav1.Time`/`MicroTime` string into epoch seconds; None when absent or invalid."""
    if not isinstance(value, str) or not value:
        return None
    text = value.replace("Z", "+00:00")
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def key_of(obj: Mapping[str, Any]) -> str:
    """`namespace/name` (or `name` for cluster-scoped objects), the informer cache key."""
    meta = obj.get("metadata") or {}
    namespace = meta.get("namespace")
    return f"{namespace}/{meta.get('name')}" if namespace else str(meta.get("name"))


def rv_int(obj: Mapping[str, Any]) -> int:
    """kubesim's resourceVersions are one global integer counter; compare them as integers.

    Clients of a real server must treat resourceVersions as opaque; the controllers are part of
    the simulator, so they may use the counter to keep their caches from going backwards.
    """
    raw = (obj.get("metadata") or {}).get("resourceVersion") or "0"
    try:
        return int(raw)
    except ValueError:
        return 0


def condition(obj: Mapping[str, Any], kind: str) -> Obj | None:
    """The status condition of type `kind`, or None."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == kind:
            return dict(cond)
    return None


def set_condition(
    conditions: list[Obj],
    *,
    kind: str,
    status: str,
    now: float,
    reason: str | None = None,
    message: str | None = None,
    probe: bool = False,
    heartbeat: bool = False,
) -> bool:
    """Upsert a condition in place; lastTransitionTime moves only when the status changes.

    `probe` adds `lastProbeTime` (pod conditions carry it, as null when unknown), `heartbeat`
    refreshes `lastHeartbeatTime` (node conditions). Returns True when anything changed.
    """
    stamp = format_time(now)
    for cond in conditions:
        if cond.get("type") != kind:
            continue
        before = dict(cond)
        if cond.get("status") != status:
            cond["lastTransitionTime"] = stamp
        cond["status"] = status
        if reason is not None:
            cond["reason"] = reason
        if message is not None:
            cond["message"] = message
        if heartbeat:
            cond["lastHeartbeatTime"] = stamp
        return before != cond
    new: Obj = {"type": kind, "status": status, "lastTransitionTime": stamp}
    if probe:
        new["lastProbeTime"] = None
    if heartbeat:
        new["lastHeartbeatTime"] = stamp
    if reason is not None:
        new["reason"] = reason
    if message is not None:
        new["message"] = message
    conditions.append(new)
    return True


def is_terminal(pod: Mapping[str, Any]) -> bool:
    """Pod phase Succeeded or Failed."""
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def controller_ref(obj: Mapping[str, Any]) -> Obj | None:
    """The ownerReference with `controller: true`, or None."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return dict(ref)
    return None


def owner_uids(obj: Mapping[str, Any]) -> list[str]:
    """UIDs of every ownerReference."""
    return [str(r.get("uid")) for r in (obj.get("metadata") or {}).get("ownerReferences") or []]
