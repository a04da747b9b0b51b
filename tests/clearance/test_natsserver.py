"""The embedded nats-server helper: found, versioned, ready, restartable, no orphans."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from nats.js.errors import NotFoundError

from clearance.natsserver import (
    NatsServer,
    NatsServerError,
    find_nats_server,
    free_port,
    nats_server_version,
)

EXPECTED_VERSION = "2.15.1"


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_binary_comes_from_the_venv_scripts_dir_with_the_pinned_version() -> None:
    import sysconfig

    binary = find_nats_server()
    assert binary.parent == Path(sysconfig.get_path("scripts"))
    assert nats_server_version(binary) == EXPECTED_VERSION


def test_a_bad_override_is_reported_by_name(tmp_path: Path) -> None:
    with pytest.raises(NatsServerError, match="CLEARANCE_NATS_SERVER_BIN"):
        find_nats_server(environ={"CLEARANCE_NATS_SERVER_BIN": str(tmp_path / "nope")})


def test_server_binds_loopback_and_serves_jetstream(nats_server_factory: Any) -> None:
    server = nats_server_factory()
    assert server.url == f"nats://127.0.0.1:{server.port}"
    assert server.running
    with socket.create_connection(("127.0.0.1", server.port), timeout=2) as sock:
        assert sock.recv(4096).startswith(b"INFO ")
    args = server.command()
    assert args[args.index("-a") + 1] == "127.0.0.1" and "-js" in args


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "store").start()
    pid = server.pid
    assert pid is not None and process_exists(pid)
    server.stop()
    assert not server.running
    assert not process_exists(pid)
    server.stop()  # idempotent


def test_start_failure_names_the_port_and_shows_the_log(
    nats_server_factory: Any, tmp_path: Path
) -> None:
    taken = nats_server_factory()
    clash = NatsServer(tmp_path / "clash", port=taken.port)
    with pytest.raises(NatsServerError, match=str(taken.port)):
        clash.start(timeout=5)
    assert not clash.running


def test_drawn_ports_sit_below_the_kernels_ephemeral_range() -> None:
    floor = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = {free_port() for _ in range(20)}
    assert all(10_000 <= port < floor for port in ports), ports


def test_a_first_start_that_loses_its_port_race_draws_new_ports(tmp_path: Path) -> None:
    server = NatsServer(tmp_path / "store")
    taken = server.monitor_port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        try:
            server.start()
            assert server.monitor_port != taken
            assert server.running
        finally:
            server.stop()


async def test_restart_keeps_the_store_and_the_port(
    nats_server_factory: Any, connect_nats: Any
) -> None:
    server = nats_server_factory()
    nc = await connect_nats(server.url)
    js = nc.jetstream()
    await js.add_stream(name="KEEP", subjects=["keep.>"])
    await js.publish("keep.a", b"1")
    old_pid, port = server.pid, server.port
    await server.arestart()
    assert server.pid != old_pid and server.port == port
    info = await js.stream_info("KEEP")  # the client reconnected by itself
    assert info.state.messages == 1


async def test_restart_with_a_wiped_store_forgets_streams(
    nats_server_factory: Any, connect_nats: Any
) -> None:
    server = nats_server_factory()
    nc = await connect_nats(server.url)
    js = nc.jetstream()
    await js.add_stream(name="GONE", subjects=["gone.>"])
    await server.arestart(wipe_store=True)
    with pytest.raises(NotFoundError):
        await js.stream_info("GONE")


def test_wiping_a_running_server_is_refused(nats_server_factory: Any) -> None:
    server = nats_server_factory()
    with pytest.raises(NatsServerError, match="running"):
        server.wipe_store()


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for an adoptive parent to reap it counts as gone)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    script = (
        "import sys, time; from pathlib import Path; "
        "from clearance.natsserver import NatsServer; "
        f"s = NatsServer(Path({str(tmp_path / 'store')!r})).start(); "
        "print(s.pid, flush=True); time.sleep(60)"
    )
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert _alive(child)
        parent.kill()  # SIGKILL: no atexit, no cleanup code runs in the parent
        parent.wait(timeout=5)
        deadline = time.monotonic() + 5
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child), "nats-server outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
