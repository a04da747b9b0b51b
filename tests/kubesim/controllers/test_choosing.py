"""A pass's NodeChooser picks the node and counts the failures exactly as choose_node does."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubesim.controllers.choosing import NodeChooser
from kubesim.controllers.placement import Resources, choose_node

TAINT = {"key": "gpu", "value": "yes", "effect": "NoSchedule"}
TOLERATION = {"key": "gpu", "operator": "Exists"}


@st.composite
def nodes_st(draw: Any) -> list[dict[str, Any]]:
    nodes = []
    for i in range(draw(st.integers(0, 5))):
        allocatable = {
            "cpu": draw(st.sampled_from(("1", "2", "500m"))),
            "memory": draw(st.sampled_from(("1Gi", "4Gi"))),
            "pods": draw(st.sampled_from(("1", "2", "110"))),
        }
        spec: dict[str, Any] = {"taints": [TAINT] if draw(st.booleans()) else []}
        if draw(st.booleans()):
            spec["unschedulable"] = True
        ready = draw(st.sampled_from(("True", "True", "False")))
        nodes.append(
            {
                "metadata": {"name": f"n{i}", "labels": {"zone": draw(st.sampled_from("ab"))}},
                "spec": spec,
                "status": {
                    "allocatable": allocatable,
                    "conditions": [{"type": "Ready", "status": ready}],
                },
            }
        )
    return nodes


@st.composite
def pod_st(draw: Any, index: int) -> dict[str, Any]:
    requests = draw(
        st.dictionaries(
            st.sampled_from(("cpu", "memory", "nvidia.com/gpu")),
            st.sampled_from(("0", "100m", "1", "64Mi", "2Gi")),
            max_size=3,
        )
    )
    spec: dict[str, Any] = {
        "containers": [{"name": "c", "resources": {"requests": requests}}],
        "tolerations": [TOLERATION] if draw(st.booleans()) else [],
    }
    if draw(st.booleans()):
        spec["nodeSelector"] = {"zone": draw(st.sampled_from("ab"))}
    return {"metadata": {"name": f"p{index}", "uid": f"u{index}"}, "spec": spec}


usage_st = st.dictionaries(
    st.sampled_from(("n0", "n1", "n2", "n3")),
    st.tuples(
        st.dictionaries(
            st.sampled_from(("cpu", "memory")),
            st.sampled_from((Fraction(0), Fraction(1, 2), Fraction(1), Fraction(2**30))),
        ),
        st.integers(0, 2),
    ),
)


@settings(max_examples=200, deadline=None)
@given(nodes_st(), st.lists(st.integers(0, 10_000), max_size=6), usage_st, st.data())
def test_the_chooser_decides_as_choose_node_as_usage_changes(
    nodes: list[dict[str, Any]],
    seeds: list[int],
    usage: dict[str, tuple[Resources, int]],
    data: st.DataObject,
) -> None:
    chooser = NodeChooser(nodes)
    for index, _ in enumerate(seeds):
        pod = data.draw(pod_st(index))
        expected = choose_node(pod, nodes, {}, usage=usage)
        assert chooser.choose(pod, usage) == expected
        node = expected[0]
        if node is not None:  # as a pass does: the placed pod now counts on its node
            used, count = usage.get(node, ({}, 0))
            usage = {**usage, node: ({**used, "cpu": used.get("cpu", 0) + 1}, count + 1)}
