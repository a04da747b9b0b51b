"""Reads of objects a verification's label LIST did not show (gone, or stripped of their
labels): a GET each for a gang's worth, never a LIST of the whole namespace (issue 16: 4,000
pods, ~4 MB, per verification in a rack loss)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from tracker_builders import tracked

from clearance.kube import PODS, Kube, KubeConfig, Resource
from clearance_tracker.confirmation import Missing, Snapshot
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.reads import ApiReader
from kubesim.cluster import Cluster, ClusterConfig

AGENT = "clearance-tracker/test (unseen reads)"
GANG = 8
"""Pods of a gang whose force deletion removed them all before a verification."""
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    sim = Cluster(ClusterConfig(nodes=1), kubeconfig_path=tmp_path / "kubeconfig")
    await sim.start()
    try:
        yield sim
    finally:
        await sim.stop()


@pytest.fixture
async def kube(cluster: Cluster) -> AsyncIterator[Kube]:
    client = await Kube.connect(
        KubeConfig(kubeconfig=str(cluster.kubeconfig_path), user_agent=AGENT)
    )
    try:
        yield client
    finally:
        await client.close()


def bare_pod(name: str, namespace: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
    }


async def test_a_gang_of_unseen_pods_is_read_with_a_get_each_not_a_namespace_list(
    cluster: Cluster, kube: Kube
) -> None:
    await kube.create(
        NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    )
    relabelled = await kube.create(PODS, bare_pod("gang-0", "team-a"), namespace="team-a")
    for n in range(10):
        await kube.create(PODS, bare_pod(f"other-{n}", "team-a"), namespace="team-a")
    uid = json.loads(relabelled)["metadata"]["uid"]
    objs = [tracked("gang-0", uid)] + [tracked(f"gang-{n}", f"gone-{n}") for n in range(1, GANG)]
    first = cluster.server.requests.next_id()
    reader = ApiReader(kube, metrics=TrackerMetrics(CollectorRegistry()))
    answers = dict(await reader.get_each(objs))
    assert isinstance(answers[uid], Snapshot) and answers[uid].metadata.uid == uid
    assert all(isinstance(answers[f"gone-{n}"], Missing) for n in range(1, GANG))
    sent = [r for r in cluster.server.requests.since(first) if r.user_agent == AGENT]
    pod_reads = [r.path for r in sent if "/pods" in r.path and r.method == "GET"]
    assert "/api/v1/namespaces/team-a/pods" not in pod_reads  # no LIST of the namespace
    assert sorted(p.rsplit("/", 1)[-1] for p in pod_reads) == sorted(o.name for o in objs)
