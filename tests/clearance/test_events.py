"""The event contract: round trips, validation with field paths, message ids, subjects,
and decoding raw Kubernetes JSON straight into the slim snapshots."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any, get_args

import msgspec
import pytest

from clearance import events, subjects
from clearance.catalog import examples
from clearance.events import EventDecodeError, EventEncodeError, decode, encode

SAMPLES = examples()
T0 = datetime(2026, 1, 15, 9, 30, tzinfo=UTC)


def by_type(cls: type[Any]) -> Any:
    (sample,) = (s for s in SAMPLES if type(s) is cls)
    return sample


def as_json(sample: events.Event) -> Any:
    return json.loads(encode(sample))


def mutate(sample: events.Event, **changes: Any) -> bytes:
    """The sample's JSON with top-level fields replaced (or removed with `...`)."""
    body = as_json(sample)
    for key, value in changes.items():
        if value is ...:
            body.pop(key)
        else:
            body[key] = value
    return json.dumps(body).encode()


@pytest.fixture
def stuck_alert() -> events.AlertDeletionStuck:
    sample = by_type(events.AlertDeletionStuck)
    assert isinstance(sample, events.AlertDeletionStuck)
    return sample


# ------------------------------------------------------------------------ round trip


def test_samples_cover_every_member_of_the_union_once() -> None:
    assert [type(s) for s in SAMPLES] == list(get_args(events.Event))


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.event_type)
def test_every_event_type_round_trips_through_json(sample: events.Event) -> None:
    data = encode(sample)
    assert json.loads(data)["type"] == sample.event_type
    assert data.startswith(b'{"type":"' + sample.event_type.encode() + b'"')
    assert decode(data) == sample


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.event_type)
def test_every_event_subject_parses_back_to_its_identity(sample: events.Event) -> None:
    parsed = subjects.parse_subject(sample.subject())
    assert subjects.stream_for_subject(sample.subject()).name == sample.stream
    if isinstance(sample, events.KubeAppWrapperEvent | events.KubePodEvent | events.KubeNodeEvent):
        meta = sample.object.metadata
        assert parsed == subjects.KubeSubject(
            kind=sample.kube_kind, namespace=meta.namespace, name=meta.name
        )
    elif isinstance(sample, events.KubeItemEvent):
        assert isinstance(parsed, subjects.KubeSubject)
        assert parsed.kind == "item"
    else:
        assert isinstance(parsed, subjects.CycleSubject | subjects.AlertSubject)
        assert parsed.namespace == sample.appwrapper.namespace
        assert parsed.appwrapper == sample.appwrapper.name
        event_name = parsed.event if isinstance(parsed, subjects.CycleSubject) else parsed.alert
        assert f"{sample.event_type.split('.')[0]}.{event_name}" == sample.event_type


def test_alert_severity_is_part_of_the_subject(stuck_alert: events.AlertDeletionStuck) -> None:
    critical = msgspec.structs.replace(stuck_alert, severity="critical")
    assert critical.subject().startswith("clearance.alert.v1.critical.")
    assert by_type(events.AlertRequeueLimit).severity == "critical"


def test_events_are_immutable(stuck_alert: events.AlertDeletionStuck) -> None:
    with pytest.raises(AttributeError):
        stuck_alert.attempt = 3  # type: ignore[misc]


def test_unknown_fields_are_ignored_at_every_level() -> None:
    body = as_json(by_type(events.KubePodEvent))
    body["added_in_v1_1"] = {"x": 1}
    body["object"]["metadata"]["annotations"] = {"a": "b"}
    body["object"]["status"]["newThing"] = [1, 2]
    assert decode(json.dumps(body)) == by_type(events.KubePodEvent)


# ----------------------------------------------------------------------- bad payloads


@pytest.mark.parametrize(
    ("changes", "path"),
    [
        ({"attempt": 0}, "$.attempt"),
        ({"attempt": "2"}, "$.attempt"),
        ({"attempt": ...}, "$"),
        ({"appwrapper": {"namespace": "ns", "name": "aw"}}, "$.appwrapper"),
        ({"appwrapper": {"namespace": "ns", "name": "aw", "uid": ""}}, "$.appwrapper.uid"),
        ({"appwrapper": {"namespace": "ns", "name": "aw", "uid": "a:b"}}, "$.appwrapper.uid"),
        ({"occurred_at": "yesterday"}, "$.occurred_at"),
        ({"occurred_at": "2026-01-15T09:30:00"}, "$.occurred_at"),
        ({"cycle_traceparent": "not-a-traceparent"}, "$.cycle_traceparent"),
        ({"severity": "fatal"}, "$.severity"),
        ({"summary": ""}, "$.summary"),
        ({"stuck": []}, "$.stuck"),
        ({"type": "alert.deletion.nope"}, "$.type"),
        ({"type": ...}, "$"),
    ],
)
def test_malformed_alert_names_the_offending_field(
    stuck_alert: events.AlertDeletionStuck, changes: dict[str, Any], path: str
) -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode(mutate(stuck_alert, **changes))
    assert caught.value.path == path
    assert f"at `{path}`" in str(caught.value)


def test_naive_datetime_is_rejected_with_its_path(stuck_alert: events.AlertDeletionStuck) -> None:
    with pytest.raises(EventDecodeError, match="timezone") as caught:
        decode(mutate(stuck_alert, occurred_at="2026-01-15T09:30:00"))
    assert caught.value.path == "$.occurred_at"


def test_unknown_cause_in_a_diagnosis_names_the_nested_path(
    stuck_alert: events.AlertDeletionStuck,
) -> None:
    body = as_json(stuck_alert)
    body["stuck"][0]["reasons"][1] = {"cause": "cosmic_rays"}
    with pytest.raises(EventDecodeError) as caught:
        decode(json.dumps(body))
    assert caught.value.path == "$.stuck[0].reasons[1].cause"


def test_kube_event_without_resource_version_names_the_path() -> None:
    body = as_json(by_type(events.KubePodEvent))
    del body["object"]["metadata"]["resourceVersion"]
    with pytest.raises(EventDecodeError) as caught:
        decode(json.dumps(body))
    assert caught.value.path == "$.object.metadata"
    assert "resourceVersion" in str(caught.value)


@pytest.mark.parametrize("data", [b"", b"{", b"[]", b"null", b"\xff\xfe", b'{"type":1}'])
def test_garbage_raises_event_decode_error_which_is_a_value_error(data: bytes) -> None:
    with pytest.raises(ValueError) as caught:
        decode(data)
    assert isinstance(caught.value, EventDecodeError)


def test_bytes_that_are_not_json_have_no_field_path() -> None:
    with pytest.raises(EventDecodeError) as caught:
        decode(b'{"type": "cycle.cleared",')
    assert caught.value.path is None


def test_encode_refuses_an_event_consumers_could_not_decode(
    stuck_alert: events.AlertDeletionStuck,
) -> None:
    naive = msgspec.structs.replace(stuck_alert, occurred_at=datetime(2026, 1, 15, 9, 30))
    with pytest.raises(EventEncodeError, match=r"\$\.occurred_at"):
        encode(naive)
    with pytest.raises(EventEncodeError, match=r"\$\.attempt"):
        encode(msgspec.structs.replace(stuck_alert, attempt=0))
    assert encode(naive, validate=False)  # the escape hatch does what it says


# ------------------------------------------------------------------------ message ids


def test_msg_ids_are_unique_across_the_samples() -> None:
    ids = [s.msg_id() for s in SAMPLES]
    assert len(set(ids)) == len(ids)


def test_cycle_msg_id_is_aw_uid_attempt_and_type() -> None:
    sample = by_type(events.CycleTeardownStarted)
    assert sample.msg_id() == f"{sample.appwrapper.uid}:2:cycle.teardown.started"
    assert msgspec.structs.replace(sample, attempt=3).msg_id().endswith(":3:cycle.teardown.started")


def test_republishing_the_same_fact_gives_the_same_msg_id() -> None:
    sample = by_type(events.CycleCleared)
    later = msgspec.structs.replace(sample, occurred_at=T0.replace(hour=11))
    assert later.msg_id() == sample.msg_id()


def test_each_set_of_confirmed_objects_gets_its_own_msg_id() -> None:
    sample = by_type(events.CycleDeletionConfirmed)
    first, second = sample.confirmed
    alone = msgspec.structs.replace(sample, confirmed=(first,))
    assert alone.msg_id().endswith(f":cycle.deletion.confirmed:{first.object.uid}")
    reordered = msgspec.structs.replace(sample, confirmed=(second, first))
    assert reordered.msg_id() == sample.msg_id()  # the set names the fact, not the order
    renamed = msgspec.structs.replace(second.object, uid="other-uid")
    other = msgspec.structs.replace(
        sample, confirmed=(first, msgspec.structs.replace(second, object=renamed))
    )
    assert len({sample.msg_id(), alone.msg_id(), other.msg_id()}) == 3


def test_each_escalation_step_gets_its_own_stuck_alert_id(
    stuck_alert: events.AlertDeletionStuck,
) -> None:
    steps = ("stuck_alert", "force_deletion", "finalizer_removal")
    ids = {msgspec.structs.replace(stuck_alert, step=step).msg_id() for step in steps}
    assert len(ids) == 3
    assert stuck_alert.msg_id().endswith(":2:alert.deletion.stuck:stuck_alert")


def test_kube_msg_id_names_the_object_state_not_the_verb() -> None:
    modified = by_type(events.KubePodEvent)
    meta = modified.object.metadata
    relisted = msgspec.structs.replace(modified, action="ADDED")
    assert modified.msg_id() == relisted.msg_id() == f"pod:{meta.uid}:{meta.resource_version}"
    newer = msgspec.structs.replace(
        modified,
        object=msgspec.structs.replace(
            modified.object, metadata=msgspec.structs.replace(meta, resource_version="99999")
        ),
    )
    assert newer.msg_id() != modified.msg_id()


def test_real_and_inferred_deletions_share_one_msg_id() -> None:
    pod_event = by_type(events.KubePodEvent)
    real = msgspec.structs.replace(pod_event, action="DELETED")
    obj = pod_event.object
    inferred = msgspec.structs.replace(
        real,
        inferred=True,
        object=msgspec.structs.replace(
            obj, metadata=msgspec.structs.replace(obj.metadata, resource_version="1")
        ),
    )
    assert real.msg_id() == inferred.msg_id() == f"pod:{obj.metadata.uid}:DELETED"


# ------------------------------------------------------------- raw Kubernetes JSON

RAW_POD: dict[str, Any] = {
    "kind": "Pod",
    "apiVersion": "v1",
    "metadata": {
        "name": "bert-finetune-worker-0",
        "generateName": "bert-finetune-",
        "namespace": "team-a",
        "uid": "0b6c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3",
        "resourceVersion": "48213",
        "creationTimestamp": "2026-01-15T09:20:00Z",
        "deletionTimestamp": "2026-01-15T09:28:45Z",
        "deletionGracePeriodSeconds": 30,
        "labels": {
            "workload.codeflare.dev/appwrapper": "bert-finetune",
            "batch.kubernetes.io/job-name": "bert-finetune",
        },
        "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
        "finalizers": ["batch.kubernetes.io/job-tracking"],
        "ownerReferences": [
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "bert-finetune",
                "uid": "1c7d2e3f-4051-4b6c-9d7e-8f90a1b2c3d4",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        "managedFields": [
            {
                "manager": "kube-controller-manager",
                "operation": "Update",
                "apiVersion": "v1",
                "time": "2026-01-15T09:20:00Z",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}},
            }
        ],
    },
    "spec": {
        "nodeName": "node-3",
        "schedulerName": "default-scheduler",
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 30,
        "tolerations": [
            {
                "key": "node.kubernetes.io/unreachable",
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": 300,
            }
        ],
        "volumes": [{"name": "kube-api-access", "projected": {"sources": []}}],
        "containers": [
            {
                "name": "trainer",
                "image": "registry.example/bert:1.4",
                "command": ["python", "train.py"],
                "resources": {
                    "requests": {
                        "cpu": "4",
                        "memory": "16Gi",
                        "nvidia.com/gpu": "1",
                        "ephemeral-storage": "1Gi",
                    },
                    "limits": {"nvidia.com/gpu": "1"},
                },
                "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets"}],
            },
            {"name": "sidecar", "image": "busybox"},
        ],
    },
    "status": {
        "phase": "Running",
        "hostIP": "10.0.0.3",
        "podIP": "10.244.3.7",
        "startTime": "2026-01-15T09:20:02Z",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "True",
                "lastTransitionTime": "2026-01-15T09:20:00Z",
            },
            {
                "type": "Ready",
                "status": "True",
                "lastProbeTime": None,
                "lastTransitionTime": "2026-01-15T09:20:05Z",
            },
        ],
        "containerStatuses": [
            {"name": "trainer", "ready": True, "restartCount": 0, "state": {"running": {}}}
        ],
        "qosClass": "Burstable",
    },
}


def test_raw_pod_json_decodes_straight_into_the_slim_snapshot() -> None:
    pod = msgspec.json.decode(json.dumps(RAW_POD).encode(), type=events.PodObject)
    meta = pod.metadata
    assert (meta.namespace, meta.name, meta.uid) == (
        "team-a",
        RAW_POD["metadata"]["name"],
        RAW_POD["metadata"]["uid"],
    )
    assert meta.deletion_timestamp == datetime(2026, 1, 15, 9, 28, 45, tzinfo=UTC)
    assert meta.deletion_grace_period_seconds == 30
    assert meta.finalizers == ("batch.kubernetes.io/job-tracking",)
    assert meta.owner_references[0].controller is True
    assert pod.spec.node_name == "node-3"
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.containers[0].resources.requests == events.ResourceList(
        cpu="4", memory="16Gi", nvidia_gpu="1"
    )
    assert pod.spec.containers[1].resources.requests == events.ResourceList()
    assert pod.status.phase == "Running"
    assert pod.ready
    assert events.snapshot_pod(RAW_POD) == pod  # the dict path agrees with the bytes path
    slim = msgspec.json.encode(pod)
    assert b"managedFields" not in slim and b"annotations" not in slim
    assert len(slim) < len(json.dumps(RAW_POD))


def test_list_items_without_kind_get_the_kind_of_their_snapshot_type() -> None:
    item = {k: v for k, v in RAW_POD.items() if k not in ("kind", "apiVersion")}
    pod = events.snapshot_pod(item)
    assert (pod.kind, pod.api_version) == ("Pod", "v1")


def test_a_minimal_pod_is_enough() -> None:
    raw = {"metadata": {"name": "p", "uid": "u-1", "resourceVersion": "1"}}
    pod = events.snapshot_pod(raw)
    assert pod.metadata.namespace is None
    assert pod.spec.node_name is None
    assert pod.status.phase is None
    assert not pod.ready


def test_a_pod_without_uid_is_rejected_with_its_path() -> None:
    raw = {"metadata": {"name": "p", "resourceVersion": "1"}}
    with pytest.raises(msgspec.ValidationError, match=r"uid.*\$\.metadata"):
        events.snapshot_pod(raw)


def test_raw_node_json_keeps_conditions_taints_and_gpu_capacity() -> None:
    raw = {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": "node-3",
            "uid": "n-3",
            "resourceVersion": "7",
            "labels": {"kubernetes.io/hostname": "node-3"},
        },
        "spec": {
            "podCIDR": "10.244.3.0/24",
            "unschedulable": True,
            "taints": [
                {
                    "key": "node.kubernetes.io/unreachable",
                    "effect": "NoExecute",
                    "timeAdded": "2026-01-15T09:28:00Z",
                },
                {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"},
            ],
        },
        "status": {
            "capacity": {"cpu": "32"},
            "allocatable": {
                "cpu": "31500m",
                "memory": "250Gi",
                "nvidia.com/gpu": "8",
                "pods": "110",
            },
            "conditions": [
                {
                    "type": "MemoryPressure",
                    "status": "False",
                    "reason": "KubeletHasSufficientMemory",
                },
                {
                    "type": "Ready",
                    "status": "Unknown",
                    "reason": "NodeStatusUnknown",
                    "lastTransitionTime": "2026-01-15T09:27:30Z",
                },
            ],
            "nodeInfo": {"kubeletVersion": "v1.31.0"},
        },
    }
    node = msgspec.json.decode(json.dumps(raw), type=events.NodeObject)
    assert events.snapshot_node(raw) == node
    assert node.metadata.namespace is None
    assert node.spec.unschedulable
    assert node.spec.taints[0].time_added == datetime(2026, 1, 15, 9, 28, tzinfo=UTC)
    assert node.spec.taints[1].value is None
    assert node.status.allocatable == events.ResourceList(
        cpu="31500m", memory="250Gi", nvidia_gpu="8"
    )
    ready = next(c for c in node.status.conditions if c.type == "Ready")
    assert (ready.status, ready.reason) == ("Unknown", "NodeStatusUnknown")
    assert json.loads(msgspec.json.encode(node))["status"]["allocatable"]["nvidia.com/gpu"] == "8"


def test_raw_appwrapper_keeps_policy_and_generic_items_verbatim() -> None:
    template = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "bert"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }
    raw = {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {
            "name": "bert",
            "namespace": "team-a",
            "uid": "aw-1",
            "resourceVersion": "3",
            "generation": 2,
        },
        "spec": {
            "priority": 5,
            "schedulingSpec": {
                "minAvailable": 2,
                "requeuing": {
                    "timeInSeconds": 120,
                    "growthType": "exponential",
                    "maxNumRequeuings": 5,
                    "pauseTimeInSeconds": 30,
                    "forceDeletionTimeInSeconds": 0,
                    "stuckAlertTimeInSeconds": 20,
                    "finalizerRemoval": "AfterForceDeletion",
                    "numRequeuings": 1,
                },
                "dispatchDuration": {"limit": 3600, "expected": 100},
            },
            "resources": {
                "GenericItems": [
                    {"replicas": 1, "completionstatus": "Complete", "generictemplate": template}
                ]
            },
        },
        "status": {
            "state": "Running",
            "numberOfRequeueings": 1,
            "Succeeded": 0,
            "conditions": [
                {
                    "type": "Dispatched",
                    "status": "True",
                    "lastUpdateMicroTime": "2026-01-15T09:20:00.123456Z",
                }
            ],
            "clearance": {"attempt": 2, "clearedAt": "2026-01-15T09:25:00Z", "stuck": []},
        },
    }
    aw = events.snapshot_appwrapper(raw)
    assert msgspec.json.decode(json.dumps(raw), type=events.AppWrapperObject) == aw
    requeuing = aw.spec.scheduling_spec.requeuing
    assert (requeuing.time_in_seconds, requeuing.growth_type, requeuing.max_num_requeuings) == (
        120,
        "exponential",
        5,
    )
    assert requeuing.force_deletion_time_in_seconds == 0
    assert requeuing.finalizer_removal == "AfterForceDeletion"
    assert aw.spec.scheduling_spec.min_available == 2
    assert aw.spec.scheduling_spec.dispatch_duration.limit == 3600
    assert aw.spec.resources.generic_items[0]["generictemplate"] == template
    assert aw.status.clearance == events.ClearanceStatus(
        attempt=2, cleared_at=datetime(2026, 1, 15, 9, 25, tzinfo=UTC)
    )
    encoded = json.loads(msgspec.json.encode(aw))
    assert encoded["spec"]["resources"]["GenericItems"][0]["generictemplate"] == template
    assert encoded["spec"]["schedulingSpec"]["requeuing"]["stuckAlertTimeInSeconds"] == 20


def test_snapshot_item_fills_in_what_list_items_omit() -> None:
    raw = {
        "metadata": {"name": "svc", "namespace": "ns", "uid": "s-1", "resourceVersion": "4"},
        "spec": {"ports": []},
    }
    item = events.snapshot_item(raw, kind="Service", api_version="v1")
    assert (item.kind, item.api_version, item.metadata.name) == ("Service", "v1", "svc")
    with pytest.raises(msgspec.ValidationError, match="kind"):
        events.snapshot_item(raw)


def test_the_same_pod_watched_as_pod_and_as_item_gets_two_msg_ids() -> None:
    """A bare Pod wrapped by an AppWrapper is both a pod and an item: both copies are stored."""
    pod = by_type(events.KubePodEvent)
    item = events.KubeItemEvent(
        action=pod.action,
        observed_at=pod.observed_at,
        object=events.ItemObject(kind="Pod", api_version="v1", metadata=pod.object.metadata),
    )
    assert pod.msg_id() != item.msg_id()
