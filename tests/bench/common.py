"""What every benchmark shares: progress output, statistics, /proc readings, the machine.

psutil is not a dependency, so process figures come straight from ``/proc/<pid>/status``
(``VmRSS``) and ``/proc/<pid>/stat`` (``utime + stime``), which is what psutil reads too.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_T0 = time.monotonic()
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def progress(message: str) -> None:
    """One progress line on stderr (the table goes to stdout)."""
    elapsed = time.monotonic() - _T0
    print(f"[bench {elapsed:6.1f}s] {message}", file=sys.stderr, flush=True)


def percentile(values: Sequence[float], pct: float) -> float:
    """Nearest-rank percentile (no interpolation: every figure is a measured sample)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(pct / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def distribution(values: Sequence[float], *, digits: int = 1) -> dict[str, Any]:
    """n, min, p50, p95, p99, max, mean of ``values``."""
    if not values:
        return {"n": 0}
    return {
        "n": len(values),
        "min": round(min(values), digits),
        "p50": round(percentile(values, 50), digits),
        "p95": round(percentile(values, 95), digits),
        "p99": round(percentile(values, 99), digits),
        "max": round(max(values), digits),
        "mean": round(statistics.fmean(values), digits),
    }


def spread(values: Sequence[float], *, digits: int = 1) -> dict[str, Any]:
    """min / median / max of repeated runs."""
    return {
        "runs": len(values),
        "min": round(min(values), digits),
        "median": round(statistics.median(values), digits),
        "max": round(max(values), digits),
    }


# ----------------------------------------------------------------------- processes


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (its own threads, not its children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS


@dataclass
class CpuWindow:
    """CPU used by one process over a wall-clock window, as a % of one core."""

    pid: int
    cpu0: float = 0.0
    wall0: float = 0.0

    def start(self) -> CpuWindow:
        self.cpu0, self.wall0 = cpu_seconds(self.pid), time.monotonic()
        return self

    def percent(self) -> float:
        wall = time.monotonic() - self.wall0
        return 100.0 * (cpu_seconds(self.pid) - self.cpu0) / wall if wall > 0 else 0.0

    def cpu_used(self) -> float:
        return cpu_seconds(self.pid) - self.cpu0


MiB = 1024 * 1024


# ------------------------------------------------------------------------- machine


def machine() -> dict[str, Any]:
    """CPU model, core count, memory, kernel, Python and nats-server versions."""
    model = "unknown"
    flags_mhz = ""
    with open("/proc/cpuinfo") as f:  # noqa: PTH123 - tiny read
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("cpu MHz") and not flags_mhz:
                flags_mhz = line.split(":", 1)[1].strip()
    nproc = subprocess.run(["nproc"], capture_output=True, text=True, check=False).stdout.strip()
    free = subprocess.run(["free", "-m"], capture_output=True, text=True, check=False).stdout
    mem_total = ""
    for line in free.splitlines():
        if line.startswith("Mem:"):
            mem_total = f"{line.split()[1]} MiB"
    from clearance.natsserver import find_nats_server, nats_server_version

    try:
        nats_version = nats_server_version(find_nats_server())
    except Exception as exc:  # the report says so rather than failing
        nats_version = f"unknown ({exc})"
    return {
        "cpu_model": model,
        "cpu_mhz": flags_mhz,
        "nproc": int(nproc) if nproc.isdigit() else os.cpu_count(),
        "memory_total": mem_total,
        "free_m": free.rstrip(),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "python_impl": platform.python_implementation(),
        "nats_server": nats_version,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }
