"""A whole Clearance installation on one machine: NATS, kubesim, the three services, a trace sink.

``clearance demo`` and the end-to-end tests both need the system as it is deployed: separate
processes wired only through their environment (``CLEARANCE_*``, ``KUBECONFIG``,
``OTEL_EXPORTER_OTLP_ENDPOINT``). :class:`LocalStack` starts them in dependency order, waits for
each ``/readyz``, exposes handles for fault injection (kill, restart) and stops everything,
even when interrupted halfway.

kubesim is run as a subprocess through its CLI (``kubesim serve``), never imported, so this
library keeps no dependency on the simulator.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from clearance.natscluster import NatsCluster
from clearance.natsserver import NatsServer
from clearance.processes import ServiceProcess, free_port, venv_script
from clearance.traces import TraceReceiver

SERVICES = ("watcher", "tracker", "dispatcher")


def appwrapper_crd() -> str:
    """The AppWrapper CRD shipped with the package (same as ``deploy/crd/``)."""
    return resources.files("clearance").joinpath("data/appwrapper-crd.yaml").read_text()


@dataclass
class StackConfig:
    workdir: Path
    nodes: int = 1
    kubesim_flags: Sequence[str] = ()
    """Extra ``kubesim serve`` flags (timings such as ``--node-monitor-grace 2s``)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Environment for every service (deadlines, lease timings, …)."""
    service_env: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Extra environment per service name (``watcher``, ``tracker``, ``dispatcher``)."""
    services: Sequence[str] = SERVICES
    traces: bool = True
    ready_timeout: float = 60.0
    crd: str | None = None
    """The AppWrapper CRD (YAML) kubesim serves; None: the one shipped (deploy/crd)."""
    nats_nodes: int = 1
    """1: one embedded nats-server; 3 (or 5): a JetStream cluster of that many nodes, the
    services told every node's URL and ``CLEARANCE_STREAM_REPLICAS`` set to the node count
    unless ``env`` says otherwise."""


class StackError(RuntimeError):
    """A component of the local stack failed to start; the message carries its log tail."""


class LocalStack:
    """Start with :meth:`start`, stop with :meth:`stop` (idempotent, safe after a failure)."""

    def __init__(self, config: StackConfig) -> None:
        self.config = config
        self.workdir = config.workdir
        self.nats: NatsServer | None = None
        self.cluster: NatsCluster | None = None
        """The NATS cluster when ``nats_nodes`` > 1 (then ``nats`` is None)."""
        self.kubesim: ServiceProcess | None = None
        self.kubesim_url = ""
        self.kubeconfig = self.workdir / "kubeconfig"
        self.receiver: TraceReceiver | None = None
        self.services: dict[str, ServiceProcess] = {}

    @property
    def nats_url(self) -> str:
        """The NATS URL(s) the services get (comma-separated for a cluster)."""
        if self.cluster is not None:
            return self.cluster.url
        assert self.nats is not None, "stack not started"
        return self.nats.url

    async def start(self) -> LocalStack:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if self.config.traces:
            self.receiver = await TraceReceiver().start()
        if self.config.nats_nodes > 1:
            self.cluster = NatsCluster(self.workdir / "nats", size=self.config.nats_nodes)
            await self.cluster.astart()
        else:
            self.nats = NatsServer(self.workdir / "nats" / "store")
            await self.nats.astart()
        self._start_kubesim()
        for name in self.config.services:
            self.services[name] = self._service(name).start()
        for process in self.services.values():
            self._wait_ready(process)
        return self

    def _start_kubesim(self) -> None:
        crd = self.workdir / "appwrapper-crd.yaml"
        crd.write_text(self.config.crd if self.config.crd is not None else appwrapper_crd())
        port = free_port()
        command = [
            venv_script("kubesim"),
            "serve",
            "--port",
            str(port),
            "--nodes",
            str(self.config.nodes),
            "--kubeconfig",
            str(self.kubeconfig),
            "--crd",
            str(crd),
            *self.config.kubesim_flags,
        ]
        self.kubesim = ServiceProcess(
            command, env={}, log_path=self.workdir / "logs" / "kubesim.log"
        ).start()
        self.kubesim_url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + self.config.ready_timeout
        while time.monotonic() < deadline:
            if not self.kubesim.running:
                raise StackError(f"kubesim exited early:\n{self.kubesim.output()}")
            if self.kubeconfig.exists() and self._kubesim_answers():
                return
            time.sleep(0.05)
        raise StackError(f"kubesim did not come up:\n{self.kubesim.output()}")

    def _kubesim_answers(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"{self.kubesim_url}/readyz", timeout=1) as response:
                return int(response.status) == 200
        except OSError:
            return False

    def service_environment(self, name: str, *, http_port: int) -> dict[str, str]:
        env = {
            "CLEARANCE_NATS_URL": self.nats_url,
            "KUBECONFIG": str(self.kubeconfig),
            "CLEARANCE_HTTP_HOST": "127.0.0.1",
            "CLEARANCE_HTTP_PORT": str(http_port),
            "OTEL_SERVICE_NAME": f"clearance-{name}",
            **(
                {"CLEARANCE_STREAM_REPLICAS": str(self.config.nats_nodes)}
                if self.config.nats_nodes > 1
                else {}
            ),
            **self.config.env,
            **self.config.service_env.get(name, {}),
        }
        if self.receiver is not None:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = self.receiver.endpoint
        return env

    def _service(self, name: str, *, replica: int = 0) -> ServiceProcess:
        port = free_port()
        suffix = f"-{replica}" if replica else ""
        # Each instance is its own "pod": in Kubernetes HOSTNAME is the pod's name, and the
        # tracker replicas tell themselves apart by it (their replica id). On one host they
        # would all share the host name and each act as the owner of the other's records.
        pod = {"HOSTNAME": f"clearance-{name}-{replica}"}
        return ServiceProcess(
            [venv_script(f"clearance-{name}")],
            env={**pod, **self.service_environment(name, http_port=port)},
            log_path=self.workdir / "logs" / f"{name}{suffix}.log",
            http_port=port,
        )

    def add_replica(self, name: str, replica: int) -> ServiceProcess:
        """Start one more replica of a service (leader election / sharing tests)."""
        process = self._service(name, replica=replica).start()
        self.services[f"{name}-{replica}"] = process
        return process

    def _wait_ready(self, process: ServiceProcess) -> None:
        try:
            process.wait_ready(timeout=self.config.ready_timeout)
        except RuntimeError as exc:
            raise StackError(str(exc)) from exc

    def kubesim_ctl(self, *args: str) -> str:
        """Run ``kubesim ctl`` against this stack's simulator (fault injection)."""
        result = subprocess.run(
            [venv_script("kubesim"), "ctl", "--server", self.kubesim_url, *args],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if result.returncode != 0:
            raise StackError(f"kubesim ctl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def kubectl(self, *args: str, input_text: str | None = None) -> str:
        """Run kubectl against the simulator (a real client, as a user would)."""
        result = subprocess.run(
            [
                "kubectl",
                "--kubeconfig",
                str(self.kubeconfig),
                "--cache-dir",
                str(self.workdir / "kube-cache"),
                *args,
            ],
            input=input_text,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "KUBECTL_INTERACTIVE_DELETE": "false"},
        )
        if result.returncode != 0:
            raise StackError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    async def stop(self) -> None:
        # Waiting happens in threads: the trace receiver lives on this event loop and the
        # services flush their last spans to it while they shut down.
        async def terminate(process: ServiceProcess) -> None:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(process.terminate, timeout=10)

        await asyncio.gather(*(terminate(p) for p in self.services.values()))
        if self.kubesim is not None:
            await terminate(self.kubesim)
        if self.nats is not None:
            with contextlib.suppress(Exception):
                await self.nats.astop()
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                await self.cluster.astop()
        if self.receiver is not None:
            with contextlib.suppress(Exception):
                await self.receiver.stop()

    async def __aenter__(self) -> LocalStack:
        try:
            return await self.start()
        except BaseException:
            await self.stop()
            raise

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
