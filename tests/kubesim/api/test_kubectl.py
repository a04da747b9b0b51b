"""kubectl v1.32 against the server: apply (SMP for built-ins, merge for CRs), get (Table),
generators that POST protobuf, force delete. The fidelity suite covers kubectl in depth."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from api_support import AW_GROUP, appwrapper_crd

pytestmark = pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")


async def kubectl(kubeconfig: Path, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
    """Run kubectl without blocking the event loop that serves it."""
    proc = await asyncio.create_subprocess_exec(
        "kubectl",
        "--kubeconfig",
        str(kubeconfig),
        "--cache-dir",
        str(kubeconfig.parent / "kubectl-cache"),
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate(stdin.encode() if stdin else None)
    return proc.returncode or 0, out.decode(), err.decode()


POD = """
apiVersion: v1
kind: Pod
metadata: {name: web, labels: {app: web}}
spec:
  containers: [{name: c, image: "nginx:1.25"}]
"""


async def test_kubectl_apply_twice_patches_and_get_prints_table(kubeconfig: Path) -> None:
    code, out, err = await kubectl(kubeconfig, "apply", "-f", "-", stdin=POD)
    assert code == 0, err
    assert out.strip() == "pod/web created"
    code, out, err = await kubectl(
        kubeconfig, "apply", "-f", "-", stdin=POD.replace("1.25", "1.26")
    )
    assert code == 0, err
    assert out.strip() == "pod/web configured"
    code, out, _ = await kubectl(kubeconfig, "get", "pods")
    header, row = out.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "READY", "STATUS"]
    assert row.split()[:3] == ["web", "0/1", "Pending"]
    code, out, _ = await kubectl(kubeconfig, "get", "pod", "web", "-o", "json")
    assert json.loads(out)["spec"]["containers"][0]["image"] == "nginx:1.26"


async def test_kubectl_strict_validation_reports_unknown_field(kubeconfig: Path) -> None:
    code, _, err = await kubectl(
        kubeconfig, "create", "-f", "-", stdin=POD.replace("containers:", "containerz:")
    )
    assert code != 0
    assert 'strict decoding error: unknown field "spec.containerz"' in err


async def test_kubectl_generators_send_protobuf_that_is_decoded(kubeconfig: Path) -> None:
    code, out, err = await kubectl(kubeconfig, "create", "namespace", "foo")
    assert code == 0, err
    code, out, err = await kubectl(
        kubeconfig, "create", "configmap", "cm", "-n", "foo", "--from-literal=a=b"
    )
    assert code == 0, err
    code, out, _ = await kubectl(
        kubeconfig, "get", "configmap", "cm", "-n", "foo", "-o", "jsonpath={.data.a}"
    )
    assert out == "b"


async def test_kubectl_apply_crd_then_custom_resource_uses_merge_patch(kubeconfig: Path) -> None:
    code, _, err = await kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(appwrapper_crd()))
    assert code == 0, err
    aw = {
        "apiVersion": f"{AW_GROUP}/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": "a"},
        "spec": {"priority": 1},
    }
    for expected in ("created", "configured"):
        code, out, err = await kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(aw))
        assert code == 0, err
        assert out.strip() == f"appwrapper.{AW_GROUP}/a {expected}"
        aw["spec"]["priority"] = 2


async def test_kubectl_force_delete_removes_bound_pod(kubeconfig: Path) -> None:
    bound = POD.replace("containers:", "nodeName: n1\n  containers:")
    await kubectl(kubeconfig, "apply", "-f", "-", stdin=bound)
    code, _, err = await kubectl(kubeconfig, "delete", "pod", "web", "--wait=false")
    assert code == 0, err
    code, out, _ = await kubectl(
        kubeconfig, "get", "pod", "web", "-o", "jsonpath={.metadata.deletionTimestamp}"
    )
    assert out
    code, _, err = await kubectl(kubeconfig, "delete", "pod", "web", "--grace-period=0", "--force")
    assert code == 0, err
    code, _, err = await kubectl(kubeconfig, "get", "pod", "web")
    assert code != 0 and 'pods "web" not found' in err
