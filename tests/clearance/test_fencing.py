"""Fencing: a replica whose term ended sends no write (DESIGN §5), judged by kubesim's log."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest

from clearance.fencing import Fenced, Term
from clearance.kube import PODS, FencedWrite, Kube, KubeConfig
from clearance.leadership import LeaderElector
from kubesim.apiserver import ApiServer


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_term_is_valid_from_the_renewal_sent_until_duration_minus_margin() -> None:
    clock = FakeClock()
    term = Term(name="lease x", duration=10.0, margin=1.0, clock=clock)
    term.began(sent_at=100.0)
    clock.now = 108.9
    term.check()
    clock.now = 109.0
    with pytest.raises(Fenced, match="lease x term 1 is not held"):
        term.check()


def test_a_term_never_begun_refuses_every_effect() -> None:
    with pytest.raises(Fenced):
        Term(name="t", duration=5.0).check()


def test_term_number_counts_new_terms_not_renewals() -> None:
    clock = FakeClock()
    term = Term(name="t", duration=10.0, clock=clock)
    term.began(sent_at=100.0)
    term.began(sent_at=105.0)
    assert term.number == 1
    clock.now = 200.0
    term.began(sent_at=200.0)
    assert term.number == 2


@pytest.fixture
async def apiserver() -> AsyncIterator[ApiServer]:
    server = ApiServer()
    await server.start(host="127.0.0.1", port=0)
    try:
        yield server
    finally:
        await server.stop()


@pytest.fixture
async def kube(apiserver: ApiServer, tmp_path: Path) -> AsyncIterator[Kube]:
    path = tmp_path / "kubeconfig"
    apiserver.write_kubeconfig(path)
    client = await Kube.connect(KubeConfig(kubeconfig=str(path), user_agent="fenced-test/1"))
    try:
        yield client
    finally:
        await client.close()


async def requests_of(server: ApiServer, agent: str) -> list[dict[str, object]]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{server.url}/kubesim/v1/requests", params={"userAgent": agent}) as r,
    ):
        return list((await r.json())["items"])


POD = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}


async def test_a_fenced_client_sends_no_write_but_still_reads(
    apiserver: ApiServer, kube: Kube
) -> None:
    kube.fence = Term(name="lease test", duration=5.0)
    with pytest.raises(FencedWrite):
        await kube.create(PODS, POD, namespace="default")
    await kube.list(PODS, namespace="default")
    assert [r["verb"] for r in await requests_of(apiserver, "fenced-test")] == ["list"]


async def test_a_leader_frozen_past_its_lease_cannot_write_when_it_wakes(
    apiserver: ApiServer, kube: Kube
) -> None:
    clock = FakeClock()
    elector = LeaderElector(
        kube,
        namespace="default",
        name="fence-test",
        identity="a",
        lease_duration=30.0,
        retry_period=20.0,
        monotonic=clock,
    )
    kube.fence = elector.term
    task = asyncio.create_task(elector.run())
    try:
        await asyncio.wait_for(elector.is_leader.wait(), 5)
        await kube.create(PODS, POD, namespace="default")
        # A freeze: the monotonic clock runs on past the lease while nothing renews; the
        # process still believes it leads when it wakes.
        clock.now += 31.0
        assert elector.is_leader.is_set()
        with pytest.raises(FencedWrite):
            await kube.delete(PODS, "p", namespace="default")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    writes = [
        r["verb"]
        for r in await requests_of(apiserver, "fenced-test")
        if "/leases" not in str(r["path"])
    ]
    assert writes == ["create"]
