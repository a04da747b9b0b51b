"""The command line as users meet it: --help, bad configuration, orderly SIGTERM."""

from __future__ import annotations

import os
import subprocess

from support.processes import venv_script

WATCHER = venv_script("clearance-watcher")


def run(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [WATCHER, *args],
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "", **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_lists_every_setting_and_exits_0() -> None:
    result = run("--help")
    assert result.returncode == 0, result.stderr
    for variable in (
        "CLEARANCE_NATS_URL",
        "CLEARANCE_HTTP_PORT",
        "CLEARANCE_NAMESPACES",
        "KUBECONFIG",
        "CLEARANCE_WATCH_TIMEOUT",
        "CLEARANCE_INACTIVITY_TIMEOUT",
        "CLEARANCE_MAX_IN_FLIGHT",
        "CLEARANCE_LEADER_ELECTION",
        "CLEARANCE_LEASE_DURATION",
        "CLEARANCE_LEASE_IDENTITY",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ):
        assert variable in result.stdout


def test_bad_settings_print_one_line_per_variable_and_exit_2() -> None:
    result = run(CLEARANCE_WATCH_TIMEOUT="soon", CLEARANCE_MAX_IN_FLIGHT="0")
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2, result.stderr
    assert any("CLEARANCE_WATCH_TIMEOUT" in line for line in lines)
    assert any("CLEARANCE_MAX_IN_FLIGHT" in line for line in lines)
    assert "Traceback" not in result.stderr


async def test_sigterm_shuts_down_in_order_and_exits_0(start_watcher) -> None:
    watcher = start_watcher()
    assert watcher.terminate(timeout=15) == 0, watcher.output()
    messages = watcher.output(tail=40)
    assert "shutting down" in messages and "Traceback" not in messages
