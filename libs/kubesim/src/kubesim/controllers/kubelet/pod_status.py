"""The pod statuses the kubelet writes, built from the pod and the clock: pod IPs, the
Pending, Running and terminated statuses with their conditions and container
statuses, and the status of a pod killed by its deletion.
"""

from __future__ import annotations

from kubesim.controllers.kubelet.model import (
    KILLED_EXIT_CODE,
    _container_id,
    _container_status,
    qos_class,
)
from kubesim.controllers.kubelet.node import KubeletNode
from kubesim.controllers.objects import (
    Obj,
    format_time,
)


def _condition(kind: str, status: str, stamp: str, *, reason: str = "", message: str = "") -> Obj:
    """One pod condition as the kubelet writes it (no probe time; reason/message if any)."""
    cond: Obj = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": stamp,
    }
    if reason:
        cond["reason"] = reason
    if message:
        cond["message"] = message
    return cond


def _started_conditions(stamp: str, *, unready: str = "") -> list[Obj]:
    """The conditions of a started pod: Ready and ContainersReady unless `unready` says why."""
    ready, reason = ("False", "ContainersNotReady") if unready else ("True", "")
    return [
        _condition("PodReadyToStartContainers", "True", stamp),
        _condition("Initialized", "True", stamp),
        _condition("Ready", ready, stamp, reason=reason, message=unready),
        _condition("ContainersReady", ready, stamp, reason=reason, message=unready),
        _condition("PodScheduled", "True", stamp),
    ]


class KubeletPodStatus(KubeletNode):
    """Builds the status of each pod phase."""

    def _next_pod_ip(self) -> str:
        self._ip_counter += 1
        return f"10.244.{self.shape.index}.{self._ip_counter % 253 + 1}"

    def _ips(self, pod: Obj) -> Obj:
        status = pod.get("status") or {}
        pod_ip = status.get("podIP") or self._next_pod_ip()
        host_ip = self.shape.internal_ip
        if (pod.get("spec") or {}).get("hostNetwork"):
            pod_ip = host_ip
        return {
            "hostIP": host_ip,
            "hostIPs": [{"ip": host_ip}],
            "podIP": pod_ip,
            "podIPs": [{"ip": pod_ip}],
        }

    def _base_status(self, pod: Obj, now: float) -> Obj:
        status = pod.get("status") or {}
        out: Obj = {
            **self._ips(pod),
            "startTime": status.get("startTime") or format_time(now),
            "qosClass": status.get("qosClass") or qos_class(pod),
        }
        return out

    def _pending_status(self, pod: Obj, now: float) -> Obj:
        spec = pod.get("spec") or {}
        names = [c.get("name") for c in spec.get("containers") or []]
        stamp = format_time(now)
        unready = f"containers with unready status: [{' '.join(str(n) for n in names)}]"
        return {
            **self._base_status(pod, now),
            "phase": "Pending",
            "conditions": _started_conditions(stamp, unready=unready),
            "containerStatuses": [
                _container_status(
                    c,
                    state={"waiting": {"reason": "ContainerCreating"}},
                    ready=False,
                    started=False,
                )
                for c in spec.get("containers") or []
            ],
        }

    def _running_status(self, pod: Obj, now: float) -> Obj:
        spec = pod.get("spec") or {}
        stamp = format_time(now)
        status: Obj = {
            **self._base_status(pod, now),
            "phase": "Running",
            "conditions": _started_conditions(stamp),
            "containerStatuses": [
                _container_status(
                    c,
                    state={"running": {"startedAt": stamp}},
                    ready=True,
                    started=True,
                    container_id=_container_id(pod, c),
                )
                for c in spec.get("containers") or []
            ],
        }
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                _container_status(
                    c,
                    state={
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": stamp,
                            "finishedAt": stamp,
                            "containerID": _container_id(pod, c),
                        }
                    },
                    ready=True,
                    started=False,
                    container_id=_container_id(pod, c),
                )
                for c in spec["initContainers"]
            ]
        return status

    def _terminated_status(self, pod: Obj, now: float, *, exit_code: int, reason: str) -> Obj:
        spec = pod.get("spec") or {}
        stamp = format_time(now)
        started_by_name = {
            cs.get("name"): ((cs.get("state") or {}).get("running") or {}).get("startedAt")
            for cs in (pod.get("status") or {}).get("containerStatuses") or []
        }
        statuses = []
        for c in spec.get("containers") or []:
            previous = next(
                (
                    cs
                    for cs in (pod.get("status") or {}).get("containerStatuses") or []
                    if cs.get("name") == c.get("name")
                ),
                None,
            )
            if previous and (previous.get("state") or {}).get("terminated"):
                statuses.append(previous)  # already exited: keep how it ended
                continue
            terminated: Obj = {
                "exitCode": exit_code,
                "reason": reason,
                "startedAt": started_by_name.get(c.get("name")) or stamp,
                "finishedAt": stamp,
                "containerID": _container_id(pod, c),
            }
            statuses.append(
                _container_status(
                    c,
                    state={"terminated": terminated},
                    ready=False,
                    started=False,
                    container_id=_container_id(pod, c),
                )
            )
        all_zero = all(
            ((cs.get("state") or {}).get("terminated") or {}).get("exitCode") == 0
            for cs in statuses
        )
        phase = "Succeeded" if all_zero else "Failed"
        ready_reason = "PodCompleted" if phase == "Succeeded" else "PodFailed"
        return {
            **self._base_status(pod, now),
            "phase": phase,
            "conditions": [
                _condition("PodReadyToStartContainers", "False", stamp),
                _condition("Ready", "False", stamp, reason=ready_reason),
                _condition("ContainersReady", "False", stamp, reason=ready_reason),
            ],
            "containerStatuses": statuses,
        }

    def _killed_status(self, pod: Obj, now: float) -> Obj:
        return self._terminated_status(pod, now, exit_code=KILLED_EXIT_CODE, reason="Error")
