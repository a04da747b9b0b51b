"""The `clearance-tracker` command: --help, configuration errors, SIGTERM."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess

from tracker_support import Stack

from clearance_tracker.settings import TrackerSettings
from support.processes import venv_script


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [venv_script("clearance-tracker"), *args],
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_help_lists_every_setting() -> None:
    result = _run("--help")
    assert result.returncode == 0
    for f in dataclasses.fields(TrackerSettings):
        assert TrackerSettings.env_name(f.name) in result.stdout, f.name
    assert "OTEL_EXPORTER_OTLP_ENDPOINT" in result.stdout


def test_bad_environment_is_a_clear_error_with_exit_2() -> None:
    result = _run(env={"CLEARANCE_VERIFY_INTERVAL": "soon", "CLEARANCE_CLAIM_TIMEOUT": "5m"})
    assert result.returncode == 2
    assert "CLEARANCE_VERIFY_INTERVAL='soon'" in result.stderr
    assert "CLEARANCE_CLAIM_TIMEOUT" in result.stderr
    assert "Traceback" not in result.stderr


async def test_sigterm_shuts_down_in_order_with_exit_0(stack: Stack) -> None:
    proc = await stack.start_tracker()
    status, body = proc.http_get("/metrics")
    assert status == 200 and "clearance_tracker_teardowns_started_total" in body
    assert proc.terminate(timeout=15) == 0
    assert "Traceback" not in proc.output(tail=200)
    # the heartbeat was released: other replicas may take over at once
    kv = await stack.js.key_value("clearance-teardowns")
    keys: list[str] = []
    with contextlib.suppress(Exception):  # NoKeysError when the bucket is empty
        keys = await kv.keys()
    assert "replica.tracker-0" not in keys
