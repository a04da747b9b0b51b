"""The periodic relist never ends an AppWrapper that was created while its LISTs were in flight.

Found by the fuzz test under ``make test`` load: the relist LISTs AppWrappers, then pods, then
nodes; an AppWrapper created just after the first LIST reached the cache by its watch event,
and the relist then took its absence from the (older) LIST for a deletion — "appwrapper gone;
removing its objects" for a live AppWrapper, its items deleted, its dispatch delayed to the next
resync. Against kubesim: the creation is made to land, with its event applied, exactly while the
pod LIST is in flight; an AppWrapper really deleted before the LIST still goes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
from opentelemetry import trace
from prometheus_client import CollectorRegistry
from tests.support.dispatcher_env import job_appwrapper

from clearance.kube import PODS, Kube, KubeConfig, ListResult, Resource
from clearance_dispatcher.intake import Intake
from clearance_dispatcher.metrics import DispatcherMetrics
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.settings import DispatcherSettings
from kubesim.cluster import Cluster, ClusterConfig

REPO = Path(__file__).resolve().parents[2]
CRD = REPO / "deploy/crd/appwrapper-crd.yaml"
NS = "default"


class CreatingDuringPodList(Kube):
    """The real client; while its pod LIST is in flight, one AppWrapper is created and its
    event handed to the intake (what the watcher's event does when it wins the race)."""

    intake: Intake | None = None
    create_during_pod_list: Mapping[str, Any] | None = None

    async def list(self, resource: Resource, **kw: Any) -> ListResult:
        body = self.create_during_pod_list if resource == PODS else None
        if body is not None and self.intake is not None:
            self.create_during_pod_list = None
            assert self.intake.rt.aw_resource is not None
            created = await self.create(self.intake.rt.aw_resource, body, namespace=NS)
            self.intake.on_appwrapper(msgspec.json.decode(created))
        return await super().list(resource, **kw)


@pytest.fixture
async def kube() -> AsyncIterator[CreatingDuringPodList]:
    cluster = Cluster(ClusterConfig(nodes=1, crd_files=(str(CRD),)))
    await cluster.start()
    client = await CreatingDuringPodList.connect(
        KubeConfig(kubeconfig=str(cluster.kubeconfig_path))
    )
    try:
        yield cast(CreatingDuringPodList, client)
    finally:
        await client.close()
        await cluster.stop()


def _intake(kube: CreatingDuringPodList) -> Intake:
    rt = Runtime(
        DispatcherSettings.from_env({}),
        kube=kube,
        js=cast(Any, None),  # nothing is published here
        tracer=trace.get_tracer("test"),
        metrics=DispatcherMetrics(CollectorRegistry()),
    )
    intake = Intake(rt)
    kube.intake = intake
    return intake


async def test_an_appwrapper_created_while_the_relist_is_in_flight_stays_in_the_cache(
    kube: CreatingDuringPodList,
) -> None:
    intake = _intake(kube)
    kube.create_during_pod_list = job_appwrapper("late", NS)
    await intake.relist()
    assert (NS, "late") in intake.rt.state.appwrappers


async def test_an_appwrapper_deleted_before_the_relist_leaves_the_cache(
    kube: CreatingDuringPodList,
) -> None:
    intake = _intake(kube)
    assert intake.rt.aw_resource is not None
    created = await kube.create(intake.rt.aw_resource, job_appwrapper("gone", NS), namespace=NS)
    intake.on_appwrapper(msgspec.json.decode(created))
    await kube.delete(intake.rt.aw_resource, "gone", namespace=NS)
    await intake.relist()
    assert (NS, "gone") not in intake.rt.state.appwrappers
