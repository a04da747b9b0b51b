"""Child processes for local stacks: the demo and the end-to-end tests run real services.

Each service runs as its own process, configured only through its environment, exactly as a
Deployment runs it. A :class:`ServiceProcess` starts one, waits for its ``/readyz``, stops it
politely (SIGTERM), kills it (SIGKILL, to simulate a crash) and restarts it with the same
environment. Children are asked to die with their parent (Linux ``PR_SET_PDEATHSIG``) and are
stopped at interpreter exit, so Ctrl-C in the middle of a demo leaves nothing behind.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path

from clearance.natsserver import _die_with_parent, free_port

__all__ = ["ServiceProcess", "free_port", "venv_script"]

_LIVE: weakref.WeakSet[ServiceProcess] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit() -> None:
    for process in list(_LIVE):
        with contextlib.suppress(Exception):
            process.terminate(timeout=3)


def venv_script(name: str) -> str:
    """Path of a console script installed next to the running interpreter."""
    candidate = Path(sysconfig.get_path("scripts")) / name
    if candidate.exists():
        return str(candidate)
    return str(Path(sys.executable).parent / name)


class ServiceProcess:
    """One child process with its log file and (optionally) its health port."""

    def __init__(
        self,
        command: Sequence[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        http_port: int | None = None,
        inherit_env: bool = True,
    ) -> None:
        self.command = list(command)
        self.env = {**os.environ, **env} if inherit_env else dict(env)
        self.log_path = log_path
        self.http_port = http_port
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def name(self) -> str:
        return Path(self.command[0]).name

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> ServiceProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        preexec = (
            _die_with_parent
            if sys.platform.startswith("linux")
            and threading.current_thread() is threading.main_thread()
            else None
        )
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.command,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=preexec,  # only sets the parent-death signal
            )
        _LIVE.add(self)
        return self

    def http_get(self, path: str, *, timeout: float = 1.0) -> tuple[int, str]:
        if self.http_port is None:
            raise RuntimeError(f"{self.name} has no HTTP port")
        url = f"http://127.0.0.1:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return int(exc.code), exc.read().decode()

    def wait_ready(self, *, timeout: float = 30.0) -> None:
        """Poll ``/readyz`` until 200; raise with the log tail when it dies or times out."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                raise RuntimeError(f"{self.name} exited early:\n{self.output()}")
            with contextlib.suppress(OSError):
                status, _ = self.http_get("/readyz")
                if status == 200:
                    return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n{self.output()}")

    def terminate(self, *, timeout: float = 10.0) -> int:
        """SIGTERM and wait; SIGKILL after ``timeout``. Returns the exit code."""
        if self.process is None:
            return 0
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        _LIVE.discard(self)
        return int(self.process.returncode)

    def kill(self) -> None:
        """SIGKILL: a crash, with no chance to clean up."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        _LIVE.discard(self)

    def restart(self) -> ServiceProcess:
        self.kill()
        return self.start()

    def output(self, *, tail: int = 80) -> str:
        if not self.log_path.exists():
            return "(no output)"
        lines = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(lines[-tail:])
