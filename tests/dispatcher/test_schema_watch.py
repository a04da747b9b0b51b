"""The served AppWrapper CRD read at start-up and on change (issue 17 Build 2), against kubesim.

A chart upgrade can re-apply MCAD v1's CRD over Clearance's at any time: the next check logs,
once, what the new schema prunes and the fix, and (auto mode) moves the bookkeeping to the
annotation; the same schema read again logs nothing more. A forced storage is never switched.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import msgspec
import pytest
import yaml
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from clearance.kube import Kube, KubeConfig
from clearance_dispatcher.metrics import DispatcherMetrics
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.schemawatch import CRDS, SchemaWatch
from clearance_dispatcher.settings import DispatcherSettings
from kubesim.cluster import Cluster, ClusterConfig

REPO = Path(__file__).resolve().parents[2]
OURS = REPO / "deploy/crd/appwrapper-crd.yaml"
UPSTREAM = REPO / "tests/data/crds/mcad-v1-appwrapper-crd.yaml"
NAME = "appwrappers.workload.codeflare.dev"


@pytest.fixture
async def kube() -> AsyncIterator[Kube]:
    cluster = Cluster(ClusterConfig(nodes=1, crd_files=(str(OURS),)))
    await cluster.start()
    client = await Kube.connect(KubeConfig(kubeconfig=str(cluster.kubeconfig_path)))
    try:
        yield client
    finally:
        await client.close()
        await cluster.stop()


def _runtime(kube: Kube, bookkeeping: str = "auto") -> Runtime:
    settings = DispatcherSettings.from_env({"CLEARANCE_BOOKKEEPING": bookkeeping})
    return Runtime(
        settings,
        kube=kube,
        js=cast(Any, None),  # never published to here
        tracer=trace.get_tracer("test"),
        metrics=DispatcherMetrics(CollectorRegistry()),
    )


async def _apply_upstream(kube: Kube) -> None:
    current = msgspec.json.decode(await kube.get(CRDS, NAME))
    body = yaml.safe_load(UPSTREAM.read_text())
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    await kube.replace(CRDS, NAME, body)


def _prunes_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "CRD prunes" in r.getMessage()]


async def test_a_crd_change_to_the_upstream_schema_is_logged_once_and_moves_the_bookkeeping(
    kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="clearance_dispatcher")
    rt = _runtime(kube)
    watch = SchemaWatch(rt)
    await watch.check()
    assert rt.storage.kind == "status"
    assert _prunes_lines(caplog) == []

    await _apply_upstream(kube)
    await watch.check()
    await watch.check()  # the same schema again: nothing new to say
    assert rt.storage.kind == "annotations"
    (line,) = _prunes_lines(caplog)
    assert "status.clearance" in line
    assert "spec.schedulingSpec.requeuing.stuckAlertTimeInSeconds" in line
    assert "kubectl apply -k deploy/crd" in line


async def test_a_forced_status_storage_is_kept_and_the_conflict_is_an_error(
    kube: Kube, caplog: pytest.LogCaptureFixture
) -> None:
    await _apply_upstream(kube)
    rt = _runtime(kube, "status")
    await SchemaWatch(rt).check()
    assert rt.storage.kind == "status"
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1 and "CLEARANCE_BOOKKEEPING=status cannot work" in errors[0].message


async def test_an_unreadable_crd_means_the_annotation_which_works_under_any_schema(
    kube: Kube,
) -> None:
    rt = _runtime(kube)
    watch = SchemaWatch(rt)
    watch.name = "appwrappers.absent.example"
    await watch.check()
    assert rt.storage.kind == "annotations"
