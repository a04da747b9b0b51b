"""CLEARANCE_EVENT_LOOP: a service runs on uvloop unless told otherwise (issue 16), judged from
the outside — the libraries the running process has mapped."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from clearance.processes import venv_script

UNREACHABLE_NATS = "nats://127.0.0.1:1"
"""Nothing listens there: the service's loop runs, retrying, and says so on its log."""


def _mapped_libraries_once_running(env: dict[str, str]) -> str:
    """The tracker's /proc/PID/maps after its event loop logged its first line."""
    proc = subprocess.Popen(
        [venv_script("clearance-tracker")],
        env={**os.environ, **env, "CLEARANCE_NATS_URL": UNREACHABLE_NATS},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert "nats error" in first, first  # the loop is running
        return Path(f"/proc/{proc.pid}/maps").read_text()
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_a_service_runs_on_uvloop_by_default() -> None:
    assert "uvloop" in _mapped_libraries_once_running({"CLEARANCE_HTTP_PORT": "0"})


def test_a_service_runs_on_the_standard_loop_when_told() -> None:
    maps = _mapped_libraries_once_running(
        {"CLEARANCE_HTTP_PORT": "0", "CLEARANCE_EVENT_LOOP": "asyncio"}
    )
    assert "uvloop" not in maps


@pytest.mark.parametrize("value", ["libuv", "trio", ""])
def test_an_unknown_event_loop_is_refused_with_exit_2(value: str) -> None:
    done = subprocess.run(
        [venv_script("clearance-tracker")],
        env={**os.environ, "CLEARANCE_EVENT_LOOP": value},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "CLEARANCE_EVENT_LOOP" in done.stderr and "Traceback" not in done.stderr
