"""`clearance demo` as users run it: the narrated seed scenario, and nothing left behind.

The demo starts nats-server, kubesim and three services as child processes. These tests run the
real command in its own session (like a terminal would), then look through /proc for any
process still pointing at the demo's work directory (in its command line or environment).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from clearance.processes import venv_script


def leftovers(marker: str) -> list[str]:
    """Processes whose command line or environment mentions ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline or marker.encode() in environ:
            command = cmdline.replace(b"\0", b" ").decode(errors="replace")
            found.append(f"{entry.name}: {command}")
    return found


def start_demo(workdir: Path, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [venv_script("clearance"), "demo", "--workdir", str(workdir), *extra],
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def wait_gone(marker: str, *, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while (left := leftovers(marker)) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def test_demo_narrates_the_whole_cycle_and_exits_cleanly(tmp_path: Path) -> None:
    workdir, log = tmp_path / "demo", tmp_path / "demo.out"
    demo = start_demo(workdir, log, "--stuck-for", "8s")
    code = demo.wait(timeout=150)
    output = log.read_text()
    assert code == 0, output
    for step in (
        "requeued",
        "deletion.stuck",
        "deletion.forced",
        "cleared",
        "redispatched",
        "Running again",
        "requeues 1",
        "requeue.cycle",
    ):
        assert step in output, f"{step!r} missing from the demo output:\n{output}"
    order = [output.index(s) for s in ("requeued", "deletion.stuck", "cleared", "redispatched")]
    assert order == sorted(order), output
    assert wait_gone(str(workdir), timeout=5) == []


def test_ctrl_c_mid_demo_leaves_no_process_behind(tmp_path: Path) -> None:
    workdir, log = tmp_path / "demo", tmp_path / "demo.out"
    demo = start_demo(workdir, log)
    deadline = time.monotonic() + 60
    while "lose node" not in log.read_text() and time.monotonic() < deadline:
        assert demo.poll() is None, log.read_text()
        time.sleep(0.2)
    assert leftovers(str(workdir)), "the demo's processes should be running by now"
    os.killpg(demo.pid, signal.SIGINT)  # what Ctrl-C in a terminal does
    code = demo.wait(timeout=30)
    assert code == 130, log.read_text()
    assert wait_gone(str(workdir), timeout=10) == [], log.read_text()
