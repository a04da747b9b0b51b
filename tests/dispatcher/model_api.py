"""The dispatcher model's ground truth: one AppWrapper, its items and pods, in an in-memory API.

This module owns what the dispatcher's state machine (test_model_cycle) treats as the truth:
the AppWrapper object with a resourceVersion and a status changed only by JSON merge patches
that carry the resourceVersion they were computed from (409 otherwise, as the API server
answers), the Job items the dispatcher creates (name collisions answered 409), the pods the
Job controller creates for them (Running for an attempt the world lets run, Failed otherwise),
the garbage collector and kubelets that remove them after a deletion (unless a pod sits on a
lost node), and the watch stream of pod and AppWrapper changes that reaches the dispatcher's
cache on time, late or never. No sockets, no clocks: the machine passes ``now``.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import msgspec

from clearance import labels
from clearance.events import PodObject

T0 = datetime(2026, 12, 2, 12, 0, 0, tzinfo=UTC)
NAMESPACE = "team-a"
NAME = "job1"
UID = "aw-uid-1"
KEY = (NAMESPACE, NAME)

Fate = Literal["on_time", "late", "lost"]


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def appwrapper(
    *, pods: int, wait: int, growth: str, max_wait: int, limit: int, pause: int
) -> dict[str, Any]:
    """An MCAD v1 AppWrapper of one Job of ``pods`` pods, all needed (minAvailable)."""
    template = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{NAME}-job"},
        "spec": {
            "parallelism": pods,
            "completions": pods,
            "template": {
                "metadata": {},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "resources": {"requests": {"cpu": "1"}}}],
                },
            },
        },
    }
    requeuing = {
        "timeInSeconds": wait,
        "growthType": growth,
        "maxTimeInSeconds": max_wait,
        "maxNumRequeuings": limit,
        "pauseTimeInSeconds": pause,
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {
            "name": NAME,
            "namespace": NAMESPACE,
            "uid": UID,
            "generation": 1,
            "resourceVersion": "1",
            "creationTimestamp": "2026-12-02T11:00:00Z",
        },
        "spec": {
            "schedulingSpec": {"minAvailable": pods, "requeuing": requeuing},
            "resources": {"GenericItems": [{"replicas": 1, "generictemplate": template}]},
        },
        "status": {},
    }


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (what the API server applies for merge-patch+json)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


@dataclass
class Pod:
    uid: str
    name: str
    attempt: int
    owner: str
    phase: str
    deleting: bool = False
    node_lost: bool = False
    rv: int = 1

    def raw(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": NAMESPACE,
            "uid": self.uid,
            "resourceVersion": str(self.rv),
            "labels": labels.stamp(appwrapper=NAME, namespace=NAMESPACE, attempt=self.attempt),
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": f"{NAME}-job", "uid": self.owner}
            ],
        }
        if self.deleting:
            meta["deletionTimestamp"] = "2026-12-02T12:00:00Z"
        return {"metadata": meta, "spec": {"nodeName": "node-1"}, "status": {"phase": self.phase}}

    def snapshot(self) -> PodObject:
        return msgspec.convert(self.raw(), PodObject)


@dataclass(frozen=True)
class Change:
    """One watch event for the dispatcher's cache: a pod (added/changed/deleted) or the AW."""

    kind: Literal["pod", "pod_deleted", "appwrapper"]
    body: Any


@dataclass
class Api:
    aw: dict[str, Any]
    items: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Items by name (the Job of one attempt at a time, its name is the same in every one)."""
    pods: dict[str, Pod] = field(default_factory=dict)
    fresh: list[Change] = field(default_factory=list)
    pending: list[Change] = field(default_factory=list)
    late: list[Change] = field(default_factory=list)
    delivered: list[Change] = field(default_factory=list)
    _uids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    _rv: itertools.count[int] = field(default_factory=lambda: itertools.count(2))

    # ----------------------------------------------------------------- the AppWrapper

    def get_aw(self) -> dict[str, Any]:
        return copy.deepcopy(self.aw)

    def patch_status(self, body: dict[str, Any], *, rv: str | None) -> dict[str, Any] | None:
        """The guarded merge patch on /status: the new object, or None for 409 Conflict."""
        if rv != self.aw["metadata"]["resourceVersion"]:
            return None
        self.aw = merge_patch(self.aw, {"status": body.get("status", {})})
        self.aw["metadata"]["resourceVersion"] = str(next(self._rv))
        self.fresh.append(Change("appwrapper", self.get_aw()))
        return self.get_aw()

    # --------------------------------------------------------------------- objects

    def create_item(self, body: dict[str, Any], *, runs: bool) -> dict[str, Any] | None:
        """Create the Job (None: 409, the name is taken); its controller creates the pods."""
        name = body["metadata"]["name"]
        if name in self.items:
            return None
        obj = copy.deepcopy(body)
        obj["metadata"]["uid"] = f"j{next(self._uids)}"
        self.items[name] = obj
        attempt = labels.attempt_of(obj["metadata"]["labels"]) or 0
        for i in range(int(obj["spec"]["parallelism"])):
            pod = Pod(
                uid=f"p{next(self._uids)}",
                name=f"{name}-{attempt}-{i}",
                attempt=attempt,
                owner=obj["metadata"]["uid"],
                phase="Running" if runs else "Failed",
            )
            self.pods[pod.uid] = pod
            self.fresh.append(Change("pod", pod.snapshot()))
        return copy.deepcopy(obj)

    def delete_item(self, name: str, *, uid: str) -> bool:
        """Background deletion with a UID precondition: the Job goes, its pods follow."""
        obj = self.items.get(name)
        if obj is None or obj["metadata"]["uid"] != uid:
            return False
        del self.items[name]
        return True

    def collect_garbage(self) -> None:
        owners = {o["metadata"]["uid"] for o in self.items.values()}
        for pod in self.pods.values():
            if pod.owner not in owners and not pod.deleting:
                self.touch(pod, deleting=True)

    def touch(self, pod: Pod, **changes: Any) -> None:
        for name, value in changes.items():
            setattr(pod, name, value)
        pod.rv = next(self._rv)
        self.fresh.append(Change("pod", pod.snapshot()))

    def remove_pod(self, pod: Pod) -> None:
        del self.pods[pod.uid]
        self.fresh.append(Change("pod_deleted", pod.uid))

    def kubelets_finish(self) -> None:
        for pod in list(self.pods.values()):
            if pod.deleting and not pod.node_lost:
                self.remove_pod(pod)

    def list_pods(self) -> tuple[list[PodObject], str]:
        """Quorum LIST of the AppWrapper's pods, with the list's resourceVersion."""
        rv = str(next(self._rv))
        return [p.snapshot() for p in sorted(self.pods.values(), key=lambda p: p.uid)], rv

    def objects_of(self, *, before: int) -> list[str]:
        """Names of items and pods of an attempt earlier than ``before`` that still exist."""
        found = [
            n
            for n, o in self.items.items()
            if (labels.attempt_of(o["metadata"]["labels"]) or 0) < before
        ]
        return found + [p.name for p in self.pods.values() if p.attempt < before]

    # ------------------------------------------------------------------ the stream

    def route(self, fate: Fate) -> None:
        change = self.fresh.pop(0)
        if fate == "on_time":
            self.pending.append(change)
        elif fate == "late":
            self.late.append(change)

    def next_change(self) -> Change | None:
        if not self.pending:
            return None
        change = self.pending.pop(0)
        self.delivered.append(change)
        return change

    def late_change(self, index: int) -> Change | None:
        if not self.late:
            return None
        change = self.late.pop(index % len(self.late))
        self.delivered.append(change)
        return change
