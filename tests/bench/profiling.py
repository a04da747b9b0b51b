"""Profiles for the targets a run misses: pyinstrument sessions of a service or of this process.

A service is profiled by starting it under ``python -m pyinstrument`` (same environment, same
console script); it writes its session when it stops (SIGTERM → clean exit). Sessions are
summarised as the functions with the most *own* time, the idle event-loop wait excluded, so
the report can name what a core is busy with.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from clearance.processes import ServiceProcess, free_port, venv_script
from clearance.stack import LocalStack

# Frames that span the whole program: not informative in an inclusive ranking.
_WHOLE = ("main", "<module>", "_run", "_serve")
# Frames that are the event loop waiting for I/O, not work.
_IDLE = ("select", "poll", "epoll", "_run_once", "[await]", "[self]", "<module>")


class ProfiledStack(LocalStack):
    """A LocalStack whose ``profiled`` services run under pyinstrument."""

    def __init__(self, config: Any, *, profiled: Sequence[str], outdir: Path) -> None:
        super().__init__(config)
        self.profiled = set(profiled)
        self.outdir = outdir

    def session_path(self, name: str) -> Path:
        return self.outdir / f"{name}.pyisession"

    def _service(self, name: str, *, replica: int = 0) -> ServiceProcess:
        if name not in self.profiled:
            return super()._service(name, replica=replica)
        self.outdir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        command = [
            sys.executable, "-m", "pyinstrument", "--interval", "0.001",
            "-r", "session", "-o", str(self.session_path(name)),
            venv_script(f"clearance-{name}"),
        ]  # fmt: skip
        return ServiceProcess(
            command,
            env=self.service_environment(name, http_port=port),
            log_path=self.workdir / "logs" / f"{name}.log",
            http_port=port,
        )


def hot_functions(session_file: Path, *, top: int = 12) -> list[dict[str, Any]]:
    """The ``top`` functions by own (self) time in a saved session, idle wait excluded."""
    from pyinstrument.session import Session

    session = Session.load(str(session_file))
    return hot_from_session(session, top=top)


def hot_from_session(session: Any, *, top: int = 12) -> list[dict[str, Any]]:
    root = session.root_frame()
    if root is None:
        return []
    own: dict[tuple[str, str, int], float] = {}

    def walk(frame: Any) -> None:
        key = (frame.function or "?", frame.file_path_short or "", frame.line_no or 0)
        own[key] = own.get(key, 0.0) + frame.total_self_time
        for child in frame.children:
            walk(child)

    walk(root)
    busy = {k: v for k, v in own.items() if not any(k[0].startswith(i) for i in _IDLE)}
    total = sum(busy.values()) or 1.0
    ranked = sorted(busy.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return [
        {
            "function": f"{fn} ({path}:{line})",
            "self_s": round(seconds, 3),
            "share_of_busy": round(seconds / total, 3),
        }
        for (fn, path, line), seconds in ranked
    ]


def hot_subtrees(
    session_file: Path | Any, *, prefixes: Sequence[str], top: int = 12
) -> list[dict[str, Any]]:
    """Inclusive time of the project's own functions (paths under ``prefixes``)."""
    from pyinstrument.session import Session

    session = Session.load(str(session_file)) if isinstance(session_file, Path) else session_file
    root = session.root_frame()
    if root is None:
        return []
    inclusive: dict[str, float] = {}

    def walk(frame: Any, seen: frozenset[str]) -> None:
        path = frame.file_path or ""
        name = f"{frame.function} ({frame.file_path_short}:{frame.line_no})"
        wanted = any(p in path for p in prefixes) and frame.function not in _WHOLE
        if wanted and name not in seen:
            inclusive[name] = inclusive.get(name, 0.0) + frame.time
            seen = seen | {name}
        for child in frame.children:
            walk(child, seen)

    walk(root, frozenset())
    ranked = sorted(inclusive.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return [{"function": n, "inclusive_s": round(s, 3)} for n, s in ranked]
