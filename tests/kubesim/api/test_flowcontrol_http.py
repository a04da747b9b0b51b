"""429 Too Many Requests over HTTP: what a client sees, what the request log and the admin
API say, and fault injection of 429 with Retry-After.

The real rejection (apiserver pkg/server/filters/maxinflight.go `tooManyRequests`, also used
by API Priority and Fairness) is HTTP 429 with `Retry-After` and a plain-text body; a Status
with `details.retryAfterSeconds` gets the same header (responsewriters.ErrorNegotiated).
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

from kubesim.apiserver import ApiServer
from kubesim.flowcontrol import FlowControlConfig


async def _state(http: aiohttp.ClientSession) -> dict[str, Any]:
    data: dict[str, Any] = await (await http.get("/kubesim/v1/flowcontrol")).json()
    return data


@pytest.mark.parametrize(
    "apiserver_options",
    [{"flow_control": FlowControlConfig(rate_limit=0.2, rate_burst=2)}],
    indirect=True,
)
async def test_rate_limit_answers_plain_text_429_with_retry_after_and_logs_it(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    # The namespace fixture used the first token; one more, then the bucket is empty.
    await core_api.list_namespaced_config_map(ns)
    with pytest.raises(ApiException) as caught:
        await core_api.list_namespaced_config_map(ns)
    assert caught.value.status == 429
    assert caught.value.headers["Retry-After"] == "5"  # 1 token / (0.2 per s)
    resp = await http.get(f"/api/v1/namespaces/{ns}/configmaps")
    assert resp.status == 429
    assert resp.headers["Content-Type"].startswith("text/plain")
    assert await resp.text() == "Too many requests, please try again later.\n"
    log = await (await http.get("/kubesim/v1/requests")).json()
    rejected = [r for r in log["items"] if r["code"] == 429]
    assert len(rejected) == 2 and all(r["verb"] == "list" for r in rejected)
    state = await _state(http)
    assert state["rejected"]["total"] == 2 and state["rejected"]["byReason"] == {"rate": 2}


@pytest.mark.parametrize(
    "apiserver_options",
    [{"flow_control": FlowControlConfig(max_requests_inflight=1)}],
    indirect=True,
)
async def test_in_flight_limit_counts_slow_requests_but_not_open_watches(
    http: aiohttp.ClientSession, apiserver: ApiServer, ns: str
) -> None:
    watch = await http.get(f"/api/v1/namespaces/{ns}/pods?watch=1&timeoutSeconds=5")
    assert watch.status == 200  # a watch is open for the whole test and never counted
    await http.post("/kubesim/v1/fail", json={"path": "/configmaps$", "latency": 0.5, "count": 1})
    slow = asyncio.ensure_future(http.get(f"/api/v1/namespaces/{ns}/configmaps"))
    await asyncio.sleep(0.2)
    second = await http.get(f"/api/v1/namespaces/{ns}/secrets")
    assert second.status == 429 and second.headers["Retry-After"] == "1"
    assert (await slow).status == 200
    assert (await http.get(f"/api/v1/namespaces/{ns}/secrets")).status == 200
    state = await _state(http)
    assert state["peakInflight"]["readOnly"] == 1 and state["inflight"]["readOnly"] == 0
    watch.close()


async def test_limits_are_set_read_and_cleared_at_run_time(
    http: aiohttp.ClientSession, ns: str
) -> None:
    assert (await _state(http))["rateLimit"] == 0
    resp = await http.post("/kubesim/v1/flowcontrol", json={"rateLimit": 1, "rateBurst": 1})
    assert resp.status == 200 and (await resp.json())["rateBurst"] == 1
    assert (await http.get(f"/api/v1/namespaces/{ns}/pods")).status == 200
    assert (await http.get(f"/api/v1/namespaces/{ns}/pods")).status == 429
    # kubesim's own controllers play the control plane and are never limited.
    own = await http.get(f"/api/v1/namespaces/{ns}/pods", headers={"User-Agent": "kubesim-x"})
    assert own.status == 200
    bad = await http.post("/kubesim/v1/flowcontrol", json={"rateLimit": -3})
    assert bad.status == 400 and "rate limit" in (await bad.json())["message"]
    cleared = await (await http.delete("/kubesim/v1/flowcontrol")).json()
    assert cleared["rateLimit"] == 0 and cleared["rejected"]["total"] == 1
    assert (await http.get(f"/api/v1/namespaces/{ns}/pods")).status == 200
    reset = await http.post("/kubesim/v1/flowcontrol", json={"resetCounters": True})
    assert (await reset.json())["rejected"]["total"] == 0


async def test_injected_429_carries_retry_after_in_header_and_status_details(
    http: aiohttp.ClientSession, core_api: k8s.CoreV1Api, ns: str
) -> None:
    rule = {"path": "/pods$", "code": 429, "count": 1, "retryAfter": 7}
    assert (await http.post("/kubesim/v1/fail", json=rule)).status == 200
    with pytest.raises(ApiException) as caught:
        await core_api.list_namespaced_pod(ns)
    assert caught.value.status == 429 and caught.value.headers["Retry-After"] == "7"
    body = caught.value.body
    assert '"reason":"TooManyRequests"' in body and '"retryAfterSeconds":7' in body
    bad = await http.post("/kubesim/v1/fail", json={"code": 429, "retryAfter": 0})
    assert bad.status == 400


@pytest.mark.parametrize(
    "apiserver_options",
    [{"flow_control": FlowControlConfig(rate_limit=0.2, rate_burst=2)}],
    indirect=True,
)
async def test_request_log_names_retry_after_and_tells_a_retry_from_another_request(
    http: aiohttp.ClientSession, ns: str
) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    bodies = [{"metadata": {"name": n}, "data": {}} for n in ("a", "b")]
    answers = [
        await http.post(path, json=bodies[0], headers={"X-Request-Id": "r1"}) for _ in range(2)
    ]
    answers.append(await http.post(path, json=bodies[1]))
    assert [a.status for a in answers][1:] == [429, 429]
    log = [r for r in (await (await http.get("/kubesim/v1/requests")).json())["items"]
           if r["path"] == path and r["method"] == "POST"]  # fmt: skip
    assert [r["retryAfter"] for r in log] == [0, 5, 5]
    # The same create sent again has the same digest; a create of another object does not.
    assert log[0]["digest"] == log[1]["digest"] != log[2]["digest"]
    assert [r["requestId"] for r in log] == ["r1", "r1", ""]
