"""The fake kubelet's data and pure decisions: its timings and node shape, the per-pod
record, `decide_pod_step` (what to do next with one pod, given the clock), the
run-time and exit-code annotations, the QoS class, and the container-status and
condition builders. No I/O.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubesim.controllers.objects import (
    Obj,
    controller_ref,
    is_terminal,
    parse_time,
)
from kubesim.durations import DurationError, parse_duration

RUN_TIME_ANNOTATION = "kubesim.dev/run-time"
EXIT_CODE_ANNOTATION = "kubesim.dev/exit-code"
NODE_CONDITIONS: tuple[tuple[str, str, str, str], ...] = (
    (
        "MemoryPressure",
        "False",
        "KubeletHasSufficientMemory",
        "kubelet has sufficient memory available",
    ),
    ("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
    ("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
)
KUBELET_VERSION = "v1.32.0"
# Exit code of a container stopped by SIGTERM (128 + 15): a killed pod ends Failed, which is also
# what the real kubelet reports for a deleted running pod whose process does not trap SIGTERM.
KILLED_EXIT_CODE = 143


@dataclass(frozen=True, slots=True)
class KubeletTimings:
    """Per-node timings; see `ClusterConfig` for the real defaults."""

    pod_start_delay: float = 1.0
    pod_run_time: float = 5.0
    termination_delay: float = 1.0
    heartbeat_interval: float = 10.0
    node_status_report_frequency: float = 300.0
    lease_duration_seconds: int = 40


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What a node looks like: name, resources, labels, addresses, pod CIDR."""

    name: str
    index: int
    cpu: str = "8"
    memory: str = "32Gi"
    gpu: int = 0
    max_pods: int = 110
    labels: Mapping[str, str] = field(default_factory=dict)

    @property
    def internal_ip(self) -> str:
        return f"10.0.{self.index // 250}.{self.index % 250 + 2}"

    @property
    def pod_cidr(self) -> str:
        return f"10.244.{self.index}.0/24"


@dataclass(slots=True)
class PodRecord:
    """What this kubelet remembers about one pod (by UID), as the real pod workers do."""

    seen_at: float
    started_at: float | None = None
    deletion_seen_at: float | None = None
    killing_reported: bool = False


@dataclass(frozen=True, slots=True)
class PodStep:
    """`action` is one of initialize, start, complete, stop, delete, or None (wait)."""

    action: str | None
    next_at: float | None = None


def run_time_of(pod: Mapping[str, Any], *, default: float) -> float | None:
    """How long the pod's containers run before exiting, or None for "until deleted".

    Job-owned pods run for `default` (`--pod-run-time`); any pod with restartPolicy Never or
    OnFailure can set the `kubesim.dev/run-time` annotation (a duration) to finish on its own.
    restartPolicy Always pods never complete (their containers would be restarted).
    """
    spec = pod.get("spec") or {}
    if (spec.get("restartPolicy") or "Always") == "Always":
        return None
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    raw = annotations.get(RUN_TIME_ANNOTATION)
    if raw is not None:
        try:
            return max(0.0, parse_duration(str(raw)))
        except DurationError:
            return default
    ref = controller_ref(pod)
    if ref is not None and ref.get("kind") == "Job":
        return default
    return None


def decide_pod_step(
    pod: Mapping[str, Any],
    record: PodRecord,
    *,
    now: float,
    timings: KubeletTimings,
) -> PodStep:
    """The next thing the kubelet does for `pod`, given what it remembers and the time."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    if meta.get("deletionTimestamp"):
        if is_terminal(pod):
            return PodStep("delete")
        seen = record.deletion_seen_at if record.deletion_seen_at is not None else now
        grace = meta.get("deletionGracePeriodSeconds")
        grace_s = float(grace) if isinstance(grace, int | float) else 0.0
        due = seen + max(0.0, min(grace_s, timings.termination_delay))
        return PodStep("stop") if now >= due else PodStep(None, due)
    if is_terminal(pod):
        return PodStep(None)
    if phase == "Pending":
        if not status.get("startTime") and timings.pod_start_delay > 0:
            return PodStep("initialize", record.seen_at + timings.pod_start_delay)
        due = record.seen_at + timings.pod_start_delay
        return PodStep("start") if now >= due else PodStep(None, due)
    if phase == "Running":
        run_time = run_time_of(pod, default=timings.pod_run_time)
        if run_time is None:
            return PodStep(None)
        started = record.started_at
        if started is None:
            started = _container_started_at(pod) or now
            record.started_at = started
        due = started + run_time
        return PodStep("complete") if now >= due else PodStep(None, due)
    return PodStep(None)


def _container_started_at(pod: Mapping[str, Any]) -> float | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        started = parse_time(((cs.get("state") or {}).get("running") or {}).get("startedAt"))
        if started is not None:
            return started
    return None


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _image_id(image: str) -> str:
    repo = image.split("@", 1)[0]
    if ":" in repo.rsplit("/", 1)[-1]:
        repo = repo.rsplit(":", 1)[0]
    if "/" not in repo:
        repo = f"docker.io/library/{repo}"
    return f"{repo}@sha256:{_digest(image)}"


def qos_class(pod: Mapping[str, Any]) -> str:
    """Guaranteed / Burstable / BestEffort from requests and limits (cpu and memory)."""
    containers = [
        *((pod.get("spec") or {}).get("containers") or []),
        *((pod.get("spec") or {}).get("initContainers") or []),
    ]
    any_set = False
    guaranteed = True
    for c in containers:
        res = c.get("resources") or {}
        requests, limits = res.get("requests") or {}, res.get("limits") or {}
        for name in ("cpu", "memory"):
            if name in requests or name in limits:
                any_set = True
            if name not in limits or requests.get(name, limits.get(name)) != limits.get(name):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"


def _container_id(pod: Mapping[str, Any], container: Mapping[str, Any]) -> str:
    uid = str((pod.get("metadata") or {}).get("uid"))
    return "containerd://" + _digest(f"{uid}/{container.get('name')}")


def _container_status(
    container: Mapping[str, Any],
    *,
    state: Obj,
    ready: bool,
    started: bool,
    container_id: str | None = None,
) -> Obj:
    image = str(container.get("image", ""))
    out: Obj = {
        "name": container.get("name"),
        "image": image,
        "imageID": _image_id(image) if container_id else "",
        "ready": ready,
        "restartCount": 0,
        "started": started,
        "state": state,
        "lastState": {},
    }
    if container_id:
        out["containerID"] = container_id
    return out


def _merge_conditions(old: list[Obj], new: list[Obj]) -> list[Obj]:
    """New kubelet-owned conditions replace same-type ones; others (DisruptionTarget…) stay.

    lastTransitionTime is kept when the status did not change, as the real status manager does.
    """
    by_type = {c.get("type"): dict(c) for c in old}
    for cond in new:
        previous = by_type.get(cond.get("type"))
        merged = dict(cond)
        if previous is not None and previous.get("status") == cond.get("status"):
            merged["lastTransitionTime"] = previous.get(
                "lastTransitionTime", cond.get("lastTransitionTime")
            )
        by_type[cond.get("type")] = merged
    order = ["PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled"]
    return sorted(
        by_type.values(), key=lambda c: order.index(c["type"]) if c.get("type") in order else 99
    )
