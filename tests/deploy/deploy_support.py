"""Helpers shared by the deploy/ acceptance tests: render overlays with the real kubectl
kustomize, find rendered objects, read the NATS config and passwords an overlay ships, and run a
kubesim API server on a private event-loop thread (sync kubectl tests and async tests alike)."""

from __future__ import annotations

import base64
import copy
import functools
import os
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from kubesim.background import BackgroundApiServer

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
DATA = Path(__file__).parent / "data"
OVERLAYS = ("dev", "prod")
SERVICES = ("watcher", "tracker", "dispatcher")
OPERATOR_KINDS = frozenset({"PrometheusRule", "ServiceMonitor"})
"""Prometheus Operator kinds: no Kubernetes schema; kubesim checks them against stand-in CRDs
(data/*-crd.yaml)."""

T = TypeVar("T")
Obj = dict[str, Any]


def kubectl() -> str:
    found = shutil.which("kubectl")
    if found is None:  # pragma: no cover - the machines and CI have kubectl 1.32
        raise RuntimeError("kubectl not found on PATH")
    return found


def run_kubectl(*args: str, kubeconfig: Path | None = None, stdin: str | None = None) -> str:
    cmd = [kubectl()]
    if kubeconfig is not None:
        cmd += ["--kubeconfig", str(kubeconfig)]
    result = subprocess.run(
        [*cmd, *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
    )
    if result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed:\n{result.stderr}{result.stdout}")
    return result.stdout


@functools.cache
def render_text(target: str) -> str:
    """`kubectl kustomize deploy/<target>` (e.g. `overlays/dev`), cached per session."""
    return run_kubectl("kustomize", str(DEPLOY / target))


def render(target: str) -> list[Obj]:
    """The rendered objects (a fresh deep copy each call; parsing is cached)."""
    return copy.deepcopy(_parsed(target))


@functools.cache
def _parsed(target: str) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(render_text(target)) if doc]


def find(objs: list[Obj], kind: str, name: str | None = None) -> list[Obj]:
    """Objects of `kind` (and name, ignoring a kustomize hash suffix when the name has none)."""
    out = []
    for obj in objs:
        if obj["kind"] != kind:
            continue
        actual = obj["metadata"]["name"]
        if (
            name is None
            or actual == name
            or re.fullmatch(re.escape(name) + r"-[a-z0-9]{10}", actual)
        ):
            out.append(obj)
    return out


def one(objs: list[Obj], kind: str, name: str) -> Obj:
    found = find(objs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def container(deployment: Obj) -> Obj:
    containers = deployment["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    result: Obj = containers[0]
    return result


def env_of(deployment: Obj) -> dict[str, Obj]:
    """A container's env entries by name (value or valueFrom)."""
    return {entry["name"]: entry for entry in container(deployment).get("env", [])}


def nats_config_files(objs: list[Obj]) -> dict[str, str]:
    """The files of the rendered nats-config ConfigMap (nats.conf, auth.conf, tls.conf)."""
    data: dict[str, str] = one(objs, "ConfigMap", "nats-config")["data"]
    return data


def secret_values(objs: list[Obj], name: str) -> dict[str, str]:
    secret = one(objs, "Secret", name)
    values = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    values.update(secret.get("stringData") or {})
    return values


def exported_metric_names() -> set[str]:
    """Every `clearance_*` metric name the libraries and services register (without the
    `_total`/`_bucket`/… suffix prometheus_client adds)."""
    names: set[str] = set()
    for source in [
        *REPO.glob("libs/clearance/src/clearance/**/*.py"),
        *REPO.glob("services/*/src/*/**/*.py"),
    ]:
        names |= set(re.findall(r'"(clearance_[a-z0-9_]+)"', source.read_text()))
    return names


def exported(name: str) -> bool:
    """Whether a metric name as Prometheus stores it (`clearance_x_total`) is exported."""
    return re.sub(r"_(total|bucket|sum|count|created)$", "", name) in exported_metric_names()


class KubesimThread(BackgroundApiServer):
    """An in-process kubesim ApiServer (API only, no controllers) on its own loop thread."""

    def _call(self, coro: Awaitable[T], timeout: float = 15.0) -> T:
        return self.call(coro, timeout)

    def kubectl(self, *args: str, stdin: str | None = None) -> str:
        cache = self.tmp / "kubectl-cache"
        return run_kubectl(
            "--cache-dir", str(cache), *args, kubeconfig=self.kubeconfig, stdin=stdin
        )


def iter_docs(text: str) -> Iterator[Obj]:
    for doc in yaml.safe_load_all(text):
        if doc:
            yield doc


def container_environment(
    objs: list[Obj], workload: Obj, *, pod_name: str = "pod-0", namespace: str = "clearance"
) -> dict[str, str]:
    """The environment the kubelet would give the workload's container: envFrom ConfigMaps and
    Secrets, then env (values, ConfigMap/Secret keys, fieldRefs), with $(VAR) expansion."""
    spec = container(workload)
    env: dict[str, str] = {}
    for source in spec.get("envFrom", []):
        if "configMapRef" in source:
            env.update(one(objs, "ConfigMap", source["configMapRef"]["name"])["data"])
        else:
            env.update(secret_values(objs, source["secretRef"]["name"]))
    fields = {"metadata.name": pod_name, "metadata.namespace": namespace}
    for entry in spec.get("env", []):
        name = entry["name"]
        if "value" in entry:
            env[name] = re.sub(
                r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), entry["value"]
            )
            continue
        source = entry["valueFrom"]
        if "fieldRef" in source:
            env[name] = fields[source["fieldRef"]["fieldPath"]]
        elif "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            env[name] = secret_values(objs, ref["name"])[ref["key"]]
        else:
            ref = source["configMapKeyRef"]
            env[name] = one(objs, "ConfigMap", ref["name"])["data"][ref["key"]]
    return env


# ------------------------------------------------------------------------- deployed NATS

NATS_USERS = (*SERVICES, "alerts")
NATS_SECRET = "clearance-nats-auth"


def nats_server_environment(objs: list[Obj], *, pod_name: str = "nats-0") -> dict[str, str]:
    """The NATS container's env as the StatefulSet builds it, Secret keys resolved."""
    [statefulset] = [o for o in objs if o["kind"] == "StatefulSet"]
    return container_environment(objs, statefulset, pod_name=pod_name)


def write_nats_config(
    objs: list[Obj], directory: Path, *, mounts: dict[str, str] | None = None
) -> Path:
    """Write the rendered nats-config ConfigMap's files; returns the path of nats.conf.

    `mounts` maps container paths (e.g. `/etc/nats-tls`) to local directories, as the kubelet's
    volume mounts would."""
    directory.mkdir(parents=True, exist_ok=True)
    for name, text in nats_config_files(objs).items():
        for inside, outside in (mounts or {}).items():
            text = text.replace(inside, outside)
        (directory / name).write_text(text)
    return directory / "nats.conf"


@dataclass
class NatsProcess:
    """nats-server running a rendered config, moved to loopback ports by a wrapper config that
    includes it (`listen`, `http` and the JetStream store are the only overrides; `extra` may
    add more, e.g. a cluster block)."""

    tmp: Path
    objs: list[Obj]
    env: dict[str, str]
    extra: str = ""
    mounts: dict[str, str] | None = None
    port: int = 0
    monitor: int = 0
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.tmp / "nats-server.log"

    def start(self) -> NatsProcess:
        from clearance.natsserver import find_nats_server, free_port

        self.port, self.monitor = free_port(), free_port()
        config = write_nats_config(self.objs, self.tmp / "etc", mounts=self.mounts)
        wrapper = config.parent / "test.conf"
        wrapper.write_text(
            "include ./nats.conf\n"
            f"listen: 127.0.0.1:{self.port}\n"
            f"http: 127.0.0.1:{self.monitor}\n"
            f'jetstream {{ store_dir: "{self.tmp / "store"}", '
            "max_memory_store: 64MB, max_file_store: 1GB }\n" + self.extra
        )
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [str(find_nats_server()), "-c", str(wrapper)],
                env={**os.environ, **self.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        return self

    def wait_ready(self, path: str = "/healthz?js-enabled-only=true", timeout: float = 20) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.process is not None and self.process.poll() is None, (
                f"nats-server exited:\n{self.log.read_text()}"
            )
            try:
                url = f"http://127.0.0.1:{self.monitor}{path}"
                with urllib.request.urlopen(url, timeout=1) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            assert time.monotonic() < deadline, f"nats-server not ready:\n{self.log.read_text()}"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.process is None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def violations(self) -> list[str]:
        """The server's logged permission violations (`Publish Violation`, `Subscription ...`)."""
        return [line for line in self.log.read_text().splitlines() if "Violation" in line]
