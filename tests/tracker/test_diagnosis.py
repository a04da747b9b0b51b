"""Pure diagnosis: why an object outlived a teardown deadline."""

from __future__ import annotations

from tracker_builders import at, node, pod, record, tracked

from clearance.events import (
    ControllerRecreating,
    Finalizers,
    InGracePeriod,
    NodeMissing,
    NodeNotReady,
    NodeOutOfService,
    NodeUnreachable,
    UnknownCause,
)
from clearance_tracker.diagnosis import (
    CAUSE_NAMES,
    cause_names,
    count_causes,
    describe,
    diagnose,
    lost_nodes,
    node_causes,
)


def test_lost_node_causes() -> None:
    assert node_causes("n", None) == (NodeMissing(node="n"),)
    assert node_causes("n", node("n")) == ()
    causes = node_causes(
        "n", node("n", ready="Unknown", taints=("node.kubernetes.io/unreachable",))
    )
    assert causes == (NodeNotReady(node="n", status="Unknown"), NodeUnreachable(node="n"))
    causes = node_causes(
        "n", node("n", ready="False", taints=("node.kubernetes.io/out-of-service",))
    )
    assert NodeOutOfService(node="n") in causes


def test_pod_on_lost_node_is_diagnosed_node_lost() -> None:
    rec = record(tracked("w-0", "u1", node="node-1"))
    stuck = diagnose(
        rec,
        rec.objects["u1"],
        snapshot=pod("w-0", "u1", node="node-1", deletion=at(30)),
        nodes={
            "node-1": node("node-1", ready="Unknown", taints=("node.kubernetes.io/unreachable",))
        },
        now=at(61),
    )
    assert stuck.node == "node-1"
    assert NodeUnreachable(node="node-1") in stuck.reasons
    assert "node node-1 unreachable" in describe(stuck)
    assert list(lost_nodes([stuck])) == ["node-1"]


def test_finalizers_are_named() -> None:
    rec = record(tracked("w-0", "u1"))
    stuck = diagnose(
        rec,
        rec.objects["u1"],
        snapshot=pod("w-0", "u1", finalizers=("example.com/hold",), deletion=at(1)),
        nodes={"node-1": node()},
        now=at(61),
    )
    assert stuck.reasons == (Finalizers(finalizers=("example.com/hold",)),)
    assert "finalizers example.com/hold" in describe(stuck)


def test_still_in_grace_period() -> None:
    rec = record(tracked("w-0", "u1"))
    stuck = diagnose(
        rec, rec.objects["u1"], snapshot=pod("w-0", "u1", deletion=at(90)), nodes={}, now=at(60)
    )
    assert stuck.reasons == (InGracePeriod(seconds_left=30.0),)


def test_controller_recreating_a_name_already_confirmed_gone() -> None:
    rec = record(
        tracked("w-0", "old", confirmed=True),
        tracked("w-0", "new", source="watch", first_seen=at(5)),
    )
    stuck = diagnose(rec, rec.objects["new"], snapshot=pod("w-0", "new"), nodes={}, now=at(61))
    assert any(isinstance(c, ControllerRecreating) for c in stuck.reasons)


def test_nothing_explains_it() -> None:
    rec = record(tracked("w-0", "u1"))
    stuck = diagnose(rec, rec.objects["u1"], snapshot=pod("w-0", "u1"), nodes={}, now=at(61))
    assert stuck.reasons == (
        UnknownCause(detail="deletion was never requested (no deletionTimestamp)"),
    )


def test_every_cause_of_the_event_catalog_has_a_metric_label_name() -> None:
    assert set(CAUSE_NAMES) == {
        "node_missing",
        "node_not_ready",
        "node_unreachable",
        "node_out_of_service",
        "finalizers",
        "in_grace_period",
        "controller_recreating",
        "unknown",
    }


def test_a_stuck_pod_on_a_lost_node_with_a_finalizer_counts_under_each_of_its_causes() -> None:
    rec = record(tracked("w-0", "u1", node="node-1"), tracked("w-1", "u2"))
    lost = node("node-1", ready="Unknown", taints=("node.kubernetes.io/unreachable",))
    stuck = diagnose(
        rec,
        rec.objects["u1"],
        snapshot=pod("w-0", "u1", node="node-1", finalizers=("example.com/hold",), deletion=at(1)),
        nodes={"node-1": lost},
        now=at(61),
    )
    assert cause_names(stuck) == ("node_not_ready", "node_unreachable", "finalizers")
    diagnosed = {"u1": cause_names(stuck), "gone": ("finalizers",)}
    counts = count_causes(["u1", "u2"], diagnosed)
    assert counts == {"node_not_ready": 1, "node_unreachable": 1, "finalizers": 1}
    assert count_causes([], diagnosed) == {}
    assert count_causes(["u1"], {"u1": ("finalizers", "finalizers")}) == {"finalizers": 1}
