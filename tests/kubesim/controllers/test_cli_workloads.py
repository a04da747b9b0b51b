"""Workloads as a kubectl user sees them: `kubesim serve --builtin-crd pytorchjob` as a real
subprocess, manifests applied with kubectl, `kubectl get` tables and `kubectl rollout status`.

Columns are those of the real printers (kubernetes pkg/printers/internalversion: Deployment
NAME READY UP-TO-DATE AVAILABLE AGE, ReplicaSet NAME DESIRED CURRENT READY AGE, StatefulSet
NAME READY AGE) and of the PyTorchJob CRD's printer columns (State, Age).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from cluster_support import Served, kubesim_command, start_serve, stop
from tests.support.polling import blocking_until as wait_for

FAST = (
    "--node-monitor-grace",
    "1s",
    "--heartbeat-interval",
    "100ms",
    "--pod-start-delay",
    "100ms",
    "--kubelet-termination-delay",
    "200ms",
)

MANIFESTS = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: web}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      containers: [{name: web, image: "nginx:1.27"}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: db}
spec:
  replicas: 2
  serviceName: db
  selector: {matchLabels: {app: db}}
  template:
    metadata: {labels: {app: db}}
    spec:
      containers: [{name: db, image: "postgres:16"}]
---
apiVersion: kubeflow.org/v1
kind: PyTorchJob
metadata: {name: pj}
spec:
  pytorchReplicaSpecs:
    Master:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers: [{name: pytorch, image: "pytorch/pytorch:2.3"}]
    Worker:
      replicas: 1
      restartPolicy: OnFailure
      template:
        spec:
          containers: [{name: pytorch, image: "pytorch/pytorch:2.3"}]
"""


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    tmp = tmp_path_factory.mktemp("workloads")
    server = start_serve(tmp, "--builtin-crd", "pytorchjob", *FAST)
    manifest = tmp / "workloads.yaml"
    manifest.write_text(MANIFESTS)
    applied = server.kubectl("apply", "-f", str(manifest))
    assert applied.returncode == 0, applied.stderr
    yield server
    stop(server)


def rows(served: Served, *args: str) -> list[list[str]]:
    result = served.kubectl("get", *args)
    assert result.returncode == 0, result.stderr
    return [line.split() for line in result.stdout.strip().splitlines()]


def test_rollout_status_succeeds_for_the_deployment_and_statefulset(served: Served) -> None:
    for target in ("deployment/web", "statefulset/db"):
        result = served.kubectl("rollout", "status", target, "--timeout=30s")
        assert result.returncode == 0, result.stderr
        assert "successfully rolled out" in result.stdout or "complete" in result.stdout


def test_get_shows_the_real_printer_columns(served: Served) -> None:
    wait_for(
        lambda: rows(served, "deploy", "web")[1][1:4] == ["2/2", "2", "2"],
        what="deployment 2/2",
    )
    deploy = rows(served, "deploy")
    assert deploy[0] == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert deploy[1][:4] == ["web", "2/2", "2", "2"]
    rs = rows(served, "rs")
    assert rs[0] == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert rs[1][0].startswith("web-") and rs[1][1:4] == ["2", "2", "2"]
    wait_for(lambda: rows(served, "sts", "db")[1][1] == "2/2", what="statefulset 2/2")
    sts = rows(served, "sts")
    assert sts[0] == ["NAME", "READY", "AGE"] and sts[1][:2] == ["db", "2/2"]
    wide = rows(served, "deploy", "-o", "wide")
    assert wide[0][5:] == ["CONTAINERS", "IMAGES", "SELECTOR"]
    assert wide[1][5:] == ["web", "nginx:1.27", "app=web"]


def test_get_pods_lists_every_workloads_pods_by_their_names(served: Served) -> None:
    def all_running() -> bool:
        table = rows(served, "pods")
        return len(table) == 7 and all(r[2] == "Running" for r in table[1:])

    wait_for(all_running, what="6 pods Running")
    names = sorted(r[0] for r in rows(served, "pods")[1:])
    assert names[:2] == ["db-0", "db-1"]
    assert names[2:4] == ["pj-master-0", "pj-worker-0"]
    assert all(n.startswith("web-") for n in names[4:])


def test_pytorchjob_state_column_shows_the_last_condition(served: Served) -> None:
    wait_for(lambda: rows(served, "pytorchjobs")[1][1] == "Running", what="PyTorchJob Running")
    table = rows(served, "pytorchjobs")
    assert table[0] == ["NAME", "STATE", "AGE"]


def test_the_builtin_crd_is_the_bundled_file(served: Served) -> None:
    result = served.kubectl("get", "crd", "pytorchjobs.kubeflow.org", "-o", "json")
    assert result.returncode == 0, result.stderr
    crd = json.loads(result.stdout)
    bundled = yaml.safe_load(
        (
            Path(__file__).parents[3]
            / "libs/kubesim/src/kubesim/data/kubeflow.org_pytorchjobs.yaml"
        ).read_text()
    )
    assert crd["spec"]["versions"][0]["schema"] == bundled["spec"]["versions"][0]["schema"]


def test_an_unknown_builtin_crd_is_a_usage_error() -> None:
    result = subprocess.run(
        [*kubesim_command(), "serve", "--port", "0", "--builtin-crd", "mpijob"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "invalid choice: 'mpijob'" in result.stderr
