"""`kubesim serve` and `kubesim ctl` as real subprocesses, with kubectl as a real client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from cluster_support import Served, kubesim_command, start_serve, stop

FIDELITY_DATA = Path(__file__).parent.parent / "fidelity" / "data"
APPWRAPPER_CRD = FIDELITY_DATA / "workload.codeflare.dev_appwrappers.yaml"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One `kubesim serve` shared by the tests that only read or add state (startup ~1.5 s)."""
    server = start_serve(tmp_path_factory.mktemp("served"), "--crd", str(APPWRAPPER_CRD))
    yield server
    stop(server)


@pytest.fixture
def own_server(tmp_path: Path) -> Iterator[Served]:
    server = start_serve(tmp_path)
    yield server
    stop(server)


def test_serve_prints_its_url_and_kubectl_lists_the_nodes(served: Served) -> None:
    result = served.kubectl("get", "nodes", "-o", "json")
    assert result.returncode == 0, result.stderr
    nodes = json.loads(result.stdout)["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == ["node-1", "node-2"]
    table = served.kubectl("get", "nodes")
    assert "Ready" in table.stdout


def test_serve_preloads_crds_from_files(served: Served) -> None:
    result = served.kubectl("get", "appwrappers", "-A")
    assert result.returncode == 0, result.stderr


def test_serve_exits_zero_on_sigterm(own_server: Served) -> None:
    own_server.proc.send_signal(signal.SIGTERM)
    assert own_server.proc.wait(10) == 0
    assert own_server.proc.stderr is not None
    assert "Traceback" not in own_server.proc.stderr.read()


def test_serve_exits_zero_on_sigint(own_server: Served) -> None:
    own_server.proc.send_signal(signal.SIGINT)
    assert own_server.proc.wait(10) == 0


def test_ctl_lose_and_recover_node_over_http(own_server: Served) -> None:
    served = own_server
    lose = served.ctl("lose-node", "node-1")
    assert lose.returncode == 0 and "node/node-1 lost" in lose.stdout
    recover = served.ctl("recover-node", "node-1")
    assert recover.returncode == 0 and "recovered" in recover.stdout


def test_ctl_unknown_node_is_an_api_error(served: Served) -> None:
    result = served.ctl("lose-node", "nope")
    assert result.returncode == 1
    assert 'no fake kubelet for node "nope"' in result.stderr


def test_ctl_add_finalizer_patches_the_object(served: Served, tmp_path: Path) -> None:
    manifest = tmp_path / "cm.json"
    manifest.write_text(
        json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}})
    )
    created = served.kubectl("apply", "-f", str(manifest))
    assert created.returncode == 0, created.stderr
    result = served.ctl("add-finalizer", "configmap", "default/cm", "example.com/hold")
    assert result.returncode == 0, result.stderr
    got = served.kubectl("get", "configmap", "cm", "-o", "jsonpath={.metadata.finalizers}")
    assert json.loads(got.stdout) == ["example.com/hold"]


def test_ctl_fail_injects_errors_seen_by_kubectl(served: Served) -> None:
    added = served.ctl(
        "fail", "--path", "^/api/v1/namespaces/default/pods$", "--code", "503", "--count", "1"
    )
    assert added.returncode == 0, added.stderr
    failed = served.kubectl("get", "pods")
    assert failed.returncode != 0 and "ServiceUnavailable" in failed.stderr
    assert served.kubectl("get", "pods").returncode == 0


def _get(url: str, path: str) -> tuple[int, dict[str, str]]:
    try:
        with urllib.request.urlopen(url + path, timeout=10) as resp:
            return resp.status, dict(resp.headers)
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers)


def test_serve_request_limits_answer_429_and_ctl_flowcontrol_changes_them(
    tmp_path: Path,
) -> None:
    server = start_serve(tmp_path, "--rate-limit", "0.5", "--rate-burst", "1")
    try:
        assert _get(server.url, "/api/v1/namespaces")[0] == 200
        code, headers = _get(server.url, "/api/v1/namespaces")
        assert code == 429 and headers["Retry-After"] == "2"
        shown = server.ctl("flowcontrol")
        assert shown.returncode == 0, shown.stderr
        state = json.loads(shown.stdout)
        assert state["rateLimit"] == 0.5 and state["rejected"]["byReason"] == {"rate": 1}
        off = server.ctl("flowcontrol", "--off", "--max-requests-inflight", "5")
        assert off.returncode == 0 and json.loads(off.stdout)["maxRequestsInflight"] == 5
        assert _get(server.url, "/api/v1/namespaces")[0] == 200
        refused = server.ctl("flowcontrol", "--rate-limit", "-1")
        assert refused.returncode == 1 and "rate limit must be" in refused.stderr
    finally:
        stop(server)


def test_serve_refuses_a_negative_request_limit_without_a_traceback() -> None:
    result = subprocess.run(
        [*kubesim_command(), "serve", "--max-requests-inflight", "-1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "in-flight limits must be >= 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_refuses_a_node_without_room_for_a_pod() -> None:
    result = subprocess.run(
        [*kubesim_command(), "serve", "--node-max-pods", "0"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "--node-max-pods must be >= 1" in result.stderr
    assert "Traceback" not in result.stderr


def test_ctl_fail_can_inject_429_with_retry_after(served: Served) -> None:
    added = served.ctl(
        "fail", "--path", "^/api/v1/nodes$", "--code", "429", "--retry-after", "3", "--count", "1"
    )
    assert added.returncode == 0, added.stderr
    code, headers = _get(served.url, "/api/v1/nodes")
    assert code == 429 and headers["Retry-After"] == "3"


def test_ctl_compact_and_drop_watches_answer(served: Served) -> None:
    assert served.ctl("compact").returncode == 0
    assert served.ctl("drop-watches").returncode == 0


def test_ctl_reports_an_unreachable_server_clearly() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    result = subprocess.run(
        [*kubesim_command(), "ctl", "--server", f"http://127.0.0.1:{port}", "compact"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 3
    assert result.stderr.startswith("kubesim: error: cannot reach kubesim at")
    assert "Traceback" not in result.stderr


def test_ctl_uses_kubesim_url_from_the_environment(served: Served) -> None:
    result = subprocess.run(
        [*kubesim_command(), "ctl", "compact"],
        capture_output=True,
        text=True,
        timeout=30,
        env={**os.environ, "KUBESIM_URL": served.url},
    )
    assert result.returncode == 0, result.stderr


def test_serve_rejects_a_bad_crd_file_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ConfigMap\napiVersion: v1\n")
    result = subprocess.run(
        [*kubesim_command(), "serve", "--port", "0", "--crd", str(bad)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "expected CustomResourceDefinition" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_reports_a_busy_port_without_a_traceback() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        result = subprocess.run(
            [*kubesim_command(), "serve", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert result.returncode == 3
    assert f"cannot listen on 127.0.0.1:{port}" in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_rejects_a_bad_duration() -> None:
    result = subprocess.run(
        [*kubesim_command(), "serve", "--pod-start-delay", "5"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "invalid duration" in result.stderr


def test_serve_help_documents_every_timing_with_its_real_default() -> None:
    result = subprocess.run(
        [*kubesim_command(), "serve", "--help"], capture_output=True, text=True, timeout=30
    )
    text = " ".join(result.stdout.split())
    for flag in (
        "--node-monitor-grace",
        "--default-toleration",
        "--pod-start-delay",
        "--pod-run-time",
        "--kubelet-termination-delay",
        "--heartbeat-interval",
        "--podgc-quarantine",
    ):
        assert flag in text
    assert "real default 40s" in text and "real default 300s" in text


def test_python_module_entry_point_matches_the_script() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kubesim.cli", "ctl", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 0 and "lose-node" in result.stdout


def test_serve_runs_on_uvloop_by_default(served: Served) -> None:
    assert "uvloop" in Path(f"/proc/{served.proc.pid}/maps").read_text()


def test_serve_runs_on_the_standard_loop_when_told(tmp_path: Path) -> None:
    server = start_serve(tmp_path, "--event-loop", "asyncio")
    try:
        assert server.kubectl("get", "nodes").returncode == 0
        assert "uvloop" not in Path(f"/proc/{server.proc.pid}/maps").read_text()
    finally:
        stop(server)
