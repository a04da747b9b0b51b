"""API manners of :class:`~clearance.kube.Kube` against kubesim's 429s and 5xx answers.

The client-side rate limit keeps a client under kubesim's own rate limit (API Priority and
Fairness stand-in), a 429 is sent again after its ``Retry-After``, a read answered 5xx is
retried after a jittered backoff and a write is not (it may have been applied). With retries
off, the same 429 reaches the caller: the retry is what the passing tests measure.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from clearance.apimanners import URGENT, TokenBucket, pause_before_retry
from clearance.kube import Kube, KubeConfig, KubeError, Resource
from kubesim.apiserver import ApiServer

CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
AGENT = "clearance-manners-test"
Admin = Callable[..., Any]


@pytest.fixture
async def client(apiserver: ApiServer, tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    opened: list[Kube] = []

    async def make(**manners: Any) -> Kube:
        path = tmp_path / "kubeconfig"
        apiserver.write_kubeconfig(path)
        kube = await Kube.connect(KubeConfig(kubeconfig=str(path), user_agent=AGENT, **manners))
        opened.append(kube)
        return kube

    yield make
    for kube in opened:
        await kube.close()


async def codes(apiserver: ApiServer) -> list[int]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{apiserver.url}/kubesim/v1/requests", params={"userAgent": AGENT}) as r,
    ):
        return [item["code"] for item in (await r.json())["items"]]


def configmap(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}


async def test_a_429_is_sent_again_after_its_retry_after(
    apiserver: ApiServer, admin: Admin, client: Callable[..., Any]
) -> None:
    kube = await client(max_retries=3)
    await admin("POST", "fail", {"path": "configmaps", "code": 429, "count": 1, "retryAfter": 1})
    started = time.monotonic()
    await kube.list(CONFIGMAPS, namespace="default")
    assert time.monotonic() - started >= 1.0
    assert kube.manners is not None and (kube.manners.throttled, kube.manners.retried) == (1, 1)
    assert await codes(apiserver) == [429, 200]


async def test_with_retries_off_the_429_reaches_the_caller(
    admin: Admin, client: Callable[..., Any]
) -> None:
    kube = await client(max_retries=0)
    await admin("POST", "fail", {"path": "configmaps", "code": 429, "count": 1, "retryAfter": 1})
    with pytest.raises(KubeError) as caught:
        await kube.list(CONFIGMAPS, namespace="default")
    assert caught.value.code == 429


async def test_a_5xx_read_is_retried_but_a_5xx_write_is_not(
    admin: Admin, client: Callable[..., Any]
) -> None:
    kube = await client(max_retries=3)
    await admin("POST", "fail", {"path": "configmaps", "code": 503, "count": 1, "method": "GET"})
    await kube.list(CONFIGMAPS, namespace="default")
    await admin("POST", "fail", {"path": "configmaps", "code": 500, "count": 1, "method": "POST"})
    with pytest.raises(KubeError) as caught:
        await kube.create(CONFIGMAPS, configmap("once"), namespace="default")
    assert caught.value.code == 500


async def test_the_client_rate_limit_stays_under_the_servers(
    apiserver: ApiServer, admin: Admin, client: Callable[..., Any]
) -> None:
    # Server: 10 requests/s, burst 4. Client: 8/s, burst 4 (no retries, so a 429 would show).
    await admin("POST", "flowcontrol", {"rateLimit": 10, "rateBurst": 4})
    kube = await client(qps=8.0, burst=4, max_retries=0)
    started = time.monotonic()
    for _ in range(12):
        await kube.list(CONFIGMAPS, namespace="default")
    assert time.monotonic() - started >= (12 - 4) / 8 * 0.9
    assert await codes(apiserver) == [200] * 12


async def test_without_the_client_limit_the_server_answers_429(
    apiserver: ApiServer, admin: Admin, client: Callable[..., Any]
) -> None:
    await admin("POST", "flowcontrol", {"rateLimit": 10, "rateBurst": 4})
    kube = await client(qps=0.0, max_retries=0)
    with pytest.raises(KubeError) as caught:
        for _ in range(12):
            await kube.list(CONFIGMAPS, namespace="default")
    assert caught.value.code == 429


def test_the_bucket_lets_a_burst_through_then_spaces_requests_at_qps() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10.0, burst=3, clock=lambda: now[0])
    assert [bucket.delay() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert [round(bucket.delay(), 3) for _ in range(2)] == [0.1, 0.2]
    now[0] = 10.0  # idle long enough: the bucket is full again, never fuller
    assert [bucket.delay() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert bucket.delay() > 0


def test_retry_pauses_follow_retry_after_and_back_off_reads_only() -> None:
    def pause(status: int, method: str, headers: dict[str, str], retry: int = 1) -> float | None:
        return pause_before_retry(
            status=status, method=method, headers=headers, retry=retry, rand=lambda: 1.0
        )

    assert pause(429, "POST", {"Retry-After": "2"}) == pytest.approx(2.2)
    assert pause(503, "POST", {"Retry-After": "1"}) == pytest.approx(1.1)
    assert pause(429, "GET", {"Retry-After": "9999"}) == pytest.approx(66.0)  # capped at 60 s
    assert pause(500, "GET", {}, retry=3) == pytest.approx(0.4)
    assert pause(500, "GET", {}, retry=20) == pytest.approx(5.0)
    assert pause(500, "POST", {}) is None  # a write may have been applied
    assert pause(404, "GET", {"Retry-After": "1"}) is None


def test_an_urgent_request_passes_the_queue_within_one_more_burst_and_others_pay() -> None:
    now = [0.0]
    bucket = TokenBucket(qps=10.0, burst=3, clock=lambda: now[0])
    assert [bucket.delay() for _ in range(3)] == [0.0, 0.0, 0.0]  # the bucket is empty
    token = URGENT.set(True)
    try:
        for _ in range(3):  # one more burst goes at once, as debt
            asyncio.run(asyncio.wait_for(bucket.take(), timeout=0.05))
        assert bucket.waited == 0.0
    finally:
        URGENT.reset(token)
    assert round(bucket.delay(), 3) == 0.4  # the next ordinary request pays for them
    token = URGENT.set(True)
    try:
        assert round(bucket.delay() - bucket.burst / bucket.qps, 3) == 0.2  # beyond: it waits
    finally:
        URGENT.reset(token)
