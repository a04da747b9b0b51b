"""Decoding built-in objects into their Go types, as pure functions (no server).

A real API server decodes a Pod's JSON into `v1.Pod` before any validation; a value of the
wrong JSON type fails there with Go's encoding/json error (sigs.k8s.io/json), which names the
innermost struct, the JSON field path from the root (no indexes) and the Go type.
"""

from __future__ import annotations

from typing import Any

from kubesim.decoding import QUANTITY_MESSAGE, first_error, go_map_repr
from kubesim.resources import BUILTIN_TYPES

POD = next(rt for rt in BUILTIN_TYPES if rt.kind == "Pod")
JOB = next(rt for rt in BUILTIN_TYPES if rt.kind == "Job")


def pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}], **spec},
    }


def test_a_well_typed_pod_decodes() -> None:
    assert first_error(POD, pod(terminationGracePeriodSeconds=30, nodeSelector={"a": "b"})) is None


def test_string_for_an_int64_names_the_struct_the_field_path_and_the_go_type() -> None:
    assert first_error(POD, pod(terminationGracePeriodSeconds="30")) == (
        "json: cannot unmarshal string into Go struct field "
        "PodSpec.spec.terminationGracePeriodSeconds of type int64"
    )


def test_nested_list_fields_drop_indexes_and_name_the_inner_struct() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["ports"] = [{"containerPort": "80"}]
    assert first_error(POD, obj) == (
        "json: cannot unmarshal string into Go struct field "
        "ContainerPort.spec.containers.ports.containerPort of type int32"
    )


def test_wrong_container_shape_names_the_element_type() -> None:
    assert first_error(POD, pod(containers=["busybox"])) == (
        "json: cannot unmarshal string into Go struct field PodSpec.spec.containers "
        "of type v1.Container"
    )
    assert first_error(POD, pod(containers={"name": "c"})) == (
        "json: cannot unmarshal object into Go struct field PodSpec.spec.containers "
        "of type []v1.Container"
    )


def test_map_values_and_metadata_are_typed_too() -> None:
    obj = pod()
    obj["metadata"]["labels"] = {"app": 1}
    assert first_error(POD, obj) == (
        "json: cannot unmarshal number into Go struct field ObjectMeta.metadata.labels "
        "of type string"
    )


def test_a_fraction_for_an_integer_reports_the_number_literal() -> None:
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {}}
    job["spec"]["parallelism"] = 1.5
    assert first_error(JOB, job) == (
        "json: cannot unmarshal number 1.5 into Go struct field JobSpec.spec.parallelism "
        "of type int32"
    )


def test_null_leaves_a_field_unset_and_never_fails() -> None:
    assert first_error(POD, pod(activeDeadlineSeconds=None, nodeSelector=None)) is None


def test_custom_unmarshalers_quantity_and_int_or_string() -> None:
    obj = pod()
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "500m", "memory": 1024}}
    assert first_error(POD, obj) is None
    obj["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "lots"}}
    assert first_error(POD, obj) == QUANTITY_MESSAGE
    probe = {"httpGet": {"port": True}}
    obj = pod()
    obj["spec"]["containers"][0]["livenessProbe"] = probe
    assert first_error(POD, obj) == (
        "json: cannot unmarshal bool into Go struct field "
        "HTTPGetAction.spec.containers.livenessProbe.httpGet.port of type int32"
    )


def test_the_first_error_in_document_order_is_the_one_reported() -> None:
    obj = pod(activeDeadlineSeconds="a", priority="b")
    assert "activeDeadlineSeconds" in str(first_error(POD, obj))


def test_strategic_patch_bad_value_is_rendered_like_go_percent_plus_v() -> None:
    assert go_map_repr({"spec": {"b": [1, None], "a": "x"}}) == "map[spec:map[a:x b:[1 <nil>]]]"
