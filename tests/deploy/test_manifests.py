"""Acceptance 1 of issue #8: both overlays render with the real `kubectl kustomize`, every rendered
object is applied with `kubectl apply` to kubesim and read back unchanged, and the deployed CRD
serves AppWrappers afterwards.

kubesim serves every kind the overlays render (core, apps, batch, coordination, RBAC, policy/v1
PodDisruptionBudget, networking.k8s.io/v1 NetworkPolicy, CRDs). Every built-in object is also
validated strictly against the real Kubernetes 1.32 schemas (kubernetes-validate), so a
misspelt field cannot hide there.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from deploy_support import DATA, OPERATOR_KINDS, OVERLAYS, SERVICES, KubesimThread, Obj, render

KUBERNETES_VERSION = "1.32.0"
CUSTOM_KINDS = frozenset({"CustomResourceDefinition", *OPERATOR_KINDS})


def key(obj: Obj) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return (obj["kind"], meta.get("namespace", ""), meta["name"])


@pytest.fixture
def kubesim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubesimThread]:
    """A fresh, empty API server per test: each overlay is applied as a first install."""
    server = KubesimThread(tmp_path_factory.mktemp("kubesim")).start()
    try:
        yield server
    finally:
        server.stop()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_every_part(overlay: str) -> None:
    kinds = {obj["kind"] for obj in render(f"overlays/{overlay}")}
    assert {
        "Namespace",
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
        "StatefulSet",
        "Service",
        "ConfigMap",
        "PrometheusRule",
        "ServiceMonitor",
    } <= kinds


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_builtin_objects_are_valid_for_kubernetes_1_32(overlay: str) -> None:
    for obj in render(f"overlays/{overlay}"):
        if obj["kind"] in OPERATOR_KINDS:
            continue  # CRD kinds: checked by kubesim against the CRD schemas below
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            pytest.fail(f"{key(obj)}: {exc.message} at {list(exc.path)}")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_rendered_objects_apply_to_kubesim_and_read_back_unchanged(
    overlay: str, kubesim: KubesimThread, tmp_path: Path
) -> None:
    objs = render(f"overlays/{overlay}")
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    stored = [o for o in objs if o["kind"] != "CustomResourceDefinition"]
    operator_crds = "---\n".join(
        (DATA / f"{kind.lower()}-crd.yaml").read_text() for kind in sorted(OPERATOR_KINDS)
    )
    kubesim.kubectl("apply", "-f", "-", stdin=operator_crds + "---\n" + yaml.safe_dump_all(crds))
    manifest = tmp_path / "rendered.yaml"
    manifest.write_text(yaml.safe_dump_all(stored))
    kubesim.kubectl("apply", "-f", str(manifest))

    fetched = json.loads(kubesim.kubectl("get", "-f", str(manifest), "-o", "json"))["items"]
    back = {key(obj): obj for obj in fetched}
    assert set(back) == {key(obj) for obj in stored}
    for want in stored + crds:
        have = back.get(key(want)) or json.loads(
            kubesim.kubectl("get", "crd", want["metadata"]["name"], "-o", "json")
        )
        for field, value in want.items():
            if field == "metadata":
                continue
            assert have.get(field) == value, f"{key(want)}.{field} changed on the way back"
        for field in ("labels", "annotations"):
            stored_meta = have["metadata"].get(field) or {}
            for name, value in (want["metadata"].get(field) or {}).items():
                assert stored_meta.get(name) == value, f"{key(want)} metadata.{field}.{name}"


def test_deployed_crd_serves_appwrappers_with_printer_columns(kubesim: KubesimThread) -> None:
    objs = render("overlays/dev")
    crd = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    kubesim.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(crd))
    namespace = [o for o in objs if o["kind"] == "Namespace"]
    kubesim.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(namespace))
    kubesim.kubectl("apply", "-f", str(DATA / "appwrapper.yaml"))

    stored: dict[str, Any] = json.loads(
        kubesim.kubectl("get", "appwrappers", "deploy-smoke", "-n", "clearance", "-o", "json")
    )
    assert stored["spec"]["schedulingSpec"]["minAvailable"] == 1
    table = kubesim.kubectl("get", "appwrappers", "-n", "clearance")
    header = table.splitlines()[0].split()
    assert header[:4] == ["NAME", "STATE", "ATTEMPT", "REQUEUES"]
    # The status subresource: status written through /status, shown in the printer columns.
    kubesim.kubectl(
        "patch",
        "appwrapper",
        "deploy-smoke",
        "-n",
        "clearance",
        "--subresource=status",
        "--type=merge",
        "-p",
        '{"status":{"state":"Running","numberOfRequeueings":2,"clearance":{"attempt":3}}}',
    )
    row = kubesim.kubectl("get", "appwrappers", "-n", "clearance", "--no-headers").split()
    assert row[:4] == ["deploy-smoke", "Running", "3", "2"]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_service_deployment_is_non_root_read_only_and_probed(overlay: str) -> None:
    objs = render(f"overlays/{overlay}")
    workloads = [o for o in objs if o["kind"] in ("Deployment", "StatefulSet")]
    assert {o["metadata"]["name"] for o in workloads} >= {f"clearance-{s}" for s in SERVICES}
    for workload in workloads:
        pod = workload["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True, key(workload)
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        for c in pod["containers"]:
            sc = c["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True, key(workload)
            assert sc["allowPrivilegeEscalation"] is False, key(workload)
            assert sc["capabilities"] == {"drop": ["ALL"]}, key(workload)
            assert "livenessProbe" in c and "readinessProbe" in c, key(workload)
            assert c["resources"]["requests"] and c["resources"]["limits"]["memory"], key(workload)
    for service in SERVICES:
        [deployment] = [o for o in workloads if o["metadata"]["name"] == f"clearance-{service}"]
        c = deployment["spec"]["template"]["spec"]["containers"][0]
        assert c["command"] == [f"clearance-{service}"]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert (
            deployment["spec"]["template"]["spec"]["serviceAccountName"] == f"clearance-{service}"
        )
        metrics = [
            o
            for o in objs
            if o["kind"] == "Service" and o["metadata"]["name"] == f"clearance-{service}-metrics"
        ]
        assert (
            metrics
            and metrics[0]["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
        )


def test_prod_runs_two_replicas_three_nats_nodes_with_volumes_and_budgets() -> None:
    objs = render("overlays/prod")
    for service in SERVICES:
        [deployment] = [
            o
            for o in objs
            if o["kind"] == "Deployment" and o["metadata"]["name"] == f"clearance-{service}"
        ]
        assert deployment["spec"]["replicas"] == 2
    [nats] = [o for o in objs if o["kind"] == "StatefulSet"]
    assert nats["spec"]["replicas"] == 3
    assert [t["metadata"]["name"] for t in nats["spec"]["volumeClaimTemplates"]] == ["data"]
    assert all(v["name"] != "data" for v in nats["spec"]["template"]["spec"]["volumes"])
    budgets = {o["metadata"]["name"]: o["spec"] for o in objs if o["kind"] == "PodDisruptionBudget"}
    assert budgets["nats"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": {"app.kubernetes.io/name": "nats"}},
    }
    for service in SERVICES:
        assert budgets[f"clearance-{service}"]["minAvailable"] == 1


def test_dev_runs_one_of_everything() -> None:
    objs = render("overlays/dev")
    assert {o["spec"]["replicas"] for o in objs if o["kind"] in ("Deployment", "StatefulSet")} == {
        1
    }
    assert not [o for o in objs if o["kind"] == "PodDisruptionBudget"]
