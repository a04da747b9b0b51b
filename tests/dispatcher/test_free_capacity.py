"""Aggregate free capacity: which nodes give it, which pods take it, what reservations hold."""

from __future__ import annotations

from tests.dispatcher.unit_support import T0

from clearance.events import (
    Condition,
    Container,
    NodeObject,
    NodeSpec,
    NodeStatus,
    ObjectMeta,
    PodObject,
    PodSpec,
    PodStatus,
    ResourceList,
    ResourceRequirements,
    Taint,
)
from clearance_dispatcher.capacity import fits, free_capacity, reservation


def _node(
    name: str,
    cpu: str = "4",
    *,
    ready: bool = True,
    taint: str | None = None,
    unschedulable: bool = False,
) -> NodeObject:
    return NodeObject(
        metadata=ObjectMeta(name=name, uid=f"n-{name}", resource_version="1"),
        spec=NodeSpec(
            unschedulable=unschedulable,
            taints=(Taint(key=taint, effect="NoExecute"),) if taint else (),
        ),
        status=NodeStatus(
            conditions=(Condition(type="Ready", status="True" if ready else "False"),),
            allocatable=ResourceList(cpu=cpu, memory="8Gi"),
        ),
    )


def _pod(
    name: str,
    cpu: str,
    *,
    node: str | None = "n1",
    phase: str = "Running",
    terminating: bool = False,
) -> PodObject:
    return PodObject(
        metadata=ObjectMeta(
            name=name,
            uid=f"p-{name}",
            resource_version="1",
            deletion_timestamp=T0 if terminating else None,
        ),
        spec=PodSpec(
            node_name=node,
            containers=(
                Container(name="c", resources=ResourceRequirements(requests=ResourceList(cpu=cpu))),
            ),
        ),
        status=PodStatus(phase=phase),
    )


def test_free_capacity_counts_terminating_pods_but_not_terminal_ones() -> None:
    nodes = [_node("n1"), _node("n2")]
    pods = [
        _pod("run", "1"),
        _pod("dying", "2", terminating=True),
        _pod("done", "3", phase="Succeeded"),
        _pod("failed", "3", phase="Failed"),
        _pod("unbound", "500m", node=None, phase="Pending"),
    ]
    free = free_capacity(nodes, pods)
    assert free["cpu"] == 8000 - 1000 - 2000 - 500


def test_only_ready_schedulable_untainted_nodes_give_capacity() -> None:
    nodes = [
        _node("ok"),
        _node("notready", ready=False),
        _node("cordoned", unschedulable=True),
        _node("lost", taint="node.kubernetes.io/unreachable"),
    ]
    pods = [_pod("on-lost", "4", node="lost", terminating=True)]
    assert free_capacity(nodes, pods)["cpu"] == 4000


def test_reservation_covers_pods_not_created_yet() -> None:
    assert reservation({"cpu": 3000}, {"cpu": 1000}) == {"cpu": 2000}
    assert reservation({"cpu": 3000}, {"cpu": 3000}) == {}
    assert fits({"cpu": 2000, "example.com/foo": 5}, {"cpu": 2000})
