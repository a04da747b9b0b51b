"""The deployment as a whole: the three real services, started with the environment their rendered
Deployments give them, against the rendered NATS config and a kubesim cluster with the deployed
CRD — they become ready, dispatch an AppWrapper, run a full requeue cycle (requeued, teardown,
`cleared` from the tracker, redispatch, failure at the requeue limit), and the NATS server logs not
one permission violation. This proves the permission file against the services' real code paths, not
only against the calls tests/deploy/test_nats_permissions.py makes on their behalf.

Deviations from a pod, each unavoidable here: the NATS URL and the HTTP port point at loopback,
KUBECONFIG replaces the in-cluster service account, and OTEL_EXPORTER_OTLP_ENDPOINT is dropped
(no Jaeger runs; http://jaeger:4318 must not be contacted). Everything else — users, passwords,
durable names, Lease names, teardown policy, intake — is what the dev overlay renders.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from deploy_support import (
    DATA,
    DEPLOY,
    NATS_SECRET,
    SERVICES,
    NatsProcess,
    container_environment,
    kubectl,
    one,
    render,
    secret_values,
)

from clearance import bus
from clearance.settings import CommonSettings
from clearance.tailing import TailRequest, tail
from support.processes import ServiceProcess, free_port, venv_script


class KubesimProcess:
    """`kubesim serve` with fake nodes and controllers, the AppWrapper CRD preloaded."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.kubeconfig = tmp / "kubeconfig"
        self.log = tmp / "kubesim.log"
        self.process: subprocess.Popen[str] | None = None

    def start(self) -> KubesimProcess:
        command = [
            venv_script("kubesim"), "serve", "--port", "0", "--nodes", "2",
            "--kubeconfig", str(self.kubeconfig),
            "--crd", str(DEPLOY / "crd" / "appwrapper-crd.yaml"),
            "--pod-start-delay", "200ms", "--pod-run-time", "30s",
        ]  # fmt: skip
        with self.log.open("w") as err:
            self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=err, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert "kubesim listening on" in line, f"{line!r}\n{self.log.read_text()}"
        return self

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        result = subprocess.run(
            [kubectl(), "--kubeconfig", str(self.kubeconfig), "--cache-dir",
             str(self.tmp / "cache"), *args],
            input=stdin, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubesimProcess]:
    sim = KubesimProcess(tmp_path_factory.mktemp("kubesim")).start()
    try:
        namespace = [o for o in render("overlays/dev") if o["kind"] == "Namespace"]
        sim.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(namespace))
        yield sim
    finally:
        sim.stop()


@pytest.fixture(scope="module")
def services(
    cluster: KubesimProcess, deployed_nats: NatsProcess, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, ServiceProcess]]:
    objs = render("overlays/dev")
    logs = tmp_path_factory.mktemp("services")
    started: dict[str, ServiceProcess] = {}
    try:
        for service in SERVICES:
            deployment = one(objs, "Deployment", f"clearance-{service}")
            env = container_environment(objs, deployment, pod_name=f"clearance-{service}-0")
            port = free_port()
            env |= {
                "CLEARANCE_NATS_URL": deployed_nats.url,
                "CLEARANCE_HTTP_HOST": "127.0.0.1",
                "CLEARANCE_HTTP_PORT": str(port),
                "KUBECONFIG": str(cluster.kubeconfig),
                "CLEARANCE_LOG_FORMAT": "text",
            }
            env.pop("OTEL_EXPORTER_OTLP_ENDPOINT")
            command = [
                venv_script(deployment["spec"]["template"]["spec"]["containers"][0]["command"][0])
            ]
            process = ServiceProcess(
                command, env=env, log_path=logs / f"{service}.log", http_port=port
            )
            started[service] = process.start()
        for process in started.values():
            process.wait_ready(timeout=30)
        yield started
    finally:
        for process in started.values():
            process.terminate()


def test_services_become_ready_with_the_deployed_configuration(
    services: dict[str, ServiceProcess], deployed_nats: NatsProcess
) -> None:
    for name, process in services.items():
        status, _ = process.http_get("/healthz")
        assert status == 200, f"{name}:\n{process.output()}"
        status, body = process.http_get("/metrics")
        assert status == 200 and "clearance_" in body
    assert deployed_nats.violations() == []


def test_an_appwrapper_is_dispatched_through_the_deployed_bus_without_violations(
    services: dict[str, ServiceProcess], cluster: KubesimProcess, deployed_nats: NatsProcess
) -> None:
    cluster.kubectl("apply", "-f", str(DATA / "appwrapper.yaml"))
    deadline = time.monotonic() + 30
    state = None
    while time.monotonic() < deadline:
        aw = json.loads(
            cluster.kubectl("get", "appwrapper", "deploy-smoke", "-n", "clearance", "-o", "json")
        )
        state = (aw.get("status") or {}).get("state")
        if state == "Running":
            break
        time.sleep(0.2)
    logs = "\n".join(f"--- {n}\n{p.output(tail=30)}" for n, p in services.items())
    assert state == "Running", logs
    jobs = json.loads(cluster.kubectl("get", "jobs", "-n", "clearance", "-o", "json"))["items"]
    assert [j["metadata"]["name"] for j in jobs] == ["deploy-smoke"]
    assert deployed_nats.violations() == [], logs


async def test_a_full_requeue_cycle_runs_through_every_nats_user(
    services: dict[str, ServiceProcess], cluster: KubesimProcess, deployed_nats: NatsProcess
) -> None:
    """requeued → teardown.started → (tracker) cleared → redispatched → … → failed at the limit:
    each fact published by the user allowed to, read back by the read-only alerts user."""
    cluster.kubectl("apply", "-f", str(DATA / "appwrapper-requeue.yaml"))
    wanted = {"dispatched", "requeued", "teardown.started", "cleared", "redispatched", "failed"}
    seen: set[str] = set()
    nc = await bus.connect(
        CommonSettings(
            nats_url=deployed_nats.url,
            nats_user="alerts",
            nats_password=secret_values(render("overlays/dev"), NATS_SECRET)["alerts-password"],
        ),
        name="test-alerts",
        first_connect_timeout=5,
    )
    try:
        deadline = time.monotonic() + 60
        while not wanted <= seen and time.monotonic() < deadline:
            lines: list[str] = []
            request = TailRequest(
                namespace="clearance", appwrapper="deploy-requeue", since=timedelta(hours=1),
                follow=False,
            )  # fmt: skip
            await tail(nc, request, emit=lines.append, as_json=True, idle_exit=0.5)
            seen = {json.loads(line)["type"].split(".", 1)[1] for line in lines}
            await asyncio.sleep(0.5)
    finally:
        await nc.close()
    logs = "\n".join(f"--- {n}\n{p.output(tail=40)}" for n, p in services.items())
    assert wanted <= seen, f"saw {sorted(seen)}\n{logs}"
    assert deployed_nats.violations() == [], logs
