"""The Grafana dashboard of deploy/ as tests read it: its panels' queries, ready for Prometheus.

Grafana expands a few variables before it sends a query; :func:`expand` does the same with the
values the test chooses, following Grafana's rule for ``$__rate_interval``
(max(``$__interval`` + scrape interval, 4 x scrape interval)), so that every panel query can be
run against a real Prometheus exactly as Grafana would run it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy/base/observability/grafana-dashboard.json"
VARIABLE = re.compile(
    r"\$(__rate_interval|__interval|__range)\b|\$\{(__rate_interval|__interval|__range)\}"
)


@dataclass(frozen=True)
class PanelQuery:
    panel_id: int
    panel: str
    ref: str
    expr: str
    instant: bool


def load(path: Path = DASHBOARD) -> dict[str, Any]:
    dashboard: dict[str, Any] = json.loads(path.read_text())
    return dashboard


def panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """Every panel, those inside collapsed rows included."""
    out: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out.extend(panel.get("panels", []))
    return [p for p in out if p.get("type") != "row"]


def queries(dashboard: dict[str, Any]) -> list[PanelQuery]:
    return [
        PanelQuery(
            panel_id=panel["id"],
            panel=panel["title"],
            ref=target["refId"],
            expr=target["expr"],
            instant=bool(target.get("instant")) and not target.get("range", False),
        )
        for panel in panels(dashboard)
        for target in panel.get("targets", [])
    ]


def duration(seconds: float) -> str:
    millis = max(1, round(seconds * 1000))
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def expand(expr: str, *, interval: float, scrape_interval: float, range_: float) -> str:
    """`expr` with Grafana's interval variables replaced (seconds in, durations out)."""
    values = {
        "__interval": duration(interval),
        "__rate_interval": duration(max(interval + scrape_interval, 4 * scrape_interval)),
        "__range": duration(range_),
    }
    return VARIABLE.sub(lambda m: values[m.group(1) or m.group(2)], expr)
