"""Subprocess helpers for tests; the implementation is shared with ``clearance demo``."""

from __future__ import annotations

import json
from typing import Any

from clearance.processes import ServiceProcess, free_port, venv_script

__all__ = ["ServiceProcess", "free_port", "log_records", "venv_script"]


def log_records(process: ServiceProcess) -> list[dict[str, Any]]:
    """The JSON log records a service process wrote so far (other lines are skipped)."""
    if not process.log_path.exists():
        return []
    records = []
    for line in process.log_path.read_text(errors="replace").splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return records
