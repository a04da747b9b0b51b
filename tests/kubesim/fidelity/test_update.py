"""Reference §2.6: UPDATE (PUT) — optimistic concurrency, CR updates need a resourceVersion,
status subresource separation, generation rules, pod spec immutability, and the update that
removes the last finalizer from an object being deleted."""

from __future__ import annotations

import copy
import json

from fidelity_support import (
    AW_API_VERSION,
    AW_GROUP,
    AW_PLURAL,
    AW_VERSION,
    Http,
    JsonObj,
    Kubectl,
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


async def _put(http: Http, path: str, body: JsonObj) -> tuple[int, JsonObj]:
    resp = await http.request("PUT", path, json_body=body)
    out: JsonObj = resp.json()
    return resp.status, out


def _aw_path(ns: str, name: str = "") -> str:
    base = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    return f"{base}/{name}" if name else base


async def test_put_with_stale_rv_is_409_conflict_exact_message(http: Http, ns: str) -> None:
    created = await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("x", ns))
    path = f"/api/v1/namespaces/{ns}/pods/x"
    fresh = copy.deepcopy(created)
    fresh["metadata"]["labels"] = {"v": "1"}
    code, _ = await _put(http, path, fresh)
    assert code == 200
    stale = copy.deepcopy(created)
    stale["metadata"]["labels"] = {"v": "2"}
    code, status = await _put(http, path, stale)
    assert code == 409
    assert status["reason"] == "Conflict"
    assert status["message"] == (
        'Operation cannot be fulfilled on pods "x": the object has been modified; '
        "please apply your changes to the latest version and try again"
    )
    assert status["details"]["name"] == "x" and status["details"]["kind"] == "pods"


async def test_typed_replace_with_stale_rv_raises_409(core: k8s.CoreV1Api, ns: str) -> None:
    created = await core.create_namespaced_config_map(
        ns, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="c1"), data={"k": "1"})
    )
    created.data = {"k": "2"}
    await core.replace_namespaced_config_map("c1", ns, created)
    created.data = {"k": "3"}
    try:
        await core.replace_namespaced_config_map("c1", ns, created)
    except ApiException as exc:
        outcome = status_from_exception(exc)
    else:
        raise AssertionError("stale replace succeeded")
    outcome.expect_failure(
        code=409, reason="Conflict", message='configmaps "c1": the object has been modified'
    )


async def test_cr_put_with_stale_rv_names_group_resource(http: Http, ns: str) -> None:
    created = await _post(http, _aw_path(ns), appwrapper("x", ns))
    first = copy.deepcopy(created)
    first["spec"]["priority"] = 6
    assert (await _put(http, _aw_path(ns, "x"), first))[0] == 200
    created["spec"]["priority"] = 7
    code, status = await _put(http, _aw_path(ns, "x"), created)
    assert code == 409
    assert status["message"].startswith(
        'Operation cannot be fulfilled on appwrappers.workload.codeflare.dev "x": '
        "the object has been modified"
    )


async def test_builtin_put_without_rv_is_unconditional(http: Http, ns: str) -> None:
    created = await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("x", ns))
    body = copy.deepcopy(created)
    del body["metadata"]["resourceVersion"]
    body["metadata"]["labels"] = {"forced": "yes"}
    code, updated = await _put(http, f"/api/v1/namespaces/{ns}/pods/x", body)
    assert code == 200, updated
    assert updated["metadata"]["labels"] == {"forced": "yes"}
    assert int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])


async def test_cr_put_without_rv_is_422(custom: k8s.CustomObjectsApi, http: Http, ns: str) -> None:
    created = await _post(http, _aw_path(ns), appwrapper("x", ns))
    del created["metadata"]["resourceVersion"]
    created["spec"]["priority"] = 9
    try:
        await custom.replace_namespaced_custom_object(
            AW_GROUP, AW_VERSION, ns, AW_PLURAL, "x", created
        )
    except ApiException as exc:
        outcome = status_from_exception(exc)
    else:
        raise AssertionError("CR update without resourceVersion succeeded")
    outcome.expect_failure(code=422, reason="Invalid", message="metadata.resourceVersion")
    assert "must be specified for an update" in outcome.message


async def test_kubectl_replace_cr_uses_current_rv(kubectl: Kubectl, http: Http, ns: str) -> None:
    created = await _post(http, _aw_path(ns), appwrapper("x", ns))
    created["spec"]["priority"] = 11
    replaced = json.loads(kubectl.ok("replace", "-f", "-", "-o", "json", stdin=json.dumps(created)))
    assert replaced["spec"]["priority"] == 11


# --- status subresource and generation --------------------------------------------------------


async def test_main_endpoint_ignores_status_changes_for_cr(http: Http, ns: str) -> None:
    await _post(http, _aw_path(ns), appwrapper("x", ns))
    code, current = await _put(
        http,
        f"{_aw_path(ns, 'x')}/status",
        (await http.request("GET", _aw_path(ns, "x"))).json() | {"status": {"state": "Pending"}},
    )
    assert code == 200, current
    body = copy.deepcopy(current)
    body["status"] = {"state": "Running"}
    body["spec"]["priority"] = 42
    code, updated = await _put(http, _aw_path(ns, "x"), body)
    assert code == 200
    assert updated["status"] == {"state": "Pending"}
    assert updated["spec"]["priority"] == 42
    assert updated["metadata"]["generation"] == current["metadata"]["generation"] + 1


async def test_status_endpoint_ignores_spec_and_keeps_generation(http: Http, ns: str) -> None:
    created = await _post(http, _aw_path(ns), appwrapper("x", ns))
    body = copy.deepcopy(created)
    body["spec"]["priority"] = 99
    body["metadata"]["labels"] = {"changed": "by-status"}
    body["status"] = {"state": "Running", "running": 2}
    code, updated = await _put(http, f"{_aw_path(ns, 'x')}/status", body)
    assert code == 200, updated
    assert updated["status"] == {"state": "Running", "running": 2}
    assert updated["spec"]["priority"] == created["spec"]["priority"]
    assert updated["metadata"].get("labels") == created["metadata"].get("labels")
    assert updated["metadata"]["generation"] == created["metadata"]["generation"]


async def test_cr_metadata_change_does_not_bump_generation(http: Http, ns: str) -> None:
    created = await _post(http, _aw_path(ns), appwrapper("x", ns))
    body = copy.deepcopy(created)
    body["metadata"]["labels"] = {"a": "b"}
    code, updated = await _put(http, _aw_path(ns, "x"), body)
    assert code == 200
    assert updated["metadata"]["generation"] == 1


async def test_pod_status_put_on_main_endpoint_is_ignored(http: Http, ns: str) -> None:
    created = await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("x", ns))
    body = copy.deepcopy(created)
    body["status"] = {"phase": "Running"}
    code, updated = await _put(http, f"/api/v1/namespaces/{ns}/pods/x", body)
    assert code == 200
    assert updated["status"]["phase"] == "Pending"
    code, updated = await _put(
        http, f"/api/v1/namespaces/{ns}/pods/x/status", updated | {"status": {"phase": "Running"}}
    )
    assert code == 200, updated
    assert updated["status"]["phase"] == "Running"


async def test_job_generation_bumps_on_spec_change_only(http: Http, ns: str) -> None:
    created = await _post(http, f"/apis/batch/v1/namespaces/{ns}/jobs", job("j1", ns))
    path = f"/apis/batch/v1/namespaces/{ns}/jobs/j1"
    body = copy.deepcopy(created)
    body["metadata"]["labels"] = {"x": "y"}
    code, labelled = await _put(http, path, body)
    assert code == 200 and labelled["metadata"]["generation"] == 1
    labelled["spec"]["parallelism"] = 3
    code, scaled = await _put(http, path, labelled)
    assert code == 200 and scaled["metadata"]["generation"] == 2
    scaled["status"] = {"active": 1}
    code, status_written = await _put(http, f"{path}/status", scaled)
    assert code == 200 and status_written["metadata"]["generation"] == 2


async def test_pod_node_name_cannot_change_once_set(http: Http, ns: str) -> None:
    created = await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("x", ns, node_name="node-a"))
    created["spec"]["nodeName"] = "node-b"
    code, status = await _put(http, f"/api/v1/namespaces/{ns}/pods/x", created)
    assert code == 422
    assert status["reason"] == "Invalid"
    assert status["message"].startswith('Pod "x" is invalid')


async def test_pod_containers_cannot_be_added(http: Http, ns: str) -> None:
    created = await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("x", ns))
    created["spec"]["containers"].append({"name": "extra", "image": "busybox"})
    code, status = await _put(http, f"/api/v1/namespaces/{ns}/pods/x", created)
    assert code == 422
    assert status["reason"] == "Invalid"


# --- finalizer removal ------------------------------------------------------------------------


async def test_update_removing_last_finalizer_deletes_object_with_grace_zero(
    http: Http, ns: str
) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    await _post(http, path, configmap("c1", ns, finalizers=["example.com/hold"]))
    deleting = await http.request("DELETE", f"{path}/c1")
    assert deleting.status == 200
    held = deleting.json()
    assert held["metadata"]["deletionTimestamp"]
    assert held["metadata"].get("deletionGracePeriodSeconds", 0) == 0
    held["metadata"]["finalizers"] = []
    code, final = await _put(http, f"{path}/c1", held)
    assert code == 200, final
    assert final["metadata"]["name"] == "c1"
    assert (await http.request("GET", f"{path}/c1")).status == 404


async def test_removing_finalizers_while_pod_grace_pending_keeps_it(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/pods"
    await _post(
        http, path, pod("p1", ns, node_name="node-x", grace=30, finalizers=["example.com/hold"])
    )
    deleting = await http.request("DELETE", f"{path}/p1")
    assert deleting.status == 200
    held = deleting.json()
    assert held["metadata"]["deletionGracePeriodSeconds"] == 30
    held["metadata"]["finalizers"] = []
    code, updated = await _put(http, f"{path}/p1", held)
    assert code == 200, updated
    still = await http.request("GET", f"{path}/p1")
    assert still.status == 200, "a pod still waiting for its kubelet must not be removed"
    assert not still.json()["metadata"].get("finalizers")


async def test_removal_by_update_is_seen_as_deleted_event(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    await _post(http, path, configmap("c1", ns, finalizers=["example.com/hold"]))
    held = (await http.request("DELETE", f"{path}/c1")).json()

    async def release() -> None:
        held["metadata"]["finalizers"] = []
        assert (await _put(http, f"{path}/c1", held))[0] == 200

    result = await http.watch(
        path,
        {"watch": "true", "resourceVersion": held["metadata"]["resourceVersion"]},
        until=lambda e: e["type"] == "DELETED",
        after_open=release,
        timeout=3.0,
    )
    assert result.events[-1]["type"] == "DELETED"
    assert result.events[-1]["object"]["metadata"]["name"] == "c1"


# --- nodes and namespaces (§2.11) ----------------------------------------------------------------


async def test_node_status_subresource_separation(http: Http, ns: str) -> None:
    name = f"{ns}-n"[:63]
    created = await _post(
        http,
        "/api/v1/nodes",
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}, "spec": {}},
    )
    ready = {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok"}
    body = copy.deepcopy(created) | {"status": {"conditions": [ready]}}
    body["spec"] = {"unschedulable": True}
    code, updated = await _put(http, f"/api/v1/nodes/{name}/status", body)
    assert code == 200, updated
    assert updated["status"]["conditions"][0]["type"] == "Ready"
    assert not updated["spec"].get("unschedulable"), "/status must not change spec"
    updated["status"] = {"conditions": []}
    updated["spec"] = {"unschedulable": True}
    code, main = await _put(http, f"/api/v1/nodes/{name}", updated)
    assert code == 200, main
    assert main["spec"]["unschedulable"] is True
    assert main["status"]["conditions"][0]["type"] == "Ready", "main endpoint must keep status"


async def test_namespace_delete_terminates_then_finalize_removes(http: Http, ns: str) -> None:
    resp = await http.request("DELETE", f"/api/v1/namespaces/{ns}")
    assert resp.status in (200, 202)
    current = (await http.request("GET", f"/api/v1/namespaces/{ns}")).json()
    assert current["status"]["phase"] == "Terminating"
    assert current["spec"]["finalizers"] == ["kubernetes"]
    current["spec"]["finalizers"] = []
    code, _ = await _put(http, f"/api/v1/namespaces/{ns}/finalize", current)
    assert code == 200
    assert (await http.request("GET", f"/api/v1/namespaces/{ns}")).status == 404


async def test_no_op_update_does_not_write(http: Http, ns: str) -> None:
    """Beyond the reference, but real: an update that changes nothing is not a write (no new
    resourceVersion, no watch event), which keeps controllers from waking themselves up."""
    created = await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns))
    code, same = await _put(http, f"/api/v1/namespaces/{ns}/configmaps/c1", created)
    assert code == 200
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
