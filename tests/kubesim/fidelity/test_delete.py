"""Reference §2.8: DELETE — options from body or query, preconditions, pod graceful deletion,
finalizers, propagation policies (batch/v1 defaults to Orphan) and the response shapes.

Pods are bound to a node with no kubelet (`spec.nodeName`), so a graceful delete leaves them
Terminating: the API server alone is under test, no controller runs."""

from __future__ import annotations

import datetime as dt

from fidelity_support import (
    AW_API_VERSION,
    AW_GROUP,
    AW_PLURAL,
    AW_VERSION,
    MERGE_PATCH,
    TIMESTAMP_RE,
    Client,
    Http,
    JsonObj,
    appwrapper,
    configmap,
    job,
    pod,
    status_from_exception,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException


async def _post(http: Http, path: str, body: JsonObj) -> JsonObj:
    resp = await http.request("POST", path, json_body=body)
    assert resp.status == 201, resp.body
    obj: JsonObj = resp.json()
    return obj


def _pods(ns: str) -> str:
    return f"/api/v1/namespaces/{ns}/pods"


async def _exists(http: Http, path: str) -> bool:
    code = (await http.request("GET", path)).status
    assert code in (200, 404), code
    return code == 200


def _ts(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- options: body wins over query ------------------------------------------------------------


async def test_delete_body_wins_over_query(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=60))
    resp = await http.request(
        "DELETE",
        f"{_pods(ns)}/p1",
        params={"gracePeriodSeconds": "0"},
        json_body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 30},
    )
    assert resp.status == 200
    assert resp.json()["metadata"]["deletionGracePeriodSeconds"] == 30
    assert await _exists(http, f"{_pods(ns)}/p1")


async def test_delete_body_grace_zero_beats_query_grace(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=60))
    resp = await http.request(
        "DELETE",
        f"{_pods(ns)}/p1",
        params={"gracePeriodSeconds": "30"},
        json_body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
    )
    assert resp.status == 200
    assert not await _exists(http, f"{_pods(ns)}/p1")


async def test_delete_query_options_used_when_body_empty(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=60))
    resp = await http.request("DELETE", f"{_pods(ns)}/p1", params={"gracePeriodSeconds": "0"})
    assert resp.status == 200
    assert not await _exists(http, f"{_pods(ns)}/p1")


# --- preconditions ----------------------------------------------------------------------------


async def test_uid_precondition_mismatch_is_409(core: k8s.CoreV1Api, http: Http, ns: str) -> None:
    created = await _post(http, _pods(ns), pod("p1", ns))
    wrong = "00000000-0000-0000-0000-000000000000"
    try:
        await core.delete_namespaced_pod(
            "p1", ns, body=k8s.V1DeleteOptions(preconditions=k8s.V1Preconditions(uid=wrong))
        )
    except ApiException as exc:
        outcome = status_from_exception(exc)
    else:
        raise AssertionError("delete with a wrong UID precondition succeeded")
    outcome.expect_failure(
        code=409,
        reason="Conflict",
        message=(
            f"the UID in the precondition ({wrong}) does not match the UID in record "
            f"({created['metadata']['uid']})"
        ),
    )
    assert await _exists(http, f"{_pods(ns)}/p1")


async def test_resource_version_precondition_mismatch_is_409(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    resp = await http.request(
        "DELETE",
        f"{_pods(ns)}/p1",
        json_body={
            "kind": "DeleteOptions",
            "apiVersion": "v1",
            "preconditions": {"resourceVersion": "1"},
        },
    )
    assert resp.status == 409
    assert resp.json()["reason"] == "Conflict"


async def test_matching_uid_precondition_deletes(core: k8s.CoreV1Api, http: Http, ns: str) -> None:
    created = await _post(http, _pods(ns), pod("p1", ns, node_name="node-x"))
    await core.delete_namespaced_pod(
        "p1",
        ns,
        body=k8s.V1DeleteOptions(
            grace_period_seconds=0,
            preconditions=k8s.V1Preconditions(uid=created["metadata"]["uid"]),
        ),
    )
    assert not await _exists(http, f"{_pods(ns)}/p1")


# --- pod graceful deletion --------------------------------------------------------------------


async def test_graceful_pod_delete_marks_and_keeps_it(
    core: k8s.CoreV1Api, http: Http, ns: str
) -> None:
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=30))
    before = dt.datetime.now(dt.UTC)
    deleted = await core.delete_namespaced_pod("p1", ns)
    assert isinstance(deleted, k8s.V1Pod)
    assert deleted.metadata.deletion_grace_period_seconds == 30
    expected = before + dt.timedelta(seconds=30)
    assert abs((deleted.metadata.deletion_timestamp - expected).total_seconds()) <= 2
    raw = (await http.request("GET", f"{_pods(ns)}/p1")).json()
    assert TIMESTAMP_RE.match(raw["metadata"]["deletionTimestamp"])
    assert raw["metadata"]["deletionGracePeriodSeconds"] == 30


async def test_graceful_pod_delete_is_seen_as_modified(http: Http, ns: str) -> None:
    created = await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=30))

    async def delete() -> None:
        assert (await http.request("DELETE", f"{_pods(ns)}/p1")).status == 200

    result = await http.watch(
        _pods(ns),
        {"watch": "true", "resourceVersion": created["metadata"]["resourceVersion"]},
        max_events=1,
        after_open=delete,
    )
    assert result.events[0]["type"] == "MODIFIED"
    assert result.events[0]["object"]["metadata"]["deletionTimestamp"]


async def test_plain_delete_leaves_bound_pod_terminating(
    client: Client, http: Http, ns: str
) -> None:
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=30))
    outcome = await client.delete("pods", "p1", ns)
    assert outcome.ok, outcome.message
    current = (await client.get("pods", "p1", ns)).value()
    assert current["metadata"]["deletionTimestamp"]
    assert current["metadata"]["deletionGracePeriodSeconds"] == 30


async def test_force_delete_removes_bound_pod(client: Client, http: Http, ns: str) -> None:
    """`kubectl delete --grace-period=0 --force` and its client equivalents."""
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=30))
    assert (await client.delete("pods", "p1", ns, grace_period=0)).ok
    assert not await _exists(http, f"{_pods(ns)}/p1")


async def test_unscheduled_pod_is_deleted_at_once(core: k8s.CoreV1Api, http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns, grace=30, labels={"last": "state"}))
    deleted = await core.delete_namespaced_pod("p1", ns)
    assert deleted.metadata.name == "p1"
    assert deleted.metadata.labels == {"last": "state"}
    assert not await _exists(http, f"{_pods(ns)}/p1")


async def test_terminal_pod_is_deleted_at_once(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=30))
    resp = await http.request(
        "PATCH",
        f"{_pods(ns)}/p1/status",
        json_body={"status": {"phase": "Succeeded"}},
        content_type=MERGE_PATCH,
    )
    assert resp.status == 200
    assert (await http.request("DELETE", f"{_pods(ns)}/p1")).status == 200
    assert not await _exists(http, f"{_pods(ns)}/p1")


async def test_second_delete_with_shorter_grace_moves_deadline_earlier(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=300))
    first = (await http.request("DELETE", f"{_pods(ns)}/p1")).json()
    second = (
        await http.request("DELETE", f"{_pods(ns)}/p1", params={"gracePeriodSeconds": "10"})
    ).json()
    assert second["metadata"]["deletionGracePeriodSeconds"] == 10
    assert _ts(second["metadata"]["deletionTimestamp"]) < _ts(
        first["metadata"]["deletionTimestamp"]
    )
    longer = await http.request("DELETE", f"{_pods(ns)}/p1", params={"gracePeriodSeconds": "60"})
    assert longer.status == 200
    assert longer.json()["metadata"]["deletionGracePeriodSeconds"] == 10
    assert longer.json()["metadata"]["resourceVersion"] == second["metadata"]["resourceVersion"]
    final = await http.request("DELETE", f"{_pods(ns)}/p1", params={"gracePeriodSeconds": "0"})
    assert final.status == 200
    assert not await _exists(http, f"{_pods(ns)}/p1")


async def test_negative_grace_is_treated_as_one_second(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns, node_name="node-x", grace=30))
    resp = await http.request("DELETE", f"{_pods(ns)}/p1", params={"gracePeriodSeconds": "-5"})
    assert resp.status == 200
    assert resp.json()["metadata"]["deletionGracePeriodSeconds"] == 1


# --- finalizers -------------------------------------------------------------------------------


async def test_grace_zero_delete_with_finalizer_keeps_pod_until_released(
    client: Client, http: Http, ns: str
) -> None:
    await _post(
        http,
        _pods(ns),
        pod("p1", ns, node_name="node-x", grace=30, finalizers=["example.com/hold"]),
    )
    assert (await client.delete("pods", "p1", ns, grace_period=0)).ok
    held = (await http.request("GET", f"{_pods(ns)}/p1")).json()
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"]["deletionGracePeriodSeconds"] == 0
    released = await client.patch(
        "pods", "p1", ns, {"metadata": {"finalizers": None}}, patch_type="merge"
    )
    assert released.ok, released.message
    assert not await _exists(http, f"{_pods(ns)}/p1")


async def test_cr_with_finalizer_stays_until_released(http: Http, ns: str) -> None:
    path = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    body = appwrapper("a1", ns)
    body["metadata"]["finalizers"] = ["example.com/hold"]
    await _post(http, path, body)
    resp = await http.request("DELETE", f"{path}/a1")
    assert resp.status == 200
    assert resp.json()["metadata"]["deletionTimestamp"]  # the updated object, not a Status
    assert await _exists(http, f"{path}/a1")
    patched = await http.request(
        "PATCH",
        f"{path}/a1",
        json_body={"metadata": {"finalizers": None}},
        content_type=MERGE_PATCH,
    )
    assert patched.status == 200
    assert not await _exists(http, f"{path}/a1")


async def test_explicit_orphan_dependents_false_pending_is_202(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    await _post(http, path, configmap("c1", ns, finalizers=["example.com/hold"]))
    resp = await http.request("DELETE", f"{path}/c1", params={"orphanDependents": "false"})
    assert resp.status == 202
    assert resp.json()["metadata"]["deletionTimestamp"]


# --- propagation policies ---------------------------------------------------------------------


async def test_foreground_policy_adds_foreground_deletion_finalizer(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    await _post(http, path, configmap("c1", ns, finalizers=["example.com/hold"]))
    resp = await http.request("DELETE", f"{path}/c1", json_body={"propagationPolicy": "Foreground"})
    assert resp.status == 200
    meta = resp.json()["metadata"]
    assert "foregroundDeletion" in meta["finalizers"]
    assert meta["deletionTimestamp"]


async def test_orphan_policy_adds_orphan_finalizer(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    await _post(http, path, configmap("c1", ns, finalizers=["example.com/hold"]))
    resp = await http.request("DELETE", f"{path}/c1", params={"propagationPolicy": "Orphan"})
    assert resp.status == 200
    assert "orphan" in resp.json()["metadata"]["finalizers"]


async def test_job_delete_defaults_to_orphan(http: Http, ns: str) -> None:
    await _post(http, f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns))
    resp = await http.request("DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/j1")
    assert resp.status == 200
    body = resp.json()
    assert body["kind"] == "Job"  # pending: the updated object
    assert "orphan" in body["metadata"]["finalizers"]
    assert body["metadata"]["deletionTimestamp"]


async def test_job_delete_background_returns_success_status(http: Http, ns: str) -> None:
    created = await _post(http, f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns))
    resp = await http.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{ns}/jobs/j1",
        params={"propagationPolicy": "Background"},
    )
    assert resp.status == 200
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": "j1",
            "group": "batch",
            "kind": "jobs",
            "uid": created["metadata"]["uid"],
        },
    }
    assert not await _exists(http, f"/apis/batch/v1/namespaces/{ns}/jobs/j1")


async def test_typed_job_delete_deserialises_v1status(
    batch: k8s.BatchV1Api, http: Http, ns: str
) -> None:
    await _post(http, f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns))
    result = await batch.delete_namespaced_job("j1", ns, propagation_policy="Foreground")
    assert isinstance(result, k8s.V1Status)


async def test_cr_delete_returns_success_status_with_group(
    custom: k8s.CustomObjectsApi, http: Http, ns: str
) -> None:
    created = await _post(
        http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns)
    )
    result = await custom.delete_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, "a1")
    assert result == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Success",
        "details": {
            "name": "a1",
            "group": AW_GROUP,
            "kind": AW_PLURAL,
            "uid": created["metadata"]["uid"],
        },
    }


async def test_delete_missing_is_404(client: Client, ns: str) -> None:
    outcome = await client.delete("pods", "x", ns)
    outcome.expect_failure(code=404, reason="NotFound", message='pods "x" not found')


async def test_delete_missing_exact_status(http: Http, ns: str) -> None:
    resp = await http.request("DELETE", f"{_pods(ns)}/x")
    assert resp.status == 404
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "x" not found',
        "reason": "NotFound",
        "details": {"name": "x", "kind": "pods"},
        "code": 404,
    }


async def test_job_orphan_dependents_query_adds_orphan_finalizer(http: Http, ns: str) -> None:
    await _post(http, f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns))
    resp = await http.request(
        "DELETE", f"/apis/batch/v1/namespaces/{ns}/jobs/j1", params={"orphanDependents": "true"}
    )
    assert resp.status == 200
    assert "orphan" in resp.json()["metadata"]["finalizers"]


async def test_job_foreground_delete_is_pending_with_finalizer(http: Http, ns: str) -> None:
    await _post(http, f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns))
    resp = await http.request(
        "DELETE",
        f"/apis/batch/v1/namespaces/{ns}/jobs/j1",
        json_body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Foreground"},
    )
    assert resp.status == 200
    body = resp.json()
    assert body["kind"] == "Job"
    assert "foregroundDeletion" in body["metadata"]["finalizers"]


async def test_dry_run_delete_keeps_the_object(http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    resp = await http.request("DELETE", f"{_pods(ns)}/p1", params={"dryRun": "All"})
    assert resp.status == 200
    assert await _exists(http, f"{_pods(ns)}/p1")


async def test_typed_orphan_dependents_true_is_parsed_leniently(
    batch: k8s.BatchV1Api, http: Http, ns: str
) -> None:
    """kubernetes_asyncio sends `orphanDependents=True` (capitalised, §4.2)."""
    await _post(http, f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns))
    await batch.delete_namespaced_job("j1", ns, orphan_dependents=True)
    held = (await http.request("GET", f"/apis/batch/v1/namespaces/{ns}/jobs/j1")).json()
    assert "orphan" in held["metadata"]["finalizers"]


async def test_typed_orphan_dependents_false_deletes_job_at_once(
    batch: k8s.BatchV1Api, http: Http, ns: str
) -> None:
    await _post(http, f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns))
    result = await batch.delete_namespaced_job("j1", ns, orphan_dependents=False)
    assert isinstance(result, k8s.V1Status)
    assert result.status == "Success"
    assert not await _exists(http, f"/apis/batch/v1/namespaces/{ns}/jobs/j1")


async def test_typed_dry_run_delete(core: k8s.CoreV1Api, http: Http, ns: str) -> None:
    await _post(http, _pods(ns), pod("p1", ns))
    await core.delete_namespaced_pod("p1", ns, dry_run="All")
    assert await _exists(http, f"{_pods(ns)}/p1")


async def test_graceful_then_force_then_release_finalizer_chain(http: Http, ns: str) -> None:
    """§2.8 item 3 + §2.6: a Terminating pod with a finalizer, force-deleted (grace → 0), goes away
    on the update that removes its last finalizer."""
    path = f"{_pods(ns)}/p1"
    await _post(
        http, _pods(ns), pod("p1", ns, node_name="node-x", grace=30, finalizers=["example.com/h"])
    )
    graceful = (await http.request("DELETE", path)).json()
    assert graceful["metadata"]["deletionGracePeriodSeconds"] == 30
    forced = await http.request("DELETE", path, params={"gracePeriodSeconds": "0"})
    assert forced.status == 200
    assert forced.json()["metadata"]["deletionGracePeriodSeconds"] == 0
    assert _ts(forced.json()["metadata"]["deletionTimestamp"]) <= _ts(
        graceful["metadata"]["deletionTimestamp"]
    )
    assert await _exists(http, path), "the finalizer must hold the pod"
    released = await http.request(
        "PATCH",
        path,
        json_body=[{"op": "remove", "path": "/metadata/finalizers"}],
        content_type="application/json-patch+json",
    )
    assert released.status == 200
    assert not await _exists(http, path)
