"""MCAD v1's own AppWrapper CRD (tests/data/crds/mcad-v1-appwrapper-crd.yaml) is served by
kubesim as a real API server would serve it: `kubectl apply` installs it, and its schema prunes
what it does not declare — Clearance's `status.clearance` bookkeeping and Clearance's
requeuing fields — and applies upstream's defaults (issue 17: the reason the dispatcher
stalls under the upstream CRD; the fix is another engineer's, this is the simulator side).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from fidelity_support import (
    AW_GROUP,
    AW_PLURAL,
    AW_VERSION,
    MERGE_PATCH,
    JsonObj,
    Kubectl,
    appwrapper,
    status_from_exception,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

PRELOAD_CRD = False
UPSTREAM_CRD = Path(__file__).parents[2] / "data" / "crds" / "mcad-v1-appwrapper-crd.yaml"
CLEARANCE_REQUEUING = {
    "pauseTimeInSeconds": 0,
    "forceDeletionTimeInSeconds": 30,
    "stuckAlertTimeInSeconds": 10,
    "finalizerRemoval": "AfterForceDeletion",
}


@pytest.fixture(scope="module", autouse=True)
def upstream_crd(kubectl: Kubectl) -> JsonObj:
    proc = kubectl.run("apply", "-f", str(UPSTREAM_CRD))
    assert proc.returncode == 0, proc.stderr
    assert "customresourcedefinition.apiextensions.k8s.io/appwrappers" in proc.stdout
    crd: JsonObj = yaml.safe_load(UPSTREAM_CRD.read_text())
    return crd


def test_the_upstream_status_schema_declares_no_clearance_and_preserves_nothing(
    upstream_crd: JsonObj,
) -> None:
    status = upstream_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"][
        "status"
    ]
    assert "clearance" not in status["properties"]
    assert "x-kubernetes-preserve-unknown-fields" not in str(status)


async def test_status_clearance_is_pruned_by_the_upstream_crd(
    custom: k8s.CustomObjectsApi, ns: str
) -> None:
    await custom.create_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, appwrapper("aw", ns)
    )
    status = {"state": "Pending", "numberOfRequeueings": 1, "clearance": {"attempt": 2}}
    stored = await custom.patch_namespaced_custom_object_status(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, "aw", {"status": status}, _content_type=MERGE_PATCH
    )
    assert stored["status"] == {"state": "Pending", "numberOfRequeueings": 1}
    again = await custom.get_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, "aw")
    assert "clearance" not in again["status"]


def test_clearance_requeuing_fields_are_pruned_and_upstream_defaults_applied(
    kubectl: Kubectl, ns: str
) -> None:
    aw = appwrapper("policy", ns)
    aw["spec"]["schedulingSpec"]["requeuing"] = {"timeInSeconds": 60, **CLEARANCE_REQUEUING}
    strict = kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(aw))
    assert strict.returncode == 1  # kubectl's default is server-side Strict validation
    assert 'unknown field "spec.schedulingSpec.requeuing.pauseTimeInSeconds"' in strict.stderr
    proc = kubectl.run("apply", "--validate=warn", "-f", "-", stdin=yaml.safe_dump(aw))
    assert proc.returncode == 0, proc.stderr
    for field in CLEARANCE_REQUEUING:  # Warn: the unknown fields are named, then dropped
        assert f'unknown field "spec.schedulingSpec.requeuing.{field}"' in proc.stderr
    stored = kubectl.json("get", "appwrapper", "policy", "-n", ns)
    assert stored["spec"]["schedulingSpec"]["requeuing"] == {
        "timeInSeconds": 60,
        "growthType": "exponential",
        "maxNumRequeuings": 0,
        "maxTimeInSeconds": 0,
        "numRequeuings": 0,
    }


async def test_the_upstream_crd_requires_spec_resources(
    custom: k8s.CustomObjectsApi, ns: str
) -> None:
    aw = appwrapper("empty", ns)
    del aw["spec"]["resources"]
    with pytest.raises(ApiException) as caught:
        await custom.create_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, aw)
    outcome = status_from_exception(caught.value)
    assert outcome.code == 422 and outcome.status is not None
    assert outcome.status["details"]["causes"] == [
        {"reason": "FieldValueRequired", "message": "Required value", "field": "spec.resources"}
    ]
