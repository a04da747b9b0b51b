"""Reference §2.1 (paths, codes, content type) and §2.10 (the Status object and its catalogue),
including the fault-injection codes 429/500/503/504 (DESIGN §9 `/kubesim/v1/fail`)."""

from __future__ import annotations

import time

import pytest
from fidelity_support import (
    REASON_CODES,
    Http,
    JsonObj,
    RawResponse,
    ServerHandle,
    configmap,
)

STATUS_KEYS = {"kind", "apiVersion", "metadata", "status", "message", "reason", "details", "code"}


def _assert_failure_status(resp: RawResponse, code: int, reason: str) -> JsonObj:
    assert resp.status == code, resp.body
    assert resp.headers["Content-Type"].startswith("application/json")
    status: JsonObj = resp.json()
    assert set(status) <= STATUS_KEYS, set(status) - STATUS_KEYS
    assert status["kind"] == "Status"
    assert status["apiVersion"] == "v1"
    assert status["metadata"] == {}
    assert status["status"] == "Failure"
    assert status["code"] == code
    assert status["reason"] == reason
    assert isinstance(status["message"], str) and status["message"]
    return status


async def test_create_returns_201_and_list_put_patch_return_200(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    created = await http.request("POST", path, json_body=configmap("c1", ns))
    assert created.status == 201
    assert (await http.request("GET", path)).status == 200
    assert (await http.request("PUT", f"{path}/c1", json_body=created.json())).status == 200
    patched = await http.request(
        "PATCH",
        f"{path}/c1",
        json_body={"data": {"a": "b"}},
        content_type="application/merge-patch+json",
    )
    assert patched.status == 200


async def test_unknown_resource_is_404_not_found(http: Http, ns: str) -> None:
    resp = await http.request("GET", f"/api/v1/namespaces/{ns}/widgets")
    _assert_failure_status(resp, 404, "NotFound")


async def test_unknown_group_is_404_not_found(http: Http) -> None:
    resp = await http.request("GET", "/apis/nothing.example.com/v1/things")
    _assert_failure_status(resp, 404, "NotFound")


async def test_unsupported_verb_is_405(http: Http, ns: str) -> None:
    resp = await http.request(
        "POST", f"/api/v1/namespaces/{ns}/configmaps/c1", json_body=configmap("c1", ns)
    )
    _assert_failure_status(resp, 405, "MethodNotAllowed")


async def test_not_found_status_details(http: Http, ns: str) -> None:
    status = _assert_failure_status(
        await http.request("GET", f"/api/v1/namespaces/{ns}/configmaps/x"), 404, "NotFound"
    )
    assert status["details"] == {"name": "x", "kind": "configmaps"}


async def test_bad_request_for_malformed_json_body(http: Http, ns: str) -> None:
    resp = await http.request(
        "POST",
        f"/api/v1/namespaces/{ns}/configmaps",
        data=b"{not json",
        content_type="application/json",
    )
    _assert_failure_status(resp, 400, "BadRequest")


async def test_invalid_status_has_causes_with_reason_message_field(http: Http, ns: str) -> None:
    body = configmap("Not_Valid", ns)
    status = _assert_failure_status(
        await http.request("POST", f"/api/v1/namespaces/{ns}/configmaps", json_body=body),
        422,
        "Invalid",
    )
    for cause in status["details"]["causes"]:
        assert {"reason", "message", "field"} <= set(cause)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (429, "TooManyRequests"),
        (500, "InternalError"),
        (503, "ServiceUnavailable"),
        (504, "Timeout"),
    ],
)
async def test_injected_fault_is_a_status_and_honours_count(
    http: Http, server: ServerHandle, ns: str, code: int, reason: str
) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    server.fail(path, code, count=1)
    _assert_failure_status(await http.request("GET", path), code, reason)
    assert REASON_CODES[reason] == code
    assert (await http.request("GET", path)).status == 200, "count=1 must fail exactly once"


async def test_injected_latency_delays_the_answer(
    http: Http, server: ServerHandle, ns: str
) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    server.fail(path, 503, count=1, latency=0.5)
    started = time.monotonic()
    resp = await http.request("GET", path)
    assert time.monotonic() - started >= 0.45
    assert resp.status == 503


async def test_custom_resource_not_found_exact_status(http: Http, ns: str) -> None:
    resp = await http.request(
        "GET", f"/apis/workload.codeflare.dev/v1beta1/namespaces/{ns}/appwrappers/x"
    )
    assert resp.status == 404
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'appwrappers.workload.codeflare.dev "x" not found',
        "reason": "NotFound",
        "details": {"name": "x", "group": "workload.codeflare.dev", "kind": "appwrappers"},
        "code": 404,
    }


async def test_missing_namespace_exact_status(http: Http) -> None:
    resp = await http.request(
        "POST", "/api/v1/namespaces/absent-ns/configmaps", json_body=configmap("c1", None)
    )
    assert resp.status == 404
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'namespaces "absent-ns" not found',
        "reason": "NotFound",
        "details": {"name": "absent-ns", "kind": "namespaces"},
        "code": 404,
    }


async def test_conflict_exact_status(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    created = (await http.request("POST", path, json_body=configmap("c1", ns))).json()
    await http.request(
        "PATCH",
        f"{path}/c1",
        json_body={"data": {"a": "1"}},
        content_type="application/merge-patch+json",
    )
    resp = await http.request("PUT", f"{path}/c1", json_body=created | {"data": {"a": "2"}})
    assert resp.status == 409
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'Operation cannot be fulfilled on configmaps "c1": the object has been '
        "modified; please apply your changes to the latest version and try again",
        "reason": "Conflict",
        "details": {"name": "c1", "kind": "configmaps"},
        "code": 409,
    }


async def test_yaml_request_body_is_accepted(http: Http, ns: str) -> None:
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: y1\ndata:\n  a: b\n"
    resp = await http.request(
        "POST", f"/api/v1/namespaces/{ns}/configmaps", data=body, content_type="application/yaml"
    )
    assert resp.status == 201
    assert resp.json()["data"] == {"a": "b"}


async def test_malformed_delete_options_are_400(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    await http.request("POST", path, json_body=configmap("c1", ns))
    resp = await http.request("DELETE", f"{path}/c1", data=b"{bad", content_type="application/json")
    _assert_failure_status(resp, 400, "BadRequest")
