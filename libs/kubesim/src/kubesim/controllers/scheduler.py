"""A default-scheduler stand-in: binds Pending pods to nodes through the `binding` subresource.

Filters as the real plugins do for the parts the simulator models (see `placement.fits`), scores
LeastAllocated, binds with `POST pods/<name>/binding`, and reports an unschedulable pod with a
`PodScheduled=False/Unschedulable` condition plus a `FailedScheduling` Warning event. Pods are
"assumed" on their node right after binding so the next pass counts their requests before the
watch delivers the update, as the real scheduler cache does.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kubesim.client import PODS, ApiError, Informer, KubeClient
from kubesim.controllers.choosing import NodeChooser
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.node_usage import UsageIndex
from kubesim.controllers.objects import Obj, is_terminal, key_of, set_condition
from kubesim.controllers.placement import (
    Usage,
    format_unschedulable,
    node_usage,
    pod_requests,
)
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.writes import update_status

__all__ = [
    "SCHEDULER_NAME",
    "Placement",
    "Scheduler",
    "decide_placements",
    "is_gated",
    "needs_scheduling",
    "place_pending",
]

log = logging.getLogger(__name__)
SCHEDULER_NAME = "default-scheduler"
GATED_MESSAGE = "Scheduling is blocked due to non-empty scheduling gates"


def needs_scheduling(pod: Mapping[str, Any], *, scheduler_name: str = SCHEDULER_NAME) -> bool:
    """Unbound, not being deleted, not terminal, and addressed to this scheduler."""
    spec = pod.get("spec") or {}
    meta = pod.get("metadata") or {}
    return (
        not spec.get("nodeName")
        and not meta.get("deletionTimestamp")
        and not is_terminal(pod)
        and (spec.get("schedulerName") or SCHEDULER_NAME) == scheduler_name
    )


def is_gated(pod: Mapping[str, Any]) -> bool:
    """Pods with `spec.schedulingGates` wait (Kueue gates pods this way until admission)."""
    return bool((pod.get("spec") or {}).get("schedulingGates"))


@dataclass(frozen=True, slots=True)
class Placement:
    """One scheduling decision: bind `pod` to `node`, or explain why no node fits."""

    pod: Obj
    node: str | None
    message: str = ""
    reason: str = "Unschedulable"


def decide_placements(
    pods: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    *,
    scheduler_name: str = SCHEDULER_NAME,
) -> list[Placement]:
    """Schedule every pending pod in priority then FIFO order, counting earlier decisions.

    Sums each node's usage from the bound pods in `pods`; the scheduler itself keeps those sums
    running (:class:`~kubesim.controllers.node_usage.UsageIndex`) and calls `place_pending`.
    """
    pods_by_node: dict[str, list[Mapping[str, Any]]] = {}
    unbound: list[Mapping[str, Any]] = []
    for pod in pods:
        node_name = (pod.get("spec") or {}).get("nodeName")
        if node_name:
            pods_by_node.setdefault(str(node_name), []).append(pod)
        else:
            unbound.append(pod)
    usage = {name: node_usage(bound) for name, bound in pods_by_node.items()}
    return place_pending(unbound, nodes, usage, scheduler_name=scheduler_name)


def place_pending(
    unbound: Sequence[Mapping[str, Any]],
    nodes: Sequence[Mapping[str, Any]],
    usage: dict[str, Usage],
    *,
    scheduler_name: str = SCHEDULER_NAME,
) -> list[Placement]:
    """`decide_placements` given each node's usage already (changed in place as pods are placed).

    `unbound` are pods without a node; those this scheduler should place are picked from them.
    """
    pending = [p for p in unbound if needs_scheduling(p, scheduler_name=scheduler_name)]
    decisions: list[Placement] = [
        Placement(dict(p), None, GATED_MESSAGE, "SchedulingGated") for p in pending if is_gated(p)
    ]
    pending = [p for p in pending if not is_gated(p)]
    pending.sort(
        key=lambda p: (
            -int((p.get("spec") or {}).get("priority") or 0),
            str((p.get("metadata") or {}).get("creationTimestamp") or ""),
            str((p.get("metadata") or {}).get("name")),
        )
    )
    chooser = NodeChooser(nodes)
    for pod in pending:
        node, failures = chooser.choose(pod, usage)
        if node is None:
            decisions.append(Placement(dict(pod), None, format_unschedulable(len(nodes), failures)))
            continue
        used, count = usage.get(node, ({}, 0))
        used = dict(used)
        for name, amount in pod_requests(pod).items():
            used[name] = used.get(name, Fraction(0)) + amount
        usage[node] = (used, count + 1)
        decisions.append(Placement(dict(pod), node))
    return decisions


BIND_CONCURRENCY = 64
"""Bindings a pass has in flight at once. kube-scheduler binds in goroutines apart from the
scheduling cycle; one at a time, each waiting for its answer, 2,000 pods took minutes on a
busy event loop."""


async def _all(binds: list[Coroutine[Any, Any, None]]) -> None:
    """Run `binds` together; when all are done, raise the first failure (the pass is retried)."""
    results = await asyncio.gather(*binds, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result


class Scheduler(Reconciler):
    """Binds pods; `interval` bounds how long an unschedulable pod waits for a retry."""

    name = "scheduler"

    def __init__(
        self,
        client: KubeClient,
        *,
        pods: Informer,
        nodes: Informer,
        recorder: EventRecorder,
        retry_interval: float = 1.0,
        scheduler_name: str = SCHEDULER_NAME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(period=retry_interval, clock=clock)
        self.client = client
        self.pods = pods
        self.nodes = nodes
        self.recorder = recorder
        self.scheduler_name = scheduler_name
        # pod uid -> (node, assumed at, cache key)
        self._assumed: dict[str, tuple[str, float, str]] = {}
        self._reported: dict[str, str] = {}  # pod uid -> last unschedulable message
        self.binding_subresource = True
        self.usage = UsageIndex()
        pods.add_observer(self.usage)
        pods.add_handler(self._on_pod)
        nodes.add_handler(self.trigger)

    def _on_pod(self, kind: str, pod: Obj) -> None:
        spec = pod.get("spec") or {}
        if kind == "DELETED" or spec.get("nodeName") or is_terminal(pod):
            uid = str((pod.get("metadata") or {}).get("uid"))
            self._reported.pop(uid, None)
            if kind == "DELETED" or is_terminal(pod):
                self._assumed.pop(uid, None)
        self.trigger()

    def _view(self) -> tuple[list[Obj], dict[str, Usage]]:
        """Unbound cached pods and each node's usage, with assumed bindings applied.

        An assumed pod counts on its node (and is no candidate) until the watch shows it bound,
        it goes away, or 30 s pass.
        """
        now = self.clock()
        usage = self.usage.snapshot()
        candidates: list[Obj] = []
        for pod in self.usage.unbound():
            uid = str((pod.get("metadata") or {}).get("uid"))
            assumed = self._assumed.get(uid)
            if assumed is None:
                candidates.append(pod)
            elif now - assumed[1] >= 30.0:
                self._assumed.pop(uid, None)
                candidates.append(pod)
            elif not is_terminal(pod):
                used, count = usage.get(assumed[0], ({}, 0))
                for name, amount in pod_requests(pod).items():
                    used[name] = used.get(name, Fraction(0)) + amount
                usage[assumed[0]] = (used, count + 1)
        # Forget assumptions the cache confirms (bound) or that name a pod no longer there.
        for uid, (_, _, key) in list(self._assumed.items()):
            current = self.pods.get(key)
            if (
                current is None
                or str((current.get("metadata") or {}).get("uid")) != uid
                or (current.get("spec") or {}).get("nodeName")
            ):
                self._assumed.pop(uid, None)
        return candidates, usage

    async def reconcile(self) -> float | None:
        if not self.pods.synced.is_set() or not self.nodes.synced.is_set():
            return None
        nodes = sorted(self.nodes.items(), key=lambda n: str(n["metadata"]["name"]))
        candidates, usage = self._view()
        binds: list[Coroutine[Any, Any, None]] = []
        for placement in place_pending(
            candidates, nodes, usage, scheduler_name=self.scheduler_name
        ):
            if placement.node is not None:
                binds.append(self._bind(placement.pod, placement.node))
                if len(binds) >= BIND_CONCURRENCY:
                    await _all(binds)
                    binds = []
            else:
                await self._report_unschedulable(
                    placement.pod, placement.message, reason=placement.reason
                )
        await _all(binds)
        return None

    async def _bind(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        uid = str(meta.get("uid"))
        binding = {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": meta["name"], "namespace": meta.get("namespace"), "uid": uid},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            if self.binding_subresource:
                await self.client.create(PODS.path_of(pod, subresource="binding"), binding)
            else:
                await self._bind_by_patch(pod, node)
        except ApiError as exc:
            if exc.status in (404, 405) and f'"{meta["name"]}"' not in exc.message:
                # The server has no binding subresource: fall back to setting spec.nodeName.
                log.warning("binding subresource unavailable (%s); patching nodeName", exc)
                self.binding_subresource = False
                await self._bind_by_patch(pod, node)
            elif exc.status in (404, 409):
                return  # deleted or already bound meanwhile
            else:
                raise
        self._assumed[uid] = (node, self.clock(), key_of(pod))
        self._reported.pop(uid, None)
        self.recorder.record(
            pod,
            reason="Scheduled",
            message=f"Successfully assigned {meta.get('namespace')}/{meta['name']} to {node}",
            component=self.scheduler_name,
        )

    async def _bind_by_patch(self, pod: Obj, node: str) -> None:
        meta = pod["metadata"]
        await self.client.patch(
            PODS.path_of(pod),
            {"metadata": {"uid": meta.get("uid")}, "spec": {"nodeName": node}},
            patch_type="merge",
        )

    async def _report_unschedulable(
        self, pod: Obj, message: str, *, reason: str = "Unschedulable"
    ) -> None:
        uid = str(pod["metadata"].get("uid"))
        if self._reported.get(uid) == message:
            return
        now = self.clock()

        def mutate(current: Obj) -> bool:
            status = current.setdefault("status", {})
            status.setdefault("phase", "Pending")
            conditions = status.setdefault("conditions", [])
            return set_condition(
                conditions,
                kind="PodScheduled",
                status="False",
                reason=reason,
                message=message,
                now=now,
                probe=True,
            )

        result = await update_status(self.client, PODS, pod, mutate, informer=self.pods)
        if result is None:
            return
        self._reported[uid] = message
        if reason != "Unschedulable":
            return
        self.recorder.record(
            pod,
            reason="FailedScheduling",
            message=message,
            component=self.scheduler_name,
            event_type="Warning",
        )
