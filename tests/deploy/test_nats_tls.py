"""TLS for NATS is optional (issue #8): deploy/components/nats-tls, added to an overlay, makes the
server require TLS with a certificate from a Secret and points the services at the CA. Proven with
a real nats-server running the rendered config (the Secret's files mounted from a temp dir, as the
kubelet would) and the services' own settings parsed from the rendered Deployments."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from deploy_support import (
    DEPLOY,
    OPERATOR_KINDS,
    SERVICES,
    NatsProcess,
    Obj,
    container,
    container_environment,
    nats_server_environment,
    one,
    run_kubectl,
)

from clearance import bus, subjects
from clearance.settings import CommonSettings
from clearance_dispatcher.settings import DispatcherSettings
from clearance_tracker.settings import TrackerSettings
from clearance_watcher.settings import WatcherSettings

SETTINGS: dict[str, type[CommonSettings]] = {
    "watcher": WatcherSettings,
    "tracker": TrackerSettings,
    "dispatcher": DispatcherSettings,
}
pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl CLI")


def render_with_tls(tmp: Path) -> list[Obj]:
    """The dev overlay plus the nats-tls component, as a user's overlay would combine them."""
    overlay = tmp / "overlay"
    overlay.mkdir()
    relative = os.path.relpath(DEPLOY, overlay)
    (overlay / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"
        f"resources: [{relative}/overlays/dev]\ncomponents: [{relative}/components/nats-tls]\n"
    )
    return [d for d in yaml.safe_load_all(run_kubectl("kustomize", str(overlay))) if d]


def make_certificates(directory: Path) -> None:
    """A CA and a server certificate for 127.0.0.1 in the Secret's layout (cert-manager keys)."""
    directory.mkdir()

    def openssl(*args: str) -> None:
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)

    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=test-ca",
            "-keyout", "ca.key", "-out", "ca.crt")  # fmt: skip
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=nats", "-keyout", "tls.key",
            "-out", "tls.csr")  # fmt: skip
    (directory / "san.ext").write_text("subjectAltName=DNS:nats,DNS:localhost,IP:127.0.0.1\n")
    openssl("x509", "-req", "-in", "tls.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", "san.ext", "-out", "tls.crt")  # fmt: skip


@pytest.fixture(scope="module")
def tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NatsProcess, list[Obj], Path]]:
    tmp = tmp_path_factory.mktemp("nats-tls")
    objs = render_with_tls(tmp)
    certs = tmp / "secret"
    make_certificates(certs)
    server = NatsProcess(
        tmp, objs, nats_server_environment(objs), mounts={"/etc/nats-tls": str(certs)}
    )
    server.start()
    try:
        server.wait_ready()
        yield server, objs, certs
    finally:
        server.stop()


def test_component_renders_valid_objects_mounting_the_secret(tmp_path: Path) -> None:
    objs = render_with_tls(tmp_path)
    for obj in objs:
        if obj["kind"] not in OPERATOR_KINDS:
            kubernetes_validate.validate(obj, "1.32.0", strict=True)
    [statefulset] = [o for o in objs if o["kind"] == "StatefulSet"]
    mounts = {m["mountPath"] for m in container(statefulset)["volumeMounts"]}
    assert "/etc/nats-tls" in mounts
    for service in SERVICES:
        deployment = one(objs, "Deployment", f"clearance-{service}")
        volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
        assert volumes["nats-ca"]["secret"] == {
            "secretName": "clearance-nats-tls",
            "items": [{"key": "ca.crt", "path": "ca.crt"}],
        }


@pytest.mark.parametrize("service", SERVICES)
async def test_services_connect_over_tls_with_their_rendered_settings(
    tls: tuple[NatsProcess, list[Obj], Path], service: str
) -> None:
    server, objs, certs = tls
    env = container_environment(objs, one(objs, "Deployment", f"clearance-{service}"))
    assert env["CLEARANCE_NATS_URL"] == "tls://nats:4222"
    assert env["CLEARANCE_NATS_TLS_CA"] == "/etc/clearance/nats-tls/ca.crt"
    env["CLEARANCE_NATS_URL"] = f"tls://127.0.0.1:{server.port}"
    env["CLEARANCE_NATS_TLS_CA"] = str(certs / "ca.crt")  # the mounted Secret key
    settings = SETTINGS[service].from_env(env)
    nc = await bus.connect(settings, name=f"tls-{service}", first_connect_timeout=5)
    try:
        assert nc.connected_url is not None and nc.connected_url.scheme == "tls"
        if service == "watcher":
            js = nc.jetstream(timeout=5)
            [kube] = [s for s in bus.default_streams() if s.name == subjects.KUBE_STREAM]
            await bus.ensure_stream(js, kube)
            ack = await js.publish(subjects.kube_subject("node", None, "n1"), b"{}")
            assert ack.stream == subjects.KUBE_STREAM
    finally:
        await nc.close()


def test_plain_connections_are_refused_when_tls_is_on(
    tls: tuple[NatsProcess, list[Obj], Path],
) -> None:
    """Speak the NATS protocol in clear text: the server announces TLS and refuses to go on."""
    server, _, _ = tls
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        info = json.loads(sock.recv(65536).decode().removeprefix("INFO ").strip())
        assert info["tls_required"] is True
        connect = {"user": "watcher", "pass": "dev-watcher", "verbose": False, "pedantic": False}
        sock.sendall(f"CONNECT {json.dumps(connect)}\r\nPING\r\n".encode())
        answer = b""
        with contextlib.suppress(OSError):
            while chunk := sock.recv(4096):
                answer += chunk
    assert b"PONG" not in answer
