"""Reference §2.7 / §0.6: merge patch, JSON patch and strategic merge patch (pure functions)."""

from __future__ import annotations

from typing import Any

import pytest

from kubesim import schemas
from kubesim.patching import PatchError, json_patch, merge_patch, strategic_merge_patch

POD = schemas.definition("io.k8s.api.core.v1.Pod")
NODE = schemas.definition("io.k8s.api.core.v1.Node")


def _pod(**meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", **meta},
        "spec": {"containers": [{"name": "a", "image": "i1"}, {"name": "b", "image": "i2"}]},
    }


def test_merge_patch_null_deletes_and_lists_replace() -> None:
    out = merge_patch(
        {"a": 1, "b": {"c": 2, "d": 3}, "l": [1, 2]}, {"a": None, "b": {"c": None}, "l": [3]}
    )
    assert out == {"b": {"d": 3}, "l": [3]}


def test_json_patch_non_array_body_is_400() -> None:
    with pytest.raises(PatchError) as err:
        json_patch({}, {"op": "add"})
    assert err.value.code == 400


def test_json_patch_failed_test_is_422_naming_the_path() -> None:
    with pytest.raises(PatchError) as err:
        json_patch({"a": 1}, [{"op": "test", "path": "/a", "value": 2}])
    assert err.value.code == 422
    assert err.value.message == "testing value /a failed: test failed"


def test_json_patch_applies_operations_in_order() -> None:
    out = json_patch(
        {"a": [1]},
        [{"op": "add", "path": "/a/-", "value": 2}, {"op": "test", "path": "/a/1", "value": 2}],
    )
    assert out == {"a": [1, 2]}


def test_smp_empty_finalizers_does_not_remove_finalizers() -> None:
    out = strategic_merge_patch(_pod(finalizers=["x"]), {"metadata": {"finalizers": []}}, POD)
    assert out["metadata"]["finalizers"] == ["x"]


def test_smp_null_finalizers_removes_them() -> None:
    out = strategic_merge_patch(_pod(finalizers=["x"]), {"metadata": {"finalizers": None}}, POD)
    assert "finalizers" not in out["metadata"]


def test_smp_unions_primitive_merge_lists() -> None:
    out = strategic_merge_patch(
        _pod(finalizers=["x"]), {"metadata": {"finalizers": ["y", "x"]}}, POD
    )
    assert out["metadata"]["finalizers"] == ["x", "y"]


def test_smp_delete_from_primitive_list_directive() -> None:
    patch = {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}
    out = strategic_merge_patch(_pod(finalizers=["x", "y"]), patch, POD)
    assert out["metadata"]["finalizers"] == ["y"]


def test_smp_merges_containers_by_name() -> None:
    out = strategic_merge_patch(
        _pod(), {"spec": {"containers": [{"name": "b", "image": "new"}]}}, POD
    )
    assert out["spec"]["containers"] == [
        {"name": "a", "image": "i1"},
        {"name": "b", "image": "new"},
    ]


def test_smp_patch_delete_directive_removes_list_element() -> None:
    patch = {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}
    out = strategic_merge_patch(_pod(), patch, POD)
    assert [c["name"] for c in out["spec"]["containers"]] == ["b"]


def test_smp_patch_replace_directive_replaces_list() -> None:
    patch = {"spec": {"containers": [{"$patch": "replace"}, {"name": "z", "image": "z"}]}}
    out = strategic_merge_patch(_pod(), patch, POD)
    assert out["spec"]["containers"] == [{"name": "z", "image": "z"}]


def test_smp_replaces_atomic_tolerations() -> None:
    orig = {"metadata": {"name": "p"}, "spec": {"tolerations": [{"key": "a"}]}}
    out = strategic_merge_patch(orig, {"spec": {"tolerations": [{"key": "b"}]}}, POD)
    assert out["spec"]["tolerations"] == [{"key": "b"}]


def test_smp_replaces_node_taints_which_have_no_patch_strategy() -> None:
    # NodeSpec.Taints carries no patchStrategy tag in k8s.io/api (the v1.32 schema says
    # x-kubernetes-list-type: atomic), so an SMP replaces the list; reference §2.7's "taints
    # merge by key" does not match the real types.
    orig = {"metadata": {"name": "n"}, "spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}}
    out = strategic_merge_patch(
        orig, {"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}}, NODE
    )
    assert [t["key"] for t in out["spec"]["taints"]] == ["b"]


def test_smp_merges_pod_conditions_by_type() -> None:
    orig = {
        "metadata": {"name": "p"},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]},
    }
    patch = {
        "status": {
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "X", "status": "True"}]
        }
    }
    out = strategic_merge_patch(orig, patch, POD)
    assert out["status"]["conditions"] == [
        {"type": "Ready", "status": "True"},
        {"type": "X", "status": "True"},
    ]


def test_smp_tolerates_set_element_order_and_retain_keys() -> None:
    patch = {"metadata": {"$setElementOrder/finalizers": ["x"], "labels": {"a": "b"}}}
    out = strategic_merge_patch(_pod(), patch, POD)
    assert out["metadata"]["labels"] == {"a": "b"}
