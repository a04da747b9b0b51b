"""Benchmark 5 (the part that is not in the clearance run): what a service's idle RSS is made of.

Idle and loaded RSS/CPU of the three services are measured in the clearance-latency run. This
module explains the idle figure: a fresh interpreter imports, one after the other, what a
service imports, and ``VmRSS`` is read after each step, so each library's resident cost is
its increment.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

from .common import progress

STEPS = (
    "msgspec",
    "nats",
    "aiohttp",
    "prometheus_client",
    "opentelemetry.sdk.trace",
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "kubernetes_asyncio.client",
    "kubernetes_asyncio.config",
    "clearance.bus",
    "clearance.kube",
    "clearance_watcher.service",
    "clearance_tracker.service",
    "clearance_dispatcher.service",
)

_PROBE = """
import json, sys
def rss():
    with open('/proc/self/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1]) / 1024
out = [('python', rss())]
for name in sys.argv[1:]:
    __import__(name)
    out.append((name, rss()))
print(json.dumps(out))
"""


def import_costs(steps: tuple[str, ...] = STEPS) -> list[dict[str, Any]]:
    """RSS (MiB) after each cumulative import, and the increment of each step."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *steps], capture_output=True, text=True, check=True
    )
    rows = json.loads(result.stdout)
    out = []
    previous = 0.0
    for name, rss in rows:
        out.append(
            {"import": name, "rss_mib": round(rss, 1), "delta_mib": round(rss - previous, 1)}
        )
        previous = rss
    return out


def alone(module: str) -> float:
    """RSS increment of importing ``module`` alone into a bare interpreter (MiB)."""
    rows = import_costs((module,))
    return rows[-1]["delta_mib"]


def run() -> dict[str, Any]:
    progress("footprint: resident cost of each import of a service")
    return {
        "cumulative_imports": import_costs(),
        "kubernetes_asyncio_client_alone_mib": alone("kubernetes_asyncio.client"),
    }
