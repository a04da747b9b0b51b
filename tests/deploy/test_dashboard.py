"""Issue #18 (dashboard, statically): the Grafana dashboard in deploy/ is well-formed, reads only
metrics the services export, every query is valid PromQL for the real promtool, kustomize ships it
as a ConfigMap Grafana's sidecar picks up, and the ServiceMonitor gives the scrape jobs the names
the alerts and the health panel select. That every query returns data from the running services
is shown by tests/e2e/test_prometheus.py.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from deploy_support import OVERLAYS, REPO, SERVICES, Obj, exported, find, one, render

from support import grafana
from support.prometheus import find_tool, metric_names, write_rules

PANEL_TYPES = frozenset({"timeseries", "stat", "heatmap"})
GRID_COLUMNS = 24


def test_dashboard_panels_have_unique_ids_titles_and_non_overlapping_places() -> None:
    dashboard = grafana.load()
    assert dashboard["uid"] and dashboard["title"] == "Clearance"
    panels = grafana.panels(dashboard)
    assert len({p["id"] for p in panels}) == len(panels)
    assert len({p["title"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for panel in panels:
        assert panel["type"] in PANEL_TYPES, panel["title"]
        assert panel["description"], panel["title"]
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["x"] + grid["w"] <= GRID_COLUMNS, panel["title"]
        mine = {
            (x, y)
            for x in range(grid["x"], grid["x"] + grid["w"])
            for y in range(grid["y"], grid["y"] + grid["h"])
        }
        assert not mine & cells, f"{panel['title']} overlaps another panel"
        cells |= mine


def test_every_query_uses_the_datasource_variable_and_exported_metrics() -> None:
    dashboard = grafana.load()
    [variable] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert variable["query"] == "prometheus"
    source = {"type": "prometheus", "uid": f"${{{variable['name']}}}"}
    for panel in grafana.panels(dashboard):
        assert panel["datasource"] == source, panel["title"]
        targets = panel["targets"]
        assert targets, panel["title"]
        assert len({t["refId"] for t in targets}) == len(targets), panel["title"]
        for target in targets:
            assert target["datasource"] == source, (panel["title"], target["refId"])
            used = metric_names(target["expr"])
            assert used or "up{" in target["expr"], (panel["title"], target["expr"])
            missing = [name for name in used if not exported(name)]
            assert not missing, f"{panel['title']}: {missing} exported by no service"


def test_every_query_is_valid_promql_for_promtool(tmp_path: Path) -> None:
    """Each query, Grafana's variables expanded, as a recording rule that `promtool check rules`
    parses (and a broken one is refused, so the check can fail)."""
    rules = [
        {
            "record": f"dashboard:panel_{q.panel_id}_{q.ref}",
            "expr": grafana.expand(q.expr, interval=15, scrape_interval=30, range_=3600),
        }
        for q in grafana.queries(grafana.load())
    ]
    assert not [r for r in rules if "$" in r["expr"]], "a Grafana variable was left unexpanded"
    for name, group in (("good", rules), ("broken", [{**rules[0], "expr": "sum(rate(x[1m])"}])):
        write_rules({"groups": [{"name": "dashboard", "rules": group}]}, tmp_path / f"{name}.yaml")
        result = subprocess.run(
            [find_tool("promtool"), "check", "rules", f"{name}.yaml"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if name == "good":
            assert result.returncode == 0, result.stdout + result.stderr
        else:
            assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def test_grafana_variables_expand_as_grafana_does() -> None:
    expr = "rate(x[$__rate_interval]) + increase(y[${__range}]) + z[$__interval]"
    assert grafana.expand(expr, interval=1, scrape_interval=0.5, range_=600) == (
        "rate(x[2s]) + increase(y[600s]) + z[1s]"
    )
    assert "[120s]" in grafana.expand(
        "rate(x[$__rate_interval])", interval=15, scrape_interval=30, range_=1
    )
    assert "[180s]" in grafana.expand(
        "rate(x[$__rate_interval])", interval=150, scrape_interval=30, range_=1
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_ships_the_dashboard_as_a_configmap_for_grafanas_sidecar(overlay: str) -> None:
    objs = render(f"overlays/{overlay}")
    [configmap] = [
        o for o in find(objs, "ConfigMap") if o["metadata"]["name"] == "clearance-grafana-dashboard"
    ]
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(configmap["data"]["clearance.json"]) == grafana.load()


def label_selects(selector: Obj, labels: dict[str, str]) -> bool:
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions", []):
        present = expression["key"] in labels
        value = labels.get(expression["key"])
        operator = expression["operator"]
        if operator == "In" and value not in expression["values"]:
            return False
        if operator == "NotIn" and value in expression["values"]:
            return False
        if operator == "Exists" and not present:
            return False
        if operator == "DoesNotExist" and present:
            return False
    return True


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_service_monitor_scrapes_the_three_metrics_services_as_the_alerts_name_their_jobs(
    overlay: str,
) -> None:
    objs = render(f"overlays/{overlay}")
    monitor = one(objs, "ServiceMonitor", "clearance")
    spec = monitor["spec"]
    assert spec["namespaceSelector"]["matchNames"] == ["clearance"]
    selected = [
        s
        for s in find(objs, "Service")
        if s["metadata"]["namespace"] == "clearance"
        and label_selects(spec["selector"], s["metadata"].get("labels", {}))
    ]
    assert sorted(s["metadata"]["name"] for s in selected) == sorted(
        f"clearance-{s}-metrics" for s in SERVICES
    )
    jobs = {s["metadata"]["labels"][spec["jobLabel"]] for s in selected}
    assert jobs == {f"clearance-{s}" for s in SERVICES}
    [endpoint] = spec["endpoints"]
    for service in selected:
        assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    assert endpoint["path"] == "/metrics"
    absent = rule_expr(objs, "ClearanceServiceAbsent")
    down = rule_expr(objs, "ClearanceServiceDown")
    for job in jobs:
        assert f'absent(up{{job="{job}"}})' in absent, f"ClearanceServiceAbsent misses {job}"
        assert job.removeprefix("clearance-") in down, f"ClearanceServiceDown misses {job}"


def rule_alerts(objs: list[Obj]) -> list[Obj]:
    [rule] = [o for o in objs if o["kind"] == "PrometheusRule"]
    return [r for group in rule["spec"]["groups"] for r in group["rules"] if "alert" in r]


def rule_expr(objs: list[Obj], name: str) -> str:
    [found] = [a["expr"] for a in rule_alerts(objs) if a["alert"] == name]
    return str(found)


def test_readme_lists_every_alert_and_every_dashboard_panel() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Operating it", 1)[1].split("\n## ", 1)[0]
    for name in [a["alert"] for a in rule_alerts(render("overlays/prod"))]:
        assert f"`{name}`" in section, f"README 'Operating it' does not list alert {name}"
    for panel in grafana.panels(grafana.load()):
        assert f"**{panel['title']}**" in section, f"README does not list panel {panel['title']}"
