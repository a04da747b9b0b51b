"""A fake kubelet per node: Node registration, Lease/Ready heartbeats, the pod lifecycle.

What a real kubelet shows the API, without containers: it registers its Node (capacity,
allocatable, conditions, addresses, nodeInfo), renews its Lease in `kube-node-lease` every
`heartbeat_interval` and re-posts node status on change or every
`node_status_report_frequency`; it moves pods bound to it Pending → Running after
`pod_start_delay` with complete container statuses; run-to-completion pods finish after
`pod_run_time`; a pod with a `deletionTimestamp` is stopped after min(grace,
`termination_delay`), given a terminal status, then removed with the kubelet's final
`DELETE gracePeriodSeconds=0` with a UID precondition. A *lost* kubelet does nothing at all,
which is exactly what leaves pods Terminating forever (reference §1.1).

The per-pod decision is the pure function `decide_pod_step`.

The modules: the data and pure decisions (:mod:`.model`), the Node and its heartbeats
(:mod:`.node`), the pod statuses (:mod:`.pod_status`) and the pod loop (:mod:`.pods`).
"""

from __future__ import annotations

from kubesim.controllers.kubelet.model import (
    EXIT_CODE_ANNOTATION,
    KILLED_EXIT_CODE,
    KUBELET_VERSION,
    NODE_CONDITIONS,
    RUN_TIME_ANNOTATION,
    KubeletTimings,
    NodeShape,
    PodRecord,
    PodStep,
    decide_pod_step,
    qos_class,
    run_time_of,
)
from kubesim.controllers.kubelet.pods import Kubelet

__all__ = [
    "EXIT_CODE_ANNOTATION",
    "KILLED_EXIT_CODE",
    "KUBELET_VERSION",
    "NODE_CONDITIONS",
    "RUN_TIME_ANNOTATION",
    "Kubelet",
    "KubeletTimings",
    "NodeShape",
    "PodRecord",
    "PodStep",
    "decide_pod_step",
    "qos_class",
    "run_time_of",
]
