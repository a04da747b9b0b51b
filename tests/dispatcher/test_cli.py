"""The ``clearance-dispatcher`` command: --help lists every setting; bad env exits 2."""

from __future__ import annotations

import dataclasses
import os
import subprocess

from tests.support.processes import venv_script

from clearance_dispatcher.settings import DispatcherSettings


def test_help_lists_every_setting() -> None:
    out = subprocess.run(
        [venv_script("clearance-dispatcher"), "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout
    for f in dataclasses.fields(DispatcherSettings):
        assert DispatcherSettings.env_name(f.name) in out, f.name
    assert "(undocumented)" not in out


def test_bad_environment_is_a_clear_error_and_exit_2() -> None:
    env = {
        **os.environ,
        "CLEARANCE_PAUSE_TIME": "soon",
        "CLEARANCE_HEAD_OF_LINE": "random",
        "CLEARANCE_LEASE_RETRY_PERIOD": "30s",
    }
    result = subprocess.run(
        [venv_script("clearance-dispatcher")], capture_output=True, text=True, timeout=30, env=env
    )
    assert result.returncode == 2
    assert "CLEARANCE_PAUSE_TIME='soon'" in result.stderr
    assert "CLEARANCE_HEAD_OF_LINE" in result.stderr
    assert "Traceback" not in result.stderr
