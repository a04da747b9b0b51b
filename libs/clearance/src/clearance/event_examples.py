"""The event catalog's sample set: one realistic, fixed instance of every event type
(an AppWrapper `team-a/bert-finetune` on its second attempt, its pod, Job and node),
built from fixed uids and times so the published AsyncAPI examples are byte-stable and
the tests have one sample per event to round-trip.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Final

import msgspec

from clearance import events

_T0: Final = datetime(2026, 1, 15, 9, 30, 0, tzinfo=UTC)
_AW: Final = events.AppWrapperRef(
    namespace="team-a", name="bert-finetune", uid="6a1f0c2e-7d4b-4b8e-9a51-1f2e3d4c5b6a"
)
EXAMPLE_TRACEPARENT: Final = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _ref(kind: str, name: str, uid: str, *, api_version: str = "v1") -> events.ObjectRef:
    return events.ObjectRef(
        kind=kind, api_version=api_version, namespace=_AW.namespace, name=name, uid=uid
    )


_POD: Final = _ref("Pod", "bert-finetune-worker-0", "0b6c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3")
_JOB: Final = _ref(
    "Job", "bert-finetune", "1c7d2e3f-4051-4b6c-9d7e-8f90a1b2c3d4", api_version="batch/v1"
)


def _meta(name: str, uid: str, rv: str, *, namespace: str | None = "team-a") -> events.ObjectMeta:
    return events.ObjectMeta(
        name=name,
        namespace=namespace,
        uid=uid,
        resource_version=rv,
        labels={"workload.codeflare.dev/appwrapper": _AW.name, "clearance.dev/attempt": "2"}
        if namespace
        else {},
        creation_timestamp=_T0 - timedelta(minutes=10),
    )


def examples() -> tuple[events.Event, ...]:
    """One realistic, fixed instance of every event type, in union order.

    Published as AsyncAPI message examples and used by the tests as the sample set.
    """
    t = _T0
    about: dict[str, Any] = {"appwrapper": _AW, "attempt": 2, "occurred_at": t}
    cycle = {**about, "cycle_traceparent": EXAMPLE_TRACEPARENT}
    pod = events.PodObject(
        metadata=msgspec.structs.replace(
            _meta(_POD.name, _POD.uid, "48213"),
            deletion_timestamp=t - timedelta(seconds=75),
            deletion_grace_period_seconds=30,
            finalizers=("example.com/block",),
            owner_references=(
                events.OwnerReference(
                    api_version="batch/v1",
                    kind="Job",
                    name=_JOB.name,
                    uid=_JOB.uid,
                    controller=True,
                ),
            ),
        ),
        spec=events.PodSpec(
            node_name="node-3",
            containers=(
                events.Container(
                    name="trainer",
                    resources=events.ResourceRequirements(
                        requests=events.ResourceList(cpu="4", memory="16Gi", nvidia_gpu="1")
                    ),
                ),
            ),
            termination_grace_period_seconds=30,
        ),
        status=events.PodStatus(
            phase="Running",
            conditions=(events.Condition(type="Ready", status="False"),),
        ),
    )
    node = events.NodeObject(
        metadata=_meta("node-3", "5e0a1b2c-3d4e-4f50-8a6b-7c8d9e0f1a2b", "48190", namespace=None),
        spec=events.NodeSpec(
            taints=(
                events.Taint(
                    key="node.kubernetes.io/unreachable",
                    effect="NoExecute",
                    time_added=t - timedelta(seconds=90),
                ),
            )
        ),
        status=events.NodeStatus(
            conditions=(
                events.Condition(
                    type="Ready",
                    status="Unknown",
                    reason="NodeStatusUnknown",
                    last_transition_time=t - timedelta(seconds=95),
                ),
            ),
            allocatable=events.ResourceList(cpu="32", memory="256Gi", nvidia_gpu="8"),
        ),
    )
    appwrapper = events.AppWrapperObject(
        metadata=_meta(_AW.name, _AW.uid, "48200"),
        spec=events.AppWrapperSpec(
            priority=5,
            scheduling_spec=events.SchedulingSpec(
                min_available=2,
                requeuing=events.Requeuing(
                    time_in_seconds=120, growth_type="exponential", max_num_requeuings=5
                ),
            ),
            resources=events.AppWrapperResources(
                generic_items=(
                    {
                        "replicas": 1,
                        "generictemplate": {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "metadata": {"name": _JOB.name},
                        },
                    },
                )
            ),
        ),
        status=events.AppWrapperStatus(
            state="Pending",
            number_of_requeueings=1,
            conditions=(events.Condition(type="AwaitingDeletion", status="True"),),
            clearance=events.ClearanceStatus(attempt=2, teardown_started_at=t),
        ),
    )
    item = events.ItemObject(
        kind=_JOB.kind, api_version=_JOB.api_version, metadata=_meta(_JOB.name, _JOB.uid, "48199")
    )
    stuck = events.StuckObject(
        object=_POD,
        node="node-3",
        deletion_timestamp=t - timedelta(seconds=75),
        reasons=(
            events.NodeUnreachable(node="node-3"),
            events.Finalizers(finalizers=("example.com/block",)),
        ),
    )
    kube: dict[str, Any] = {"action": "MODIFIED", "observed_at": t}
    return (
        events.KubeAppWrapperEvent(**kube, object=appwrapper),
        events.KubePodEvent(**kube, object=pod),
        events.KubeNodeEvent(**kube, object=node),
        events.KubeItemEvent(action="DELETED", inferred=True, observed_at=t, object=item),
        events.CycleDispatched(**{**cycle, "attempt": 1}, items=(_JOB,)),
        events.CycleRequeued(
            **cycle,
            reason="1 of 2 pods running after 120 s",
            number_of_requeueings=1,
            running=1,
            min_available=2,
        ),
        events.CycleTeardownStarted(**cycle, inventory=(_JOB, _POD)),
        events.CycleDeletionConfirmed(
            **cycle,
            confirmed=(
                events.ConfirmedObject(object=_JOB, how="watch_deleted"),
                events.ConfirmedObject(object=_POD, how="get_404"),
            ),
        ),
        events.CycleDeletionForced(**cycle, objects=(_POD,)),
        events.CycleFinalizersRemoved(
            **cycle,
            removed=(events.RemovedFinalizers(object=_POD, finalizers=("example.com/block",)),),
        ),
        events.CycleCleared(
            **cycle,
            cleared_at=t,
            teardown_started_at=t - timedelta(seconds=600),
            confirmed=(_JOB, _POD),
        ),
        events.CycleRedispatched(
            **{**cycle, "attempt": 3}, cleared_at=t - timedelta(seconds=90), pause_seconds=90
        ),
        events.CycleFailed(**cycle, reason="RequeueLimit", message="maxNumRequeuings 5 reached"),
        events.CycleCompleted(**cycle),
        events.AlertDeletionStuck(
            **cycle,
            summary="1 object of attempt 2 still present after 60 s",
            elapsed_seconds=61.5,
            stuck=(stuck,),
        ),
        events.AlertNodeLost(
            **cycle,
            summary="node-3 is unreachable and holds 1 pod",
            node="node-3",
            reasons=(events.NodeUnreachable(node="node-3"),),
            objects=(_POD,),
        ),
        events.AlertRequeueLimit(
            **cycle,
            summary="requeued 5 times; marked Failed",
            number_of_requeueings=5,
            max_num_requeuings=5,
        ),
        events.AlertDispatchFailed(
            **cycle,
            summary="creating Job bert-finetune failed",
            reason="Forbidden",
            item=_JOB,
        ),
        events.AlertDeletionForced(
            **cycle, summary="force-deleted 1 object of attempt 2", objects=(_POD,)
        ),
    )
