"""Fixtures of the HA tests (issue 12): real JetStream clusters of ``nats-server`` processes.

``nats_cluster`` starts a private 3-node cluster (:class:`~clearance.natscluster.NatsCluster`:
free loopback ports, server names ``n0``…``n2``, one store per node) that the test may kill,
freeze and restart at will; ``cluster_factory`` starts clusters of other sizes. Every node is
stopped at teardown, frozen ones thawed first; a failing test prints each node's log tail.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Generator
from pathlib import Path

import pytest

from clearance.natscluster import NatsCluster

ClusterFactory = Callable[..., Awaitable[NatsCluster]]


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
async def cluster_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[ClusterFactory]:
    started: list[NatsCluster] = []

    async def make(*, size: int = 3) -> NatsCluster:
        cluster = NatsCluster(tmp_path / f"cluster-{len(started)}", size=size)
        started.append(cluster)
        return await cluster.astart()

    yield make
    for cluster in started:
        await cluster.astop()
        report = getattr(request.node, "rep_call", None)
        if report is not None and report.failed:
            print_logs(cluster)


@pytest.fixture
async def nats_cluster(cluster_factory: ClusterFactory) -> NatsCluster:
    """A started 3-node JetStream cluster, private to the test."""
    return await cluster_factory(size=3)


def print_logs(cluster: NatsCluster, *, tail: int = 30) -> None:
    for name, node in zip(cluster.names, cluster.nodes, strict=True):
        print(f"----- {name} {node.log_file} (last {tail} lines) -----")
        try:
            print("\n".join(node.log_file.read_text(errors="replace").splitlines()[-tail:]))
        except OSError:
            print("(no log)")
