"""`placement.choose_node` for a whole scheduling pass, with the work pods share done once.

A pass places every pending pod; `choose_node` re-read each node's allocatable and re-ran the
usage-free filters (readiness, unschedulable, affinity, taints) for every (pod, node) pair:
~3 s a pass with 2,000 pending pods on 64 nodes, during which the event loop served nothing.
:class:`NodeChooser` reads each node once per pass and remembers the usage-free reasons per
node for each distinct (tolerations, nodeSelector, affinity) of the pods — what those filters
read — so only the resource check runs per pair. The decisions and the failure counts are the
same as `choose_node`'s (tests/kubesim/controllers/test_choosing.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from typing import Any

from kubesim.controllers.placement import (
    Resources,
    Usage,
    allocatable_of,
    pod_requests,
    resource_reasons,
    static_reasons,
)

__all__ = ["NodeChooser"]


class _Node:
    """One node for the pass: its allocatable, and what its current usage leaves free."""

    __slots__ = ("allocatable", "count", "fit", "free", "max_pods", "name", "obj", "share", "usage")

    def __init__(self, obj: Mapping[str, Any]) -> None:
        self.obj = obj
        self.name = str((obj.get("metadata") or {}).get("name"))
        self.allocatable: Resources = allocatable_of(obj)
        self.max_pods = self.allocatable.get("pods")
        self.usage: Usage | None = None
        self.free: Resources | None = None
        self.count = 0
        self.share = 0.0
        # Resource reasons by the pod's sorted requests, for the usage `free` was made from.
        self.fit: dict[tuple[tuple[str, int, int], ...], list[str]] = {}

    def load(self, usage: Usage | None) -> None:
        """Make `free`, `share` and `fit` those of `usage` (a placement replaces the entry)."""
        if self.free is not None and usage is self.usage:
            return
        used, count = usage or ({}, 0)
        zero = Fraction(0)
        self.usage, self.count, self.fit = usage, count, {}
        self.free = free = {name: t - used.get(name, zero) for name, t in self.allocatable.items()}
        self.share = 0.0
        for resource in ("cpu", "memory"):  # LeastAllocated: the free share of cpu and memory
            total = self.allocatable.get(resource)
            if total:
                self.share += float(free.get(resource, zero) / total)

    def reasons(
        self, key: tuple[tuple[str, int, int], ...], requests: Sequence[tuple[str, Fraction]]
    ) -> list[str]:
        found = self.fit.get(key)
        if found is None:
            assert self.free is not None
            found = self.fit[key] = resource_reasons(requests, self.free, self.count, self.max_pods)
        return found


def _shape(pod: Mapping[str, Any]) -> str:
    """What the usage-free filters read of a pod (equal text: equal answers)."""
    spec = pod.get("spec") or {}
    return repr((spec.get("tolerations"), spec.get("nodeSelector"), spec.get("affinity")))


class NodeChooser:
    """Chooses nodes for the pods of one pass over `nodes` (read once: build one per pass)."""

    def __init__(self, nodes: Sequence[Mapping[str, Any]]) -> None:
        self._nodes = [_Node(node) for node in nodes]
        self._static: dict[str, list[list[str]]] = {}

    def choose(
        self, pod: Mapping[str, Any], usage: Mapping[str, Usage]
    ) -> tuple[str | None, Counter[str]]:
        """As `choose_node(pod, nodes, {}, usage=usage)`: best node by LeastAllocated, ties
        to the first name; else None and each failure reason counted over nodes."""
        shape = _shape(pod)
        statics = self._static.get(shape)
        if statics is None:
            statics = self._static[shape] = [static_reasons(pod, n.obj) for n in self._nodes]
        requests = sorted(pod_requests(pod).items())
        # The same requests as integers: hashing Fractions for every node costs more.
        key = tuple((name, amount.numerator, amount.denominator) for name, amount in requests)
        failures: Counter[str] = Counter()
        best: tuple[float, str] | None = None
        for node, static in zip(self._nodes, statics, strict=True):
            node.load(usage.get(node.name))
            reasons = node.reasons(key, requests)
            if static or reasons:
                for reason in set(static + reasons):
                    failures[reason] += 1
                continue
            candidate = (-node.share, node.name)
            if best is None or candidate < best:
                best = candidate
        return (best[1] if best else None), failures
