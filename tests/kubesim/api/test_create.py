"""Reference §2.2 and §2.5: server-set fields, defaults, admission, create conflicts."""

from __future__ import annotations

import re

import aiohttp
from api_support import api_error, appwrapper, pod_body
from kubernetes_asyncio import client as k8s

from kubesim.apiserver import ApiServer

TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


async def test_create_sets_uid_timestamp_and_global_resource_version(
    core_api: k8s.CoreV1Api, apiserver: ApiServer, ns: str
) -> None:
    before = apiserver.store.rev
    cm = await core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    assert re.match(r"^[0-9a-f-]{36}$", cm.metadata.uid)
    assert int(cm.metadata.resource_version) == before + 1
    raw = apiserver.store.get(("", "configmaps"), ns, "c")
    assert raw is not None and TS.match(raw["metadata"]["creationTimestamp"])


async def test_generate_name_appends_five_random_chars(core_api: k8s.CoreV1Api, ns: str) -> None:
    cm = await core_api.create_namespaced_config_map(ns, {"metadata": {"generateName": "job-"}})
    assert re.match(r"^job-[a-z0-9]{5}$", cm.metadata.name)


async def test_pod_gets_pending_status_and_spec_defaults(core_api: k8s.CoreV1Api, ns: str) -> None:
    body = pod_body("p")
    body["status"] = {"phase": "Running"}
    pod = await core_api.create_namespaced_pod(ns, body)
    assert pod.status.phase == "Pending"
    assert pod.status.qos_class == "BestEffort"
    assert pod.spec.restart_policy == "Always"
    assert pod.spec.termination_grace_period_seconds == 30
    assert pod.spec.dns_policy == "ClusterFirst"
    assert pod.spec.scheduler_name == "default-scheduler"


async def test_default_toleration_seconds_adds_not_ready_and_unreachable(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    pod = await core_api.create_namespaced_pod(ns, pod_body("p"))
    tolerations = {
        (t.key, t.effect, t.operator, t.toleration_seconds) for t in pod.spec.tolerations
    }
    assert tolerations == {
        ("node.kubernetes.io/not-ready", "NoExecute", "Exists", 300),
        ("node.kubernetes.io/unreachable", "NoExecute", "Exists", 300),
    }


async def test_existing_unreachable_toleration_is_kept(core_api: k8s.CoreV1Api, ns: str) -> None:
    body = pod_body(
        "p",
        tolerations=[
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"}
        ],
    )
    pod = await core_api.create_namespaced_pod(ns, body)
    unreachable = [t for t in pod.spec.tolerations if t.key == "node.kubernetes.io/unreachable"]
    assert len(unreachable) == 1 and unreachable[0].toleration_seconds is None


async def test_guaranteed_qos_when_limits_equal_requests(core_api: k8s.CoreV1Api, ns: str) -> None:
    body = pod_body("p")
    body["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "1", "memory": "1Gi"}}
    pod = await core_api.create_namespaced_pod(ns, body)
    assert pod.status.qos_class == "Guaranteed"
    assert pod.spec.containers[0].resources.requests == {"cpu": "1", "memory": "1Gi"}


async def test_job_gets_generated_selector_labels_and_defaults(
    batch_api: k8s.BatchV1Api, ns: str
) -> None:
    job = await batch_api.create_namespaced_job(
        ns,
        {
            "metadata": {"name": "j"},
            "spec": {
                "template": {
                    "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
                }
            },
            "status": {"active": 3},
        },
    )
    uid = job.metadata.uid
    assert job.spec.selector.match_labels == {"batch.kubernetes.io/controller-uid": uid}
    labels = job.spec.template.metadata.labels
    assert labels["controller-uid"] == uid and labels["batch.kubernetes.io/controller-uid"] == uid
    assert labels["job-name"] == "j" and labels["batch.kubernetes.io/job-name"] == "j"
    assert (job.spec.parallelism, job.spec.completions, job.spec.backoff_limit) == (1, 1, 6)
    assert job.spec.completion_mode == "NonIndexed"
    assert job.spec.pod_replacement_policy == "TerminatingOrFailed"
    assert job.spec.manual_selector is None
    assert job.metadata.generation == 1
    assert job.status.active is None


async def test_job_with_restart_policy_always_is_invalid(
    batch_api: k8s.BatchV1Api, ns: str
) -> None:
    body = {
        "metadata": {"name": "j"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}},
    }
    code, status = await api_error(batch_api.create_namespaced_job(ns, body))
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "spec.template.spec.restartPolicy"


async def test_name_clash_is_409_already_exists_with_plural_kind(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p"))
    code, status = await api_error(core_api.create_namespaced_pod(ns, pod_body("p")))
    assert code == 409
    assert status == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "p" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "p", "kind": "pods"},
        "code": 409,
    }


async def test_clash_with_terminating_object_says_object_is_being_deleted(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    await core_api.create_namespaced_pod(ns, pod_body("p", node="n1"))
    await core_api.delete_namespaced_pod("p", ns)
    code, status = await api_error(core_api.create_namespaced_pod(ns, pod_body("p")))
    assert code == 409
    assert status["message"] == 'object is being deleted: pods "p" already exists'


async def test_cr_clash_names_group_and_qualified_resource(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    await custom_api.create_namespaced_custom_object(
        "workload.codeflare.dev", "v1beta1", ns, "appwrappers", appwrapper("a")
    )
    code, status = await api_error(
        custom_api.create_namespaced_custom_object(
            "workload.codeflare.dev", "v1beta1", ns, "appwrappers", appwrapper("a")
        )
    )
    assert code == 409
    assert status["message"] == 'appwrappers.workload.codeflare.dev "a" already exists'
    assert status["details"] == {
        "name": "a",
        "group": "workload.codeflare.dev",
        "kind": "appwrappers",
    }


async def test_invalid_name_is_422_with_field_cause(core_api: k8s.CoreV1Api, ns: str) -> None:
    code, status = await api_error(core_api.create_namespaced_pod(ns, pod_body("Bad_Name")))
    assert code == 422
    assert status["reason"] == "Invalid"
    assert status["details"]["kind"] == "Pod"
    cause = status["details"]["causes"][0]
    assert cause["reason"] == "FieldValueInvalid" and cause["field"] == "metadata.name"
    assert status["message"].startswith(
        'Pod "Bad_Name" is invalid: metadata.name: Invalid value: "Bad_Name"'
    )


async def test_pod_without_containers_is_422_required(core_api: k8s.CoreV1Api, ns: str) -> None:
    body = {"metadata": {"name": "p"}, "spec": {"containers": []}}
    code, status = await api_error(core_api.create_namespaced_pod(ns, body))
    assert code == 422
    assert status["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.containers"}
    ]


async def test_resource_version_on_create_is_rejected(core_api: k8s.CoreV1Api, ns: str) -> None:
    # storage.ErrResourceVersionSetOnCreate is a plain error → 500 InternalError in the real server.
    code, status = await api_error(
        core_api.create_namespaced_config_map(
            ns, {"metadata": {"name": "c", "resourceVersion": "5"}}
        )
    )
    assert code == 500
    assert (
        status["message"]
        == "Internal error occurred: resourceVersion should not be set on objects to be created"
    )


async def test_namespace_mismatch_between_body_and_url_is_400(
    core_api: k8s.CoreV1Api, ns: str
) -> None:
    code, status = await api_error(
        core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c", "namespace": "other"}})
    )
    assert code == 400
    assert (
        status["message"]
        == "the namespace of the provided object does not match the namespace sent on the request"
    )


async def test_missing_namespace_is_404_namespace_not_found(core_api: k8s.CoreV1Api) -> None:
    code, status = await api_error(
        core_api.create_namespaced_config_map("nope", {"metadata": {"name": "c"}})
    )
    assert code == 404
    assert status["message"] == 'namespaces "nope" not found'
    assert status["details"] == {"name": "nope", "kind": "namespaces"}


async def test_terminating_namespace_is_403_forbidden(core_api: k8s.CoreV1Api, ns: str) -> None:
    await core_api.delete_namespace(ns)
    code, status = await api_error(
        core_api.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    )
    assert code == 403
    assert status["message"] == (
        f'configmaps "c" is forbidden: unable to create new content in namespace {ns} '
        "because it is being terminated"
    )
    assert status["details"]["causes"][0]["reason"] == "NamespaceTerminating"


async def test_strict_field_validation_rejects_unknown_field(
    http: aiohttp.ClientSession, ns: str
) -> None:
    body = pod_body("p")
    body["spec"]["containerz"] = []
    resp = await http.post(f"/api/v1/namespaces/{ns}/pods?fieldValidation=Strict", json=body)
    assert resp.status == 400
    status = await resp.json()
    assert status["message"] == 'strict decoding error: unknown field "spec.containerz"'


async def test_strict_field_validation_reports_duplicate_field(
    http: aiohttp.ClientSession, ns: str
) -> None:
    raw = b'{"metadata":{"name":"c","name":"c"}}'
    resp = await http.post(
        f"/api/v1/namespaces/{ns}/configmaps?fieldValidation=Strict",
        data=raw,
        headers={"Content-Type": "application/json"},
    )
    assert resp.status == 400
    assert 'duplicate field "name"' in (await resp.json())["message"]


async def test_default_field_validation_warns_and_drops_unknown_field(
    http: aiohttp.ClientSession, ns: str
) -> None:
    body = pod_body("p")
    body["spec"]["containerz"] = []
    resp = await http.post(f"/api/v1/namespaces/{ns}/pods", json=body)
    assert resp.status == 201
    assert resp.headers.getall("Warning") == ['299 - "unknown field \\"spec.containerz\\""']
    assert "containerz" not in (await resp.json())["spec"]


async def test_ignore_field_validation_drops_silently(http: aiohttp.ClientSession, ns: str) -> None:
    body = pod_body("p")
    body["spec"]["containerz"] = []
    resp = await http.post(f"/api/v1/namespaces/{ns}/pods?fieldValidation=Ignore", json=body)
    assert resp.status == 201
    assert "Warning" not in resp.headers


async def test_cr_unknown_fields_pruned_by_schema_but_preserved_where_declared(
    custom_api: k8s.CustomObjectsApi, aw_crd: object, ns: str
) -> None:
    body = appwrapper("a", extra=1, resources={"anything": {"goes": True}})
    obj = await custom_api.create_namespaced_custom_object(
        "workload.codeflare.dev", "v1beta1", ns, "appwrappers", body
    )
    assert "extra" not in obj["spec"]
    assert obj["spec"]["resources"] == {"anything": {"goes": True}}


async def test_microtime_and_time_fields_are_normalized(
    http: aiohttp.ClientSession, ns: str
) -> None:
    event = {
        "metadata": {"name": "e"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
        "eventTime": "2026-01-02T03:04:05+00:00",
        "firstTimestamp": "2026-01-02T03:04:05.123+00:00",
        "reportingComponent": "x",
        "reportingInstance": "y",
        "action": "a",
        "reason": "r",
    }
    resp = await http.post(f"/api/v1/namespaces/{ns}/events", json=event)
    created = await resp.json()
    assert created["eventTime"] == "2026-01-02T03:04:05.000000Z"
    assert created["firstTimestamp"] == "2026-01-02T03:04:05Z"


def test_protobuf_envelope_decodes_namespace() -> None:
    from kubesim import protobuf

    def field(number: int, payload: bytes) -> bytes:
        return bytes([number << 3 | 2, len(payload)]) + payload

    meta = field(1, b"foo") + field(11, field(1, b"a") + field(2, b"b"))
    raw = field(1, meta)
    body = protobuf.MAGIC + field(1, field(1, b"v1") + field(2, b"Namespace")) + field(2, raw)
    assert protobuf.decode(body) == {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": "foo", "labels": {"a": "b"}},
    }


async def test_invalid_label_value_is_422(core_api: k8s.CoreV1Api, ns: str) -> None:
    code, status = await api_error(
        core_api.create_namespaced_config_map(
            ns, {"metadata": {"name": "c", "labels": {"a": "not ok!"}}}
        )
    )
    assert code == 422
    assert status["details"]["causes"][0]["field"] == "metadata.labels"


async def test_owner_reference_without_uid_is_422(
    core_api: k8s.CoreV1Api, http: aiohttp.ClientSession, ns: str
) -> None:
    ref = {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": ""}
    resp = await http.post(
        f"/api/v1/namespaces/{ns}/configmaps",
        json={"metadata": {"name": "c", "ownerReferences": [ref]}},
    )
    assert resp.status == 422
    assert (await resp.json())["details"]["causes"][0]["field"] == "metadata.ownerReferences.uid"


async def test_secret_string_data_is_folded_into_data(core_api: k8s.CoreV1Api, ns: str) -> None:
    secret = await core_api.create_namespaced_secret(
        ns, {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    )
    assert secret.data == {"k": "dg=="} and secret.string_data is None and secret.type == "Opaque"
