"""Helpers for the fake-cluster tests (imported by conftest and the test modules)."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, TypeVar

import pytest
from tests.support.polling import eventually as eventually  # the one eventually, re-exported

from kubesim.cluster import ClusterConfig

T = TypeVar("T")

FAST = ClusterConfig(
    nodes=2,
    node_monitor_grace=1.0,
    node_monitor_period=0.2,
    default_toleration=1.0,
    pod_start_delay=0.1,
    pod_run_time=0.3,
    kubelet_termination_delay=0.2,
    heartbeat_interval=0.1,
    podgc_period=0.2,
    podgc_quarantine=0.5,
    scheduler_retry=0.2,
)


def kubesim_command() -> list[str]:
    """The installed `kubesim` console script (the real CLI entry point)."""
    script = Path(sys.executable).with_name("kubesim")
    if script.exists():
        return [str(script)]
    found = shutil.which("kubesim")
    return [found] if found else [sys.executable, "-m", "kubesim.cli"]


def kubectl_path() -> str | None:
    return shutil.which("kubectl") or (
        "/usr/bin/kubectl" if Path("/usr/bin/kubectl").exists() else None
    )


def pod_manifest(
    name: str,
    *,
    cpu: str | None = None,
    tolerations: list[dict[str, Any]] | None = None,
    grace: int | None = None,
    finalizers: list[str] | None = None,
    node_selector: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    restart_policy: str | None = None,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "main", "image": "busybox:1.36"}
    if cpu:
        container["resources"] = {"requests": {"cpu": cpu}}
    spec: dict[str, Any] = {"containers": [container]}
    if tolerations is not None:
        spec["tolerations"] = tolerations
    if grace is not None:
        spec["terminationGracePeriodSeconds"] = grace
    if node_selector:
        spec["nodeSelector"] = node_selector
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    meta: dict[str, Any] = {"name": name}
    if finalizers:
        meta["finalizers"] = finalizers
    if annotations:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


class Served:
    def __init__(self, proc: subprocess.Popen[str], url: str, kubeconfig: str) -> None:
        self.proc = proc
        self.url = url
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        kubectl = kubectl_path()
        if kubectl is None:
            pytest.skip("kubectl is not installed")
        return subprocess.run(
            [kubectl, "--kubeconfig", self.kubeconfig, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )

    def ctl(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*kubesim_command(), "ctl", "--server", self.url, *args],
            capture_output=True,
            text=True,
            timeout=30,
        )


def start_serve(tmp_path: Path, *extra: str) -> Served:
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen(
        [
            *kubesim_command(),
            "serve",
            "--port",
            "0",
            "--nodes",
            "2",
            "--kubeconfig",
            str(kubeconfig),
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("kubesim listening on "):
        proc.kill()
        raise AssertionError(
            f"unexpected first line {line!r}; stderr: {proc.stderr.read() if proc.stderr else ''}"
        )
    url = line.split()[3]
    assert line.endswith(f"(kubeconfig: {kubeconfig})")
    return Served(proc, url, str(kubeconfig))


def stop(server: Served) -> None:
    if server.proc.poll() is None:
        server.proc.send_signal(signal.SIGTERM)
        server.proc.wait(10)
