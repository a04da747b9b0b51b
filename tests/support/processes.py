"""Run Clearance services (and kubesim) as real subprocesses, configured through env as deployed.

End-to-end tests must exercise the same entry points users run: ``clearance-watcher`` etc.
from the venv, configured only through ``CLEARANCE_*`` variables and ``KUBECONFIG``. This
helper starts one, waits for ``/readyz``, and can stop it politely (SIGTERM), kill it (SIGKILL,
for crash tests) and restart it with the same environment. Output goes to a log file per
process, printed by the tests on failure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def venv_script(name: str) -> str:
    """Path of a console script installed in the running interpreter's environment."""
    candidate = Path(sysconfig.get_path("scripts")) / name
    if candidate.exists():
        return str(candidate)
    return str(Path(sys.executable).parent / name)


class ServiceProcess:
    """One service process: ``start()``, ``wait_ready()``, ``terminate()``, ``kill()``."""

    def __init__(
        self,
        command: list[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        http_port: int | None = None,
    ) -> None:
        self.command = command
        self.env = {**os.environ, **env}
        self.log_path = log_path
        self.http_port = http_port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def start(self) -> ServiceProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.command, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        return self

    def http_get(self, path: str, *, timeout: float = 1.0) -> tuple[int, str]:
        assert self.http_port is not None, "process has no HTTP port"
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()

    def wait_ready(self, *, timeout: float = 20.0) -> None:
        """Poll ``/readyz`` until 200; fail with the process log when it dies or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise AssertionError(f"{self.command[0]} exited early:\n{self.output()}")
            with contextlib.suppress(OSError):
                status, _ = self.http_get("/readyz")
                if status == 200:
                    return
            time.sleep(0.05)
        raise AssertionError(f"{self.command[0]} not ready after {timeout}s:\n{self.output()}")

    def terminate(self, *, timeout: float = 10.0) -> int:
        """SIGTERM and wait; returns the exit code (SIGKILL after ``timeout``)."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to clean up."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> ServiceProcess:
        self.kill()
        return self.start()

    def output(self, *, tail: int = 80) -> str:
        if not self.log_path.exists():
            return "(no output)"
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-tail:])
