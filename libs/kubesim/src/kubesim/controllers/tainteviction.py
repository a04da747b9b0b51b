"""Taint eviction controller: deletes pods from nodes with NoExecute taints they don't tolerate.

Mirrors `taint-eviction-controller` (pkg/controller/tainteviction): a pod that does not tolerate
every NoExecute taint of its node is deleted at once; a pod whose matching tolerations carry
`tolerationSeconds` is deleted when the smallest of them expires (`<= 0` means now, absent means
never). Before deleting, the controller adds the `DisruptionTarget=True` condition (reason
`DeletionByTaintManager`) through `pods/status`, then sends a plain graceful DELETE — so on a
lost node the pod goes Terminating and, with no kubelet to finish the job, stays so (the seed
scenario, reference §1.1).

The eviction clock of a pod starts when the controller first finds it with a finite eviction
time, and keeps running while the pod stays scheduled for eviction, as in the real
`processPodOnNode` (observation time, `scheduledEviction.CreatedAt` kept across node updates).
For the unreachable taint that is within milliseconds of its `timeAdded`, which cannot be used
directly because it travels with whole-second precision and would evict up to a second early.
Pure calls without a start time fall back to the earliest `timeAdded`. Pure logic:
`decide_evictions`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubesim.client import PODS, ApiError, Informer, KubeClient
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import Obj, key_of, parse_time, set_condition
from kubesim.controllers.placement import matching_tolerations
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.writes import update_status

__all__ = ["Eviction", "TaintEvictionController", "decide_evictions", "min_toleration_seconds"]

log = logging.getLogger(__name__)
COMPONENT = "taint-eviction-controller"


@dataclass(frozen=True, slots=True)
class Eviction:
    """Evict `pod` at `due` (epoch seconds); `due <= now` means now."""

    pod: Obj
    due: float


def min_toleration_seconds(tolerations: Iterable[Mapping[str, Any]]) -> float | None:
    """`getMinTolerationTime`: smallest `tolerationSeconds`; None = tolerated forever; <=0 → 0."""
    best: float | None = None
    for toleration in tolerations:
        seconds = toleration.get("tolerationSeconds")
        if seconds is None:
            continue
        value = max(0.0, float(seconds))
        best = value if best is None else min(best, value)
    return best


def decide_evictions(
    node: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    *,
    now: float,
    started: Mapping[str, float] | None = None,
) -> list[Eviction]:
    """Which pods of `node` get evicted and when. Pods already being deleted are skipped.

    `started` maps pod UIDs to the time their eviction clock started (see module docstring).
    """
    taints = [
        t for t in (node.get("spec") or {}).get("taints") or [] if t.get("effect") == "NoExecute"
    ]
    if not taints:
        return []
    added = [a for a in (parse_time(t.get("timeAdded")) for t in taints) if a is not None]
    fallback = min(added) if added else now
    out: list[Eviction] = []
    for pod in pods:
        if (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        all_tolerated, used = matching_tolerations(pod, taints)
        if not all_tolerated:
            out.append(Eviction(dict(pod), now))
            continue
        seconds = min_toleration_seconds(used)
        if seconds is None:
            continue  # tolerated forever
        uid = str((pod.get("metadata") or {}).get("uid"))
        start = started.get(uid, fallback) if started is not None else fallback
        out.append(Eviction(dict(pod), start + seconds))
    return out


class TaintEvictionController(Reconciler):
    """Runs `decide_evictions` per tainted node and carries out the due evictions."""

    name = "taint-eviction"

    def __init__(
        self,
        client: KubeClient,
        *,
        nodes: Informer,
        pods: Informer,
        recorder: EventRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(period=None, clock=clock)
        self.client = client
        self.nodes = nodes
        self.pods = pods
        self.recorder = recorder
        self._started: dict[str, float] = {}  # pod uid -> when its eviction clock started
        self._scheduled: dict[str, Obj] = {}  # pod uid -> pod with a pending (future) eviction
        self._evicted: dict[str, float] = {}  # pod uid -> when we deleted it
        nodes.add_handler(self.trigger)
        pods.add_handler(self._on_pod)

    def _on_pod(self, kind: str, pod: Obj) -> None:
        name = (pod.get("spec") or {}).get("nodeName")
        if kind == "DELETED":
            uid = str(pod["metadata"].get("uid"))
            self._scheduled.pop(uid, None)
            self._evicted.pop(uid, None)
        node = self.nodes.get(str(name)) if name else None
        if node is not None and (node.get("spec") or {}).get("taints"):
            self.trigger()

    async def reconcile(self) -> float | None:
        if not (self.nodes.synced.is_set() and self.pods.synced.is_set()):
            return None
        now = self.clock()
        next_at: float | None = None
        still_scheduled: dict[str, Obj] = {}
        for node in self.nodes.items():
            name = str(node["metadata"]["name"])
            has_no_execute = any(
                t.get("effect") == "NoExecute" for t in (node.get("spec") or {}).get("taints") or []
            )
            if not has_no_execute:
                continue
            pods = self.pods.by_index("node", name)
            for pod in pods:  # clocks start now for pods not already scheduled
                self._started.setdefault(str(pod["metadata"].get("uid")), now)
            for eviction in decide_evictions(node, pods, now=now, started=self._started):
                uid = str(eviction.pod["metadata"].get("uid"))
                if uid in self._evicted:
                    continue
                if eviction.due > now:
                    still_scheduled[uid] = eviction.pod
                    next_at = eviction.due if next_at is None else min(next_at, eviction.due)
                    continue
                await self._evict(eviction.pod)
        for uid, pod in self._scheduled.items():
            if uid not in still_scheduled and uid not in self._evicted:
                current = self.pods.get(key_of(pod))
                if current is not None and current["metadata"].get("uid") == uid:
                    self.recorder.record(
                        current,
                        reason="TaintManagerEviction",
                        message=f"Cancelling deletion of Pod {key_of(pod)}",
                        component=COMPONENT,
                    )
        self._scheduled = still_scheduled
        # A pod that is no longer scheduled for eviction restarts its clock next time.
        self._started = {u: t for u, t in self._started.items() if u in still_scheduled}
        return next_at

    async def _evict(self, pod: Obj) -> None:
        uid = str(pod["metadata"].get("uid"))
        now = self.clock()

        def mutate(current: Obj) -> bool:
            if current["metadata"].get("uid") != uid:
                return False
            conditions = current.setdefault("status", {}).setdefault("conditions", [])
            return set_condition(
                conditions,
                kind="DisruptionTarget",
                status="True",
                reason="DeletionByTaintManager",
                message="Taint manager: deleting due to NoExecute taint",
                now=now,
                probe=True,
            )

        self.recorder.record(
            pod,
            reason="TaintManagerEviction",
            message=f"Marking for deletion Pod {key_of(pod)}",
            component=COMPONENT,
        )
        updated = await update_status(self.client, PODS, pod, mutate, informer=self.pods)
        if updated is None:
            return
        try:
            await self.client.delete(PODS.path_of(pod))  # plain DeleteOptions{}: graceful
        except ApiError as exc:
            if exc.not_found:
                return
            raise
        self._evicted[uid] = now
