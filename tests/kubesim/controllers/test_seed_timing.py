"""Seed scenario timing: eviction comes only after the monitor grace plus the toleration.

Uses the real `kubesim ctl lose-node` CLI as a subprocess.
"""

from __future__ import annotations

import asyncio
import time

from cluster_support import eventually, kubesim_command, pod_manifest
from kubernetes_asyncio import client as k8s

from kubesim.cluster import Cluster

NS = "default"


async def test_pod_on_lost_node_is_evicted_only_after_grace_plus_toleration(
    cluster: Cluster, core: k8s.CoreV1Api
) -> None:
    await core.create_namespaced_pod(NS, pod_manifest("victim", grace=1))

    async def running() -> k8s.V1Pod | None:
        pod = await core.read_namespaced_pod("victim", NS)
        return pod if pod.status.phase == "Running" else None

    pod = await eventually(running, what="victim Running")
    node = pod.spec.node_name
    lost_at = time.monotonic()
    proc = await asyncio.create_subprocess_exec(  # asyncio: the server shares this event loop
        *kubesim_command(),
        "ctl",
        "--server",
        cluster.url,
        "lose-node",
        node,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert f"node/{node} lost" in out.decode()

    async def terminating() -> bool:
        current = await core.read_namespaced_pod("victim", NS)
        return current.metadata.deletion_timestamp is not None

    await eventually(terminating, timeout=10, what="Terminating")
    # monitor grace 1 s + toleration 1 s, minus at most one heartbeat interval (0.1 s).
    assert time.monotonic() - lost_at >= 1.85
