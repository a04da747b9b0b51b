"""``clearance demo --workload pytorchjob``: the seed scenario with the seed's own example.

The training operator names a PyTorchJob's pods ``<job>-master-0`` and ``<job>-worker-<n>``. One
AppWrapper wraps a PyTorchJob of one master and three workers (``minAvailable: 4``); a volume of
``worker-1`` cannot detach (a finalizer stands in for it) and then ``worker-1``'s node is lost.
The pods on that node are evicted and stay ``Terminating``; ``worker-1`` outlives every deadline.
Without Clearance, MCAD would tear the job down and dispatch it again at once: the operator
would create ``worker-1`` again under the same name, collide with the Terminating one and leave
the gang short, requeue after requeue. With Clearance the job waits: a stuck alert naming
``worker-1``, a force deletion at its deadline (the finalizer still holds the pod), and when
the volume finally lets go, ``cleared`` and the redispatch, and the four pods run again under
the same names with new UIDs.

kubesim runs the PyTorchJob through its stand-in for the training operator
(``kubesim serve --builtin-crd pytorchjob``); :mod:`clearance.demo` starts the stack and prints
the trace and the metrics, this module tells the story.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final

import msgspec

from clearance import events, labels
from clearance.kube import PODS, Kube, Resource
from clearance.narration import (
    NAMESPACE,
    Narrator,
    PodView,
    await_event,
    pod_state,
    remove_finalizers,
)
from clearance.stack import LocalStack

APPWRAPPER: Final = "seed-train"
JOB: Final = "seed-train"
MASTER: Final = f"{JOB}-master-0"
WORKERS: Final = tuple(f"{JOB}-worker-{i}" for i in range(3))
POD_NAMES: Final = (MASTER, *WORKERS)
STUCK: Final = WORKERS[1]
FINALIZER: Final = "demo.clearance.dev/volume-detach"
APPWRAPPERS: Final = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")
STUCK_ALERT, FORCE, PAUSE, WAIT = 3, 6, 2, 3
"""The AppWrapper's teardown timings (seconds): stuck alert, force deletion, pause, requeue wait."""

Pods = dict[str, PodView]


def _replica(replicas: int) -> dict[str, Any]:
    return {
        "replicas": replicas,
        "restartPolicy": "OnFailure",
        "template": {
            "spec": {
                "terminationGracePeriodSeconds": 5,
                "containers": [
                    {
                        "name": "pytorch",
                        "image": "registry.example/trainer:1.0",
                        "resources": {"requests": {"cpu": "1", "memory": "1Gi"}},
                    }
                ],
            }
        },
    }


def pytorchjob_appwrapper() -> dict[str, Any]:
    """An MCAD AppWrapper of a PyTorchJob (1 master + 3 workers), with the teardown fields."""
    job = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": JOB},
        "spec": {"pytorchReplicaSpecs": {"Master": _replica(1), "Worker": _replica(3)}},
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": APPWRAPPER, "namespace": NAMESPACE},
        "spec": {
            "priority": 5,
            "schedulingSpec": {
                "minAvailable": len(POD_NAMES),
                "requeuing": {
                    "timeInSeconds": WAIT,
                    "growthType": "exponential",
                    "maxNumRequeuings": 5,
                    "pauseTimeInSeconds": PAUSE,
                    "stuckAlertTimeInSeconds": STUCK_ALERT,
                    "forceDeletionTimeInSeconds": FORCE,
                    "finalizerRemoval": "Never",
                },
            },
            "resources": {"GenericItems": [{"replicas": 1, "generictemplate": job}]},
        },
    }


async def _pods(kube: Kube) -> Pods:
    """The AppWrapper's pods by name (quorum LIST by its label)."""
    listed = await kube.list(
        PODS, namespace=NAMESPACE, label_selector=labels.selector_for(APPWRAPPER)
    )
    found = (msgspec.json.decode(raw, type=PodView) for raw in listed.items)
    return {str(p.metadata.get("name")): p for p in found}


async def _wait_pods(
    kube: Kube, predicate: Callable[[Pods], bool], *, timeout: float, what: str
) -> Pods:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pods = await _pods(kube)
        if predicate(pods):
            return pods
        await asyncio.sleep(0.2)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def _attempt(pod: PodView) -> str:
    return str((pod.metadata.get("labels") or {}).get(labels.ATTEMPT, "?"))


def _all_running(attempt: str) -> Callable[[Pods], bool]:
    def check(pods: Pods) -> bool:
        return all(
            name in pods and pod_state(pods[name]) == "Running" and _attempt(pods[name]) == attempt
            for name in POD_NAMES
        )

    return check


def _where(pods: Mapping[str, PodView]) -> str:
    return ", ".join(
        f"{name.removeprefix(JOB + '-')} on {pods[name].spec.get('nodeName')}" for name in POD_NAMES
    )


def _is(kind: type[events.Event]) -> Callable[[events.Event], bool]:
    return lambda e: isinstance(e, kind)


async def pytorchjob_scenario(
    stack: LocalStack,
    kube: Kube,
    queue: asyncio.Queue[events.Event],
    narrator: Narrator,
    stuck_for: timedelta,
) -> None:
    """Narrate the seed scenario with a PyTorchJob (see the module docstring)."""
    narrator.step(
        f"submit AppWrapper {NAMESPACE}/{APPWRAPPER}: PyTorchJob {JOB}, 1 master + 3 workers, "
        f"minAvailable 4, requeue wait {WAIT}s, stuck alert {STUCK_ALERT}s, force delete "
        f"{FORCE}s, pause {PAUSE}s"
    )
    await kube.create(APPWRAPPERS, pytorchjob_appwrapper(), namespace=NAMESPACE)
    await await_event(queue, narrator, _is(events.CycleDispatched), timeout=60, what="dispatch")
    first = await _wait_pods(kube, _all_running("1"), timeout=60, what="four pods to run")
    narrator.say(f"4 pods Running (attempt 1): {_where(first)}")

    narrator.step(f"a volume of {STUCK} cannot detach: its driver holds finalizer {FINALIZER}")
    await kube.patch(PODS, STUCK, {"metadata": {"finalizers": [FINALIZER]}}, namespace=NAMESPACE)
    node = str(first[STUCK].spec.get("nodeName"))
    narrator.step(f"lose {node}, {STUCK}'s node: its kubelet stops (kubesim ctl lose-node {node})")
    stack.kubesim_ctl("lose-node", node)
    evicted = await _wait_pods(
        kube, lambda p: pod_state(p.get(STUCK)) == "Terminating", timeout=60, what="the eviction"
    )
    held = sorted(
        n
        for n, p in evicted.items()
        if pod_state(p) == "Terminating" and p.spec.get("nodeName") == node
    )
    narrator.say(f"evicted from {node}, Terminating on its dead kubelet: {', '.join(held)}")
    await await_event(
        queue, narrator, _is(events.CycleTeardownStarted), timeout=60, what="the requeue"
    )
    narrator.say(
        f"MCAD would now redispatch: the operator would create {STUCK} again into the "
        "Terminating one ('409 object is being deleted') and the gang would stay short. "
        f"Clearance holds attempt 2 until every pod is confirmed gone. Leaving {STUCK} stuck "
        f"for {stuck_for.total_seconds():.0f}s …"
    )
    with contextlib.suppress(TimeoutError):
        await await_event(
            queue, narrator, lambda e: False, timeout=stuck_for.total_seconds(), what="-"
        )
    still = (await _pods(kube)).get(STUCK)
    if still is None or still.metadata.get("uid") != first[STUCK].metadata.get("uid"):
        raise RuntimeError(f"{STUCK} vanished on its own; the scenario is broken")
    narrator.say(
        f"after {stuck_for.total_seconds():.0f}s: {STUCK} still Terminating, still attempt 1"
    )

    narrator.step(
        f"the volume finally detaches: its driver removes {FINALIZER} ({node} stays lost)"
    )
    await remove_finalizers(kube, STUCK, namespace=NAMESPACE)
    await await_event(
        queue, narrator, _is(events.CycleRedispatched), timeout=60, what="the redispatch"
    )
    second = await _wait_pods(kube, _all_running("2"), timeout=60, what="four pods to run again")
    renamed = [n for n in POD_NAMES if second[n].metadata["uid"] == first[n].metadata["uid"]]
    if renamed:
        raise RuntimeError(f"pods of attempt 1 survived the redispatch: {renamed}")
    narrator.say(
        f"4 pods Running again (attempt 2), same names, new UIDs: {_where(second)}; "
        + ", ".join(
            f"{n.removeprefix(JOB + '-')} {str(first[n].metadata['uid'])[:8]}→"
            f"{str(second[n].metadata['uid'])[:8]}"
            for n in POD_NAMES
        )
    )
    aw = msgspec.json.decode(
        await kube.get(APPWRAPPERS, APPWRAPPER, namespace=NAMESPACE), type=dict[str, Any]
    )
    status = aw.get("status", {})
    narrator.say(
        f"AppWrapper state {status.get('state')}, running {status.get('running')}, "
        f"requeues {status.get('numberOfRequeueings')}"
    )
