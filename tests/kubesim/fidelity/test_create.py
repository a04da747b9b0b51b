"""Reference §2.2 (server-set metadata on create) and §2.5 (create conflicts and validation)."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from fidelity_support import (
    AW_API_VERSION,
    MICROTIME_RE,
    TIMESTAMP_RE,
    UID_RE,
    Client,
    Http,
    JsonObj,
    ServerHandle,
    appwrapper,
    configmap,
    job,
    pod,
)
from kubernetes_asyncio import client as k8s

# --- §2.2 server-set metadata -----------------------------------------------------------------


async def test_create_sets_uid_timestamp_and_resource_version(client: Client, ns: str) -> None:
    created = (await client.create(pod("p1", ns))).value()
    meta = created["metadata"]
    assert UID_RE.match(meta["uid"]), meta["uid"]
    assert meta["resourceVersion"].isdigit()
    assert meta["namespace"] == ns
    # typed/dynamic clients re-serialise datetimes; the wire format is checked on the raw GET.
    assert meta["creationTimestamp"]


async def test_creation_timestamp_is_rfc3339_seconds_with_z(http: Http, ns: str) -> None:
    resp = await http.request("POST", f"/api/v1/namespaces/{ns}/pods", json_body=pod("p1", ns))
    assert resp.status == 201
    assert resp.headers["Content-Type"].startswith("application/json")
    assert TIMESTAMP_RE.match(resp.json()["metadata"]["creationTimestamp"])


async def test_resource_version_is_one_global_counter_across_types(http: Http, ns: str) -> None:
    rvs = []
    for path, body in [
        (f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns)),
        (f"/api/v1/namespaces/{ns}/pods", pod("p1", ns)),
        (f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns)),
        (f"/api/v1/namespaces/{ns}/configmaps", configmap("c2", ns)),
    ]:
        resp = await http.request("POST", path, json_body=body)
        assert resp.status == 201, resp.body
        rvs.append(int(resp.json()["metadata"]["resourceVersion"]))
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs)


async def test_resource_version_on_create_is_rejected(http: Http, ns: str) -> None:
    body = configmap("c1", ns)
    body["metadata"]["resourceVersion"] = "5"
    resp = await http.request("POST", f"/api/v1/namespaces/{ns}/configmaps", json_body=body)
    assert resp.status >= 400
    assert resp.json()["kind"] == "Status"
    assert "resourceVersion should not be set on objects to be created" in resp.json()["message"]


async def test_generate_name_appends_five_random_characters(client: Client, ns: str) -> None:
    first = (await client.create(pod("", ns, generate_name="worker-"))).value()
    second = (await client.create(pod("", ns, generate_name="worker-"))).value()
    for created in (first, second):
        assert re.fullmatch(r"worker-[a-z0-9]{5}", created["metadata"]["name"])
        assert created["metadata"]["generateName"] == "worker-"
    assert first["metadata"]["name"] != second["metadata"]["name"]


async def test_cr_and_job_generation_starts_at_one(client: Client, ns: str) -> None:
    assert (await client.create(appwrapper("aw1", ns))).value()["metadata"]["generation"] == 1
    assert (await client.create(job("j1", ns))).value()["metadata"]["generation"] == 1


async def test_pod_status_is_reset_to_pending_on_create(http: Http, ns: str) -> None:
    body = pod("p1", ns)
    body["status"] = {"phase": "Running", "podIP": "10.0.0.9"}
    resp = await http.request("POST", f"/api/v1/namespaces/{ns}/pods", json_body=body)
    assert resp.status == 201
    status = resp.json()["status"]
    assert status["phase"] == "Pending"
    assert "podIP" not in status


async def test_job_status_is_cleared_on_create(http: Http, ns: str) -> None:
    body = job("j1", ns)
    body["status"] = {"succeeded": 3}
    resp = await http.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", json_body=body)
    assert resp.status == 201
    assert "succeeded" not in resp.json().get("status", {})


async def test_cr_status_is_dropped_on_create_with_status_subresource(
    client: Client, ns: str
) -> None:
    created = (
        await client.create(appwrapper("aw1", ns, status={"state": "Running", "running": 3}))
    ).value()
    assert not created.get("status")


async def test_job_gets_generated_selector_and_template_labels(http: Http, ns: str) -> None:
    resp = await http.request(
        "POST", f"/apis/batch/v1/namespaces/{ns}/jobs", json_body=job("j1", ns)
    )
    assert resp.status == 201
    created = resp.json()
    uid = created["metadata"]["uid"]
    labels = created["spec"]["template"]["metadata"]["labels"]
    assert labels["batch.kubernetes.io/controller-uid"] == uid
    assert labels["controller-uid"] == uid
    assert labels["batch.kubernetes.io/job-name"] == "j1"
    assert labels["job-name"] == "j1"
    assert created["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"] == uid


async def test_namespace_is_filled_from_url_when_missing(http: Http, ns: str) -> None:
    resp = await http.request(
        "POST", f"/api/v1/namespaces/{ns}/configmaps", json_body=configmap("c1", None)
    )
    assert resp.status == 201
    assert resp.json()["metadata"]["namespace"] == ns


async def test_namespace_mismatch_is_400(http: Http, ns: str) -> None:
    resp = await http.request(
        "POST", f"/api/v1/namespaces/{ns}/configmaps", json_body=configmap("c1", "elsewhere")
    )
    assert resp.status == 400
    status = resp.json()
    assert status["reason"] == "BadRequest"
    assert status["message"] == (
        "the namespace of the provided object does not match the namespace sent on the request"
    )


async def test_create_in_missing_namespace_is_404(client: Client) -> None:
    outcome = await client.create(pod("p1", "no-such-namespace"))
    outcome.expect_failure(
        code=404, reason="NotFound", message='namespaces "no-such-namespace" not found'
    )


async def test_create_in_terminating_namespace_is_403(
    http: Http, server: ServerHandle, ns: str
) -> None:
    deleted = await http.request("DELETE", f"/api/v1/namespaces/{ns}")
    assert deleted.status in (200, 202)
    resp = await http.request(
        "POST", f"/api/v1/namespaces/{ns}/configmaps", json_body=configmap("c1", ns)
    )
    assert resp.status == 403
    status = resp.json()
    assert status["reason"] == "Forbidden"
    assert (
        f"unable to create new content in namespace {ns} because it is being terminated"
        in status["message"]
    )
    assert [c["reason"] for c in status["details"]["causes"]] == ["NamespaceTerminating"]


async def test_microtime_fields_accept_isoformat_and_return_microseconds(
    api: k8s.ApiClient, http: Http, ns: str
) -> None:
    leases = k8s.CoordinationV1Api(api)
    renew = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    await leases.create_namespaced_lease(
        ns,
        k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(name="node-1"),
            spec=k8s.V1LeaseSpec(holder_identity="node-1", renew_time=renew),
        ),
    )
    raw = (
        await http.request("GET", f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/node-1")
    ).json()
    assert MICROTIME_RE.match(raw["spec"]["renewTime"]), raw["spec"]["renewTime"]
    assert raw["spec"]["renewTime"].startswith("2026-01-02T03:04:05")
    typed = await leases.read_namespaced_lease("node-1", ns)
    assert typed.spec.renew_time == renew


async def test_core_event_round_trips_through_typed_client(core: k8s.CoreV1Api, ns: str) -> None:
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    created = await core.create_namespaced_event(
        ns,
        k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(name="ev1"),
            involved_object=k8s.V1ObjectReference(kind="Pod", namespace=ns, name="p1"),
            reason="Testing",
            message="hello",
            type="Normal",
            count=1,
            first_timestamp=now,
            last_timestamp=now,
            source=k8s.V1EventSource(component="fidelity"),
        ),
    )
    assert created.involved_object.name == "p1"
    assert created.last_timestamp == now


# --- §2.5 create conflicts --------------------------------------------------------------------


async def test_name_clash_is_409_already_exists_exact_status(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/pods"
    assert (await http.request("POST", path, json_body=pod("pod-1", ns))).status == 201
    resp = await http.request("POST", path, json_body=pod("pod-1", ns))
    assert resp.status == 409
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "pod-1" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "pod-1", "kind": "pods"},
        "code": 409,
    }


async def test_name_clash_reported_by_every_client(client: Client, ns: str) -> None:
    (await client.create(pod("pod-1", ns))).value()
    outcome = await client.create(pod("pod-1", ns))
    outcome.expect_failure(code=409, reason="AlreadyExists", message='pods "pod-1" already exists')


async def test_cr_name_clash_names_group_and_plural(http: Http, ns: str) -> None:
    path = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    assert (await http.request("POST", path, json_body=appwrapper("x", ns))).status == 201
    resp = await http.request("POST", path, json_body=appwrapper("x", ns))
    assert resp.status == 409
    status = resp.json()
    assert status["reason"] == "AlreadyExists"
    assert status["message"] == 'appwrappers.workload.codeflare.dev "x" already exists'
    assert status["details"] == {
        "name": "x",
        "group": "workload.codeflare.dev",
        "kind": "appwrappers",
    }


async def test_clash_with_terminating_pod_says_object_is_being_deleted(
    client: Client, http: Http, ns: str
) -> None:
    # Bound to a node that has no kubelet: graceful delete leaves it Terminating.
    (await client.create(pod("pod-1", ns, node_name="node-x", grace=30))).value()
    deleted = await http.request("DELETE", f"/api/v1/namespaces/{ns}/pods/pod-1")
    assert deleted.status == 200
    assert deleted.json()["metadata"]["deletionTimestamp"]
    outcome = await client.create(pod("pod-1", ns))
    outcome.expect_failure(
        code=409,
        reason="AlreadyExists",
        message='object is being deleted: pods "pod-1" already exists',
    )


async def test_clash_with_finalizer_held_object_exact_status(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    body = configmap("cm-1", ns, finalizers=["example.com/hold"])
    assert (await http.request("POST", path, json_body=body)).status == 201
    assert (await http.request("DELETE", f"{path}/cm-1")).status == 200
    resp = await http.request("POST", path, json_body=configmap("cm-1", ns))
    assert resp.status == 409
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'object is being deleted: configmaps "cm-1" already exists',
        "reason": "AlreadyExists",
        "details": {"name": "cm-1", "kind": "configmaps"},
        "code": 409,
    }


async def test_invalid_pod_name_is_422_with_field_cause(client: Client, ns: str) -> None:
    outcome = await client.create(pod("Bad_Name", ns))
    outcome.expect_failure(code=422, reason="Invalid", message="metadata.name")


async def test_invalid_pod_name_status_shape(http: Http, ns: str) -> None:
    resp = await http.request(
        "POST", f"/api/v1/namespaces/{ns}/pods", json_body=pod("Bad_Name", ns)
    )
    assert resp.status == 422
    status = resp.json()
    assert status["kind"] == "Status" and status["status"] == "Failure"
    assert status["reason"] == "Invalid" and status["code"] == 422
    assert status["message"].startswith('Pod "Bad_Name" is invalid: metadata.name')
    assert status["details"]["name"] == "Bad_Name"
    causes = status["details"]["causes"]
    assert any(
        c["reason"] == "FieldValueInvalid" and c["field"] == "metadata.name" and c["message"]
        for c in causes
    ), causes


async def test_pod_without_containers_is_422_field_value_required(http: Http, ns: str) -> None:
    body = pod("p1", ns)
    del body["spec"]["containers"]
    resp = await http.request("POST", f"/api/v1/namespaces/{ns}/pods", json_body=body)
    assert resp.status == 422
    status = resp.json()
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('Pod "p1" is invalid: spec.containers')
    assert any(
        c["reason"] == "FieldValueRequired" and c["field"] == "spec.containers"
        for c in status["details"]["causes"]
    )


# --- built-ins stored faithfully (issue 3: services, deployments, statefulsets, rbac) -----------

FAITHFUL = [
    (
        "/api/v1/namespaces/{ns}/services",
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "s1"},
            "spec": {"selector": {"app": "a"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
    ),
    (
        "/apis/apps/v1/namespaces/{ns}/statefulsets",
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": "ss1"},
            "spec": {
                "serviceName": "s1",
                "selector": {"matchLabels": {"app": "a"}},
                "template": {
                    "metadata": {"labels": {"app": "a"}},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]},
                },
            },
        },
    ),
    (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "r1"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "delete"]}],
        },
    ),
    (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "rb1"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r1"},
            "subjects": [{"kind": "ServiceAccount", "name": "default", "namespace": "x"}],
        },
    ),
]


@pytest.mark.parametrize(("path", "body"), FAITHFUL, ids=lambda v: v if isinstance(v, str) else "")
async def test_other_builtins_round_trip(http: Http, ns: str, path: str, body: JsonObj) -> None:
    collection = path.format(ns=ns)
    resp = await http.request("POST", collection, json_body=body)
    assert resp.status == 201, resp.body
    got = (await http.request("GET", f"{collection}/{body['metadata']['name']}")).json()
    for key, value in body.items():
        if key != "metadata":
            _assert_subset(value, got[key], key)


def _assert_subset(expected: object, actual: object, where: str) -> None:
    """Everything sent is stored (a real server may add defaults around it)."""
    if isinstance(expected, dict):
        assert isinstance(actual, dict), where
        for key, value in expected.items():
            assert key in actual, f"{where}.{key} missing"
            _assert_subset(value, actual[key], f"{where}.{key}")
    elif isinstance(expected, list):
        assert isinstance(actual, list) and len(actual) == len(expected), where
        for i, (e, a) in enumerate(zip(expected, actual, strict=True)):
            _assert_subset(e, a, f"{where}[{i}]")
    else:
        assert expected == actual, f"{where}: {actual!r} != {expected!r}"


# --- server-side field validation (§2.13) ------------------------------------------------------


def _pod_with_unknown_field(ns: str) -> JsonObj:
    body = pod("p1", ns)
    body["spec"]["containerz"] = []
    return body


async def test_field_validation_strict_rejects_unknown_field(http: Http, ns: str) -> None:
    resp = await http.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        params={"fieldValidation": "Strict"},
        json_body=_pod_with_unknown_field(ns),
    )
    assert resp.status == 400
    status = resp.json()
    assert status["reason"] == "BadRequest"
    assert 'strict decoding error: unknown field "spec.containerz"' in status["message"]


async def test_field_validation_strict_rejects_duplicate_field(http: Http, ns: str) -> None:
    raw = (
        b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c1","name":"c2"},'
        b'"data":{"a":"1"}}'
    )
    resp = await http.request(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        params={"fieldValidation": "Strict"},
        data=raw,
    )
    assert resp.status == 400
    assert "duplicate field" in resp.json()["message"]


async def test_field_validation_warn_accepts_with_warning_header(http: Http, ns: str) -> None:
    resp = await http.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        params={"fieldValidation": "Warn"},
        json_body=_pod_with_unknown_field(ns),
    )
    assert resp.status == 201, resp.body
    # RFC 7234 warn-text: quoted, inner quotes escaped
    assert resp.headers.get("Warning") == '299 - "unknown field \\"spec.containerz\\""'
    assert "containerz" not in resp.json()["spec"]


@pytest.mark.parametrize("params", [{"fieldValidation": "Ignore"}, {}])
async def test_field_validation_ignore_and_default_accept(
    http: Http, ns: str, params: dict[str, str]
) -> None:
    resp = await http.request(
        "POST",
        f"/api/v1/namespaces/{ns}/pods",
        params=params,
        json_body=_pod_with_unknown_field(ns),
    )
    assert resp.status == 201, resp.body
    assert "containerz" not in resp.json()["spec"]


async def test_pod_without_name_or_generate_name_is_422(http: Http, ns: str) -> None:
    body = pod("x", ns)
    del body["metadata"]["name"]
    resp = await http.request("POST", f"/api/v1/namespaces/{ns}/pods", json_body=body)
    assert resp.status == 422
    status = resp.json()
    assert status["reason"] == "Invalid"
    assert any(
        c["reason"] == "FieldValueRequired" and c["field"] == "metadata.name"
        for c in status["details"]["causes"]
    )


async def test_event_time_is_microtime(core: k8s.CoreV1Api, http: Http, ns: str) -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.UTC)
    await core.create_namespaced_event(
        ns,
        k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(name="ev1"),
            involved_object=k8s.V1ObjectReference(kind="Pod", namespace=ns, name="p1"),
            reason="Testing",
            message="hello",
            type="Normal",
            event_time=when,
            reporting_component="fidelity",
            reporting_instance="fidelity-1",
            action="Test",
        ),
    )
    raw = (await http.request("GET", f"/api/v1/namespaces/{ns}/events/ev1")).json()
    assert raw["eventTime"] == "2026-01-02T03:04:05.123456Z"


async def test_delete_and_recreate_gets_new_uid(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    first = await http.request("POST", path, json_body=configmap("c1", ns))
    assert (await http.request("DELETE", f"{path}/c1")).status == 200
    second = await http.request("POST", path, json_body=configmap("c1", ns))
    assert second.status == 201
    assert second.json()["metadata"]["uid"] != first.json()["metadata"]["uid"]


async def test_time_fields_are_truncated_to_seconds(
    core: k8s.CoreV1Api, http: Http, ns: str
) -> None:
    when = dt.datetime(2026, 1, 2, 3, 4, 5, 987654, tzinfo=dt.UTC)
    await core.create_namespaced_event(
        ns,
        k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(name="ev-time"),
            involved_object=k8s.V1ObjectReference(kind="Pod", namespace=ns, name="p1"),
            reason="Testing",
            first_timestamp=when,
            last_timestamp=when,
        ),
    )
    raw = (await http.request("GET", f"/api/v1/namespaces/{ns}/events/ev-time")).json()
    assert raw["lastTimestamp"] == "2026-01-02T03:04:05Z"


async def test_typed_lease_renewal_round_trips_microtime(api: k8s.ApiClient, ns: str) -> None:
    leases = k8s.CoordinationV1Api(api)
    start = dt.datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=dt.UTC)
    lease = await leases.create_namespaced_lease(
        ns,
        k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(name="node-1"),
            spec=k8s.V1LeaseSpec(
                holder_identity="node-1", lease_duration_seconds=40, renew_time=start
            ),
        ),
    )
    renewed_at = start + dt.timedelta(seconds=10, microseconds=1)
    lease.spec.renew_time = renewed_at
    replaced = await leases.replace_namespaced_lease("node-1", ns, lease)
    assert replaced.spec.renew_time == renewed_at
    patched = await leases.patch_namespaced_lease(
        "node-1", ns, {"spec": {"renewTime": (renewed_at + dt.timedelta(seconds=10)).isoformat()}}
    )
    assert patched.spec.renew_time == renewed_at + dt.timedelta(seconds=10)


async def test_invalid_label_key_is_422(http: Http, ns: str) -> None:
    body = configmap("c1", ns, labels={"a~b": "y"})
    resp = await http.request("POST", f"/api/v1/namespaces/{ns}/configmaps", json_body=body)
    assert resp.status == 422
    status = resp.json()
    assert status["message"].startswith('ConfigMap "c1" is invalid: metadata.labels')
    assert [c["field"] for c in status["details"]["causes"]] == ["metadata.labels"]
