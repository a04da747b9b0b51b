"""Never blind to an object: what the watcher publishes of objects that do not decode whole.

Pure (no servers): raw JSON as the API server stores it → ``Codec.read`` → the kube event a
consumer decodes with the event catalog. The integration counterparts (through kubesim and
NATS) are in test_watcher_hostile.py.
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearance import events
from clearance.events import AppWrapperObject, ItemObject, NodeObject, PodObject
from clearance.kube import NODES, PODS, Resource
from clearance_watcher.decoding import Codec, Reading

ROOT = Path(__file__).resolve().parents[2]
AW = Resource("workload.codeflare.dev", "v1beta1", "appwrappers", "AppWrapper")
JOBS = Resource("batch", "v1", "jobs", "Job")
NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads((ROOT / "proto" / "events.schema.json").read_text())
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def stored_pod(**extra: Any) -> dict[str, Any]:
    """A pod as the API server returns it, created by a Job whose template has GPU quantities."""
    body: dict[str, Any] = {
        "metadata": {
            "name": "train-abc12",
            "namespace": "team-a",
            "uid": "4f0c5c52-2a53-4c1e-9d5c-2b7c0b1f7a10",
            "resourceVersion": "42",
            "labels": {"appwrapper.mcad.ibm.com": "train", "clearance.dev/attempt": "1"},
            "finalizers": ["demo.clearance.dev/volume-detach"],
            "deletionTimestamp": "2026-01-01T00:00:05Z",
            "ownerReferences": [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": "train",
                    "uid": "0b7c7e0e-1b8e-4f53-a7f4-0d7b0a8b9c11",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": "node-1",
            "containers": [
                {
                    "name": "main",
                    "resources": {
                        "requests": {"cpu": "500m", "nvidia.com/gpu": "1"},
                        "limits": {"nvidia.com/gpu": "1"},
                    },
                }
            ],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }
    body.update(extra)
    return body


def raw(body: dict[str, Any]) -> msgspec.Raw:
    return msgspec.Raw(msgspec.json.encode(body))


def published(codec: Codec, reading: Reading) -> events.Event:
    """The event as it reaches a consumer: encoded (validated) by the watcher, decoded by
    the consumer with the catalog's decoder."""
    assert reading.snapshot is not None
    event = codec.event("MODIFIED", reading.snapshot, observed_at=NOW, problem=reading.problem)
    return events.decode(events.encode(event))


def test_integer_gpu_quantities_in_a_pod_decode_as_the_number_written() -> None:
    body = stored_pod()
    resources = body["spec"]["containers"][0]["resources"]
    resources["requests"]["nvidia.com/gpu"] = 0
    resources["limits"]["nvidia.com/gpu"] = 0
    reading = Codec(PODS, "pod").read(raw(body))
    assert reading.problem is None
    assert isinstance(reading.snapshot, PodObject)
    limits = reading.snapshot.spec.containers[0].resources.limits
    assert limits.nvidia_gpu == 0
    event = published(Codec(PODS, "pod"), reading)
    assert isinstance(event, events.KubePodEvent) and event.problem is None


def test_numeric_node_allocatable_decodes_as_written() -> None:
    body = {
        "metadata": {"name": "n1", "uid": "n1-uid", "resourceVersion": "3"},
        "status": {"allocatable": {"cpu": 32, "memory": "256Gi", "nvidia.com/gpu": 8.0}},
    }
    reading = Codec(NODES, "node").read(raw(body))
    assert reading.problem is None and isinstance(reading.snapshot, NodeObject)
    assert reading.snapshot.status.allocatable.cpu == 32


def test_pod_with_an_undecodable_field_is_published_with_its_identity_and_a_problem(
    validator: jsonschema.Draft202012Validator,
) -> None:
    body = stored_pod()
    second_owner = {"apiVersion": "example.com/v1", "kind": "Thing", "name": "t", "uid": "a:b"}
    body["metadata"]["ownerReferences"].append(second_owner)  # API accepts any non-empty uid
    codec = Codec(PODS, "pod")
    with pytest.raises(msgspec.ValidationError):
        codec.decode(raw(body))
    reading = codec.read(raw(body))
    event = published(codec, reading)
    assert isinstance(event, events.KubePodEvent)
    assert event.problem is not None
    assert event.problem.path == "$.metadata.ownerReferences[1].uid"
    assert event.problem.dropped == ("$.metadata.ownerReferences[1]",)
    pod = event.object
    meta = pod.metadata
    assert (meta.name, meta.namespace, meta.uid, meta.resource_version) == (
        "train-abc12",
        "team-a",
        "4f0c5c52-2a53-4c1e-9d5c-2b7c0b1f7a10",
        "42",
    )
    assert meta.labels["appwrapper.mcad.ibm.com"] == "train"
    assert meta.finalizers == ("demo.clearance.dev/volume-detach",)
    assert meta.deletion_timestamp == datetime(2026, 1, 1, 0, 0, 5, tzinfo=UTC)
    assert [o.name for o in meta.owner_references] == ["train"]
    assert (pod.spec.node_name, pod.status.phase, pod.ready) == ("node-1", "Running", True)
    validator.validate(json.loads(events.encode(event)))


def test_wrong_types_deep_in_a_pod_drop_only_those_fields() -> None:
    body = stored_pod()
    body["spec"]["containers"].append({"name": 7})  # a container without a valid name
    body["spec"]["terminationGracePeriodSeconds"] = "thirty"
    body["metadata"]["finalizers"].append({"not": "a string"})
    reading = Codec(PODS, "pod").read(raw(body))
    assert reading.problem is not None and isinstance(reading.snapshot, PodObject)
    assert set(reading.problem.dropped) == {
        "$.spec.containers[1]",
        "$.spec.terminationGracePeriodSeconds",
        "$.metadata.finalizers[1]",
    }
    assert [c.name for c in reading.snapshot.spec.containers] == ["main"]
    assert reading.snapshot.metadata.finalizers == ("demo.clearance.dev/volume-detach",)


def appwrapper(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "aw", "namespace": "team-a", "uid": "aw-uid", "resourceVersion": "9"},
        "spec": {
            "schedulingSpec": {"minAvailable": 2},
            "resources": {"GenericItems": [{"generictemplate": {"kind": "Job"}}]},
            **spec,
        },
        "status": {"state": "Running", "clearance": {"attempt": 2}},
    }


def test_appwrapper_whose_spec_does_not_decode_is_published_with_an_empty_spec() -> None:
    codec = Codec(AW, "appwrapper")
    reading = codec.read(raw(appwrapper(priority="high")))
    event = published(codec, reading)
    assert isinstance(event, events.KubeAppWrapperEvent) and event.problem is not None
    assert event.problem.path == "$.spec.priority"
    assert event.problem.dropped == ("$.spec",)
    assert event.object.spec == events.AppWrapperSpec()  # never half a spec
    assert event.object.status.state == "Running"
    assert event.object.status.clearance is not None
    assert event.object.status.clearance.attempt == 2
    assert (event.object.kind, event.object.api_version) == ("AppWrapper", AW.api_version)


def test_appwrapper_whose_status_does_not_decode_keeps_its_spec() -> None:
    body = appwrapper()
    body["status"]["clearance"]["attempt"] = "two"
    reading = Codec(AW, "appwrapper").read(raw(body))
    assert reading.problem is not None and isinstance(reading.snapshot, AppWrapperObject)
    assert reading.problem.dropped == ("$.status.clearance.attempt",)
    assert reading.snapshot.spec.scheduling_spec.min_available == 2
    assert reading.snapshot.status.clearance is not None
    assert reading.snapshot.status.clearance.attempt is None


def test_item_with_undecodable_metadata_keeps_its_identity() -> None:
    body = {
        "metadata": {
            "name": "job-1",
            "namespace": "team-a",
            "uid": "job-uid",
            "resourceVersion": "5",
            "labels": {"appwrapper.mcad.ibm.com": "aw"},
            "creationTimestamp": "yesterday",
        }
    }
    reading = Codec(JOBS, "item").read(raw(body))
    assert reading.problem is not None and isinstance(reading.snapshot, ItemObject)
    assert reading.problem.dropped == ("$.metadata.creationTimestamp",)
    assert (reading.snapshot.kind, reading.snapshot.api_version) == ("Job", "batch/v1")
    assert reading.snapshot.metadata.labels == {"appwrapper.mcad.ibm.com": "aw"}


@pytest.mark.parametrize(
    "metadata",
    [
        {"name": "p", "resourceVersion": "1"},  # no uid
        {"name": "p", "uid": "has:colon", "resourceVersion": "1"},  # uid unusable in msg ids
        {"name": "", "uid": "u", "resourceVersion": "1"},
    ],
)
def test_object_without_a_valid_identity_yields_no_snapshot(metadata: dict[str, Any]) -> None:
    reading = Codec(PODS, "pod").read(raw({"metadata": metadata, "spec": {"nodeName": 7}}))
    assert reading.snapshot is None
    assert reading.problem is not None and reading.raw is not None


# Leaves of a stored pod a hostile writer (or a lax API) may set to anything.
_LEAVES = [
    ("metadata", "labels"),
    ("metadata", "finalizers"),
    ("metadata", "ownerReferences"),
    ("metadata", "deletionTimestamp"),
    ("metadata", "namespace"),
    ("spec", "nodeName"),
    ("spec", "containers"),
    ("status", "phase"),
    ("status", "conditions"),
    ("spec",),
    ("status",),
]
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None)
@given(mutations=st.lists(st.tuples(st.sampled_from(_LEAVES), _JSON), min_size=1, max_size=4))
def test_any_hostile_value_outside_the_identity_still_yields_a_publishable_event(
    mutations: list[tuple[tuple[str, ...], Any]],
) -> None:
    body = copy.deepcopy(stored_pod())
    for path, value in mutations:
        target: Any = body
        for key in path[:-1]:
            target = target.get(key) if isinstance(target, dict) else None
        if isinstance(target, dict):  # an earlier mutation may have replaced the parent
            target[path[-1]] = value
    codec = Codec(PODS, "pod")
    reading = codec.read(raw(body))
    assert reading.snapshot is not None
    event = published(codec, reading)  # encodes with validation, decodes as a consumer does
    assert event.object.metadata.uid == body["metadata"]["uid"]
    if reading.problem is not None:
        assert reading.problem.dropped
