"""Acceptance 2 and 3 of issue #18: a real Prometheus watches the seed scenario.

Debian's ``prometheus`` server runs on a free loopback port with a generated scrape config (one
job per service, ``clearance-watcher`` / ``-tracker`` / ``-dispatcher`` as the ServiceMonitor in
deploy/ names them) and the alert rules of deploy/. The seed scenario
(:func:`test_seed_scenario.drive`: a pod held by a finalizer on a lost node, stuck past the stuck
alert and the force deletion, then let go) runs once per module while a poller records what
``/api/v1/alerts`` says.

The rules run as shipped except for their durations: the scenario lasts seconds where production
deadlines are minutes, so :func:`support.prometheus.compress_durations` divides every ``for:`` and
range selector by :data:`COMPRESSION` (``for: 5m`` → 3 s, ``[30m]`` → 18 s), with ranges kept at
four scrapes or more. Thresholds, labels and annotations are untouched.

The dashboard's queries (every target of every panel, Grafana's ``$__rate_interval`` expanded as
Grafana would for this scrape interval) then run against the same Prometheus.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import pytest_asyncio
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from e2e_support import Scenario, dump_logs, eventually, failed, stack_config
from test_seed_scenario import FORCE, STUCK_ALERT, SeedRun, drive

from clearance.stack import SERVICES, LocalStack
from support import grafana
from support.prometheus import (
    PrometheusServer,
    ScrapeTarget,
    alert,
    compress_durations,
    rule_file,
    seconds,
    with_for,
    with_threshold,
)

REPO = Path(__file__).resolve().parents[2]
RULES = REPO / "deploy/base/observability/prometheusrule.yaml"
SCRAPE = 0.25
"""Scrape and rule evaluation interval (seconds)."""
COMPRESSION = 100
"""Every rule duration divided by this: the stuck alert's `for: 5m` becomes 3 s, so it goes
pending and then fires inside the seed scenario's hold (the pod stays stuck
`FORCE + HOLD_PAST_FORCE` = 9 s after the teardown started)."""
STUCK = "ClearanceTeardownStuck"
EXPECTED_FIRING = frozenset({STUCK, "ClearanceNodeLostHoldingObjects", "ClearanceForceDeletions"})
"""What the seed scenario should make fire, and nothing else."""
DECOY_THRESHOLD = "DecoyStuckThresholdRaised"
DECOY_WAIT = "DecoyStuckWaitTooLong"
"""Deliberately broken copies of the stuck alert, loaded next to the real rules, which the
lifecycle check must reject: one compares against 1 (one stuck pod never passes it), one waits
30 s (longer than the pod is held)."""
DECOY_METRIC = "clearance_objects_stuck_by_cause"
"""A misspelt metric name that a deliberately broken panel query uses."""

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@dataclass
class AlertLog:
    """Every state `/api/v1/alerts` reported, as (wall time, alert name, state) on change."""

    changes: list[tuple[float, str, str]] = field(default_factory=list)
    current: dict[str, str] = field(default_factory=dict)

    def observe(self, at: float, alerts: list[dict[str, object]]) -> None:
        now = {str(a["labels"]["alertname"]): str(a["state"]) for a in alerts}  # type: ignore[index]
        for name in sorted(set(now) | set(self.current)):
            state = now.get(name, "inactive")
            if self.current.get(name, "inactive") != state:
                self.changes.append((at, name, state))
        self.current = now

    def of(self, name: str) -> list[tuple[float, str]]:
        return [(at, state) for at, n, state in self.changes if n == name]

    def fired(self, *, since: float) -> set[str]:
        return {n for at, n, state in self.changes if state == "firing" and at >= since}


@dataclass
class PrometheusRun:
    seed: SeedRun
    prometheus: PrometheusServer
    alerts: AlertLog
    rules: dict[str, object]
    scenario_started: float
    ended: float


async def poll_alerts(prometheus: PrometheusServer, log: AlertLog, stop: asyncio.Event) -> None:
    while not stop.is_set():
        answer = await asyncio.to_thread(prometheus.alerts)
        log.observe(time.time(), answer)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.1)


def compressed_rules() -> dict[str, object]:
    return compress_durations(
        rule_file(yaml.safe_load(RULES.read_text())),
        factor=COMPRESSION,
        min_range=4 * SCRAPE,
    )


def with_decoys(rules: dict[str, object]) -> dict[str, object]:
    """`rules` plus a group of broken copies of the stuck alert (see DECOY_THRESHOLD)."""
    raised = with_threshold(rules, STUCK, 0, 1)
    slow = with_for(rules, STUCK, 30)
    decoys = [
        {**alert(raised, STUCK), "alert": DECOY_THRESHOLD},
        {**alert(slow, STUCK), "alert": DECOY_WAIT},
    ]
    groups = [*rules["groups"], {"name": "decoys", "rules": decoys}]  # type: ignore[misc]
    return {**rules, "groups": groups}


def lifecycle_violations(
    history: list[tuple[float, str]],
    *,
    deadline: float,
    wait: float,
    released: float,
    cleared: float,
    tolerance: float,
) -> list[str]:
    """What is wrong with an alert's observed states for one stuck teardown: it must go pending
    once the stuck `deadline` passed, fire `wait` later but before the pod was `released`, and
    resolve only after `cleared` (times in seconds since the epoch)."""
    states = [state for _, state in history]
    if states != ["pending", "firing", "inactive"]:
        return [f"states {states}, not pending → firing → inactive"]
    (pending_at, _), (firing_at, _), (resolved_at, _) = history
    problems = []
    if pending_at < deadline:
        problems.append(f"pending {deadline - pending_at:.2f}s before the stuck deadline")
    if firing_at - pending_at < wait - tolerance:
        problems.append(f"fired {firing_at - pending_at:.2f}s after pending, `for` is {wait}s")
    if firing_at >= released:
        problems.append(f"fired {firing_at - released:.2f}s after the pod was released")
    if resolved_at < cleared:
        problems.append(f"resolved {cleared - resolved_at:.2f}s before cleared")
    return problems


async def empty_queries(
    prometheus: PrometheusServer, queries: list[grafana.PanelQuery], *, start: float, end: float
) -> tuple[list[str], dict[str, list[str]]]:
    """Dashboard queries that return no series (instant query at `end`, or the range), and the
    panels none of whose queries has a finite non-zero sample over [start, end]."""
    step = 1.0
    empty: list[str] = []
    tried: dict[str, list[str]] = {}
    alive: set[str] = set()
    for query in queries:
        expr = grafana.expand(query.expr, interval=step, scrape_interval=SCRAPE, range_=end - start)
        where = f"[{query.ref}] {expr}"
        instant = await asyncio.to_thread(prometheus.query, expr, at=end)
        series = await asyncio.to_thread(
            prometheus.query_range, expr, start=start, end=end, step=step
        )
        if not instant or not series:
            empty.append(f"{query.panel} {where}")
        tried.setdefault(query.panel, []).append(where)
        if finite_nonzero(series):
            alive.add(query.panel)
    return empty, {panel: wheres for panel, wheres in tried.items() if panel not in alive}


def finite_nonzero(series: list[dict[str, object]]) -> bool:
    return any(
        math.isfinite(float(v)) and float(v) != 0.0
        for s in series
        for _, v in s["values"]  # type: ignore[attr-defined]
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def prometheus_run(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[PrometheusRun]:
    workdir = tmp_path_factory.mktemp("prometheus-seed")
    stack = LocalStack(stack_config(workdir / "stack", nodes=2))
    prometheus: PrometheusServer | None = None
    scenario: Scenario | None = None
    stop = asyncio.Event()
    poller: asyncio.Task[None] | None = None
    broken = False
    try:
        await stack.start()
        rules = with_decoys(compressed_rules())
        prometheus = PrometheusServer(
            workdir / "prometheus",
            [
                ScrapeTarget(f"clearance-{s}", f"127.0.0.1:{stack.services[s].http_port}")
                for s in SERVICES
            ],
            rules=rules,
            scrape_interval=SCRAPE,
            evaluation_interval=SCRAPE,
        )
        await asyncio.to_thread(prometheus.start)
        server = prometheus

        async def all_up() -> bool:
            health = await asyncio.to_thread(server.targets_health)
            return health == {f"clearance-{s}": "up" for s in SERVICES}

        await eventually(all_up, timeout=30, what="every service scraped by Prometheus")

        async def quiet() -> bool:
            # Until the first scrapes (Prometheus hands new targets to its scrapers after up to
            # 5 s), the compressed ClearanceServiceAbsent and ClearanceNoLeader fire, rightly.
            return not await asyncio.to_thread(server.alerts)

        await eventually(quiet, timeout=30, what="no alert active before the scenario")
        scenario = await Scenario.open(stack)
        log = AlertLog()
        poller = asyncio.create_task(poll_alerts(prometheus, log, stop))
        started = time.time()
        try:
            seed = await drive(scenario)

            async def resolved() -> bool:
                return STUCK not in log.current

            await eventually(resolved, timeout=30, what=f"{STUCK} to resolve")
        except BaseException:
            broken = True
            raise
        yield PrometheusRun(seed, prometheus, log, rules, started, time.time())
    finally:
        stop.set()
        if poller is not None:
            with contextlib.suppress(Exception):
                await poller
        if scenario is not None:
            await scenario.close()
        module_items = [
            i for i in request.session.items if getattr(i, "module", None) is request.module
        ]
        if broken or any(failed(i) for i in module_items):
            dump_logs(stack)
            if prometheus is not None:
                print(f"----- {prometheus.log} -----\n{prometheus.log.read_text()[-4000:]}")
        if prometheus is not None:
            prometheus.stop()
        await stack.stop()


def stuck_violations(run: PrometheusRun, name: str) -> list[str]:
    seed = run.seed
    wait = seconds(alert(run.rules, name)["for"])  # type: ignore[arg-type]
    teardown = seed.teardown.occurred_at.timestamp()
    return lifecycle_violations(
        run.alerts.of(name),
        deadline=teardown + STUCK_ALERT,
        wait=wait,
        released=seed.released_at,
        cleared=seed.cleared.cleared_at.timestamp(),
        tolerance=2 * SCRAPE,
    )


async def test_stuck_alert_pends_then_fires_while_the_pod_is_stuck_and_resolves_after_cleared(
    prometheus_run: PrometheusRun,
) -> None:
    run = prometheus_run
    assert seconds(alert(run.rules, STUCK)["for"]) == 3.0  # type: ignore[arg-type]
    assert stuck_violations(run, STUCK) == [], run.alerts.of(STUCK)
    teardown = run.seed.teardown.occurred_at.timestamp()
    (pending_at, _), (firing_at, _), (resolved_at, _) = run.alerts.of(STUCK)
    print(
        f"{STUCK}: pending {pending_at - teardown:.2f}s, firing {firing_at - teardown:.2f}s, "
        f"released {run.seed.released_at - teardown:.2f}s, resolved "
        f"{resolved_at - teardown:.2f}s after teardown.started (stuck deadline {STUCK_ALERT}s, "
        f"force {FORCE}s)"
    )


async def test_the_lifecycle_check_rejects_broken_copies_of_the_stuck_alert(
    prometheus_run: PrometheusRun,
) -> None:
    never = stuck_violations(prometheus_run, DECOY_THRESHOLD)
    assert never == ["states [], not pending → firing → inactive"], never
    late = stuck_violations(prometheus_run, DECOY_WAIT)
    assert late == ["states ['pending', 'inactive'], not pending → firing → inactive"], late


async def test_the_lifecycle_check_rejects_an_alert_early_late_or_resolved_too_soon() -> None:
    good = [(12.0, "pending"), (15.0, "firing"), (21.0, "inactive")]
    timing = {"deadline": 11.0, "wait": 3.0, "released": 19.0, "cleared": 20.0, "tolerance": 0.5}
    assert lifecycle_violations(good, **timing) == []
    early = [(10.0, "pending"), (15.0, "firing"), (21.0, "inactive")]
    assert lifecycle_violations(early, **timing) == ["pending 1.00s before the stuck deadline"]
    hasty = [(12.0, "pending"), (13.0, "firing"), (21.0, "inactive")]
    assert lifecycle_violations(hasty, **timing) == ["fired 1.00s after pending, `for` is 3.0s"]
    late = [(12.0, "pending"), (19.5, "firing"), (21.0, "inactive")]
    assert lifecycle_violations(late, **timing) == ["fired 0.50s after the pod was released"]
    soon = [(12.0, "pending"), (15.0, "firing"), (19.5, "inactive")]
    assert lifecycle_violations(soon, **timing) == ["resolved 0.50s before cleared"]


async def test_the_seed_scenario_fires_the_stuck_lost_node_and_force_alerts_and_nothing_else(
    prometheus_run: PrometheusRun,
) -> None:
    fired = prometheus_run.alerts.fired(since=prometheus_run.scenario_started)
    assert fired == EXPECTED_FIRING, prometheus_run.alerts.changes


async def test_every_rule_evaluates_without_error_against_the_real_metrics(
    prometheus_run: PrometheusRun,
) -> None:
    health = await asyncio.to_thread(prometheus_run.prometheus.rule_health)
    names = {
        r["alert"]
        for g in prometheus_run.rules["groups"]  # type: ignore[attr-defined]
        for r in g["rules"]
    }
    assert set(health) == names
    assert {n: h for n, h in health.items() if h[0] != "ok"} == {}


async def test_every_dashboard_panel_query_returns_data_from_the_scenario(
    prometheus_run: PrometheusRun,
) -> None:
    run = prometheus_run
    queries = grafana.queries(grafana.load())
    empty, dead = await empty_queries(
        run.prometheus, queries, start=run.scenario_started, end=run.ended
    )
    assert not empty, "queries that returned no series:\n" + "\n".join(empty)
    assert not dead, f"panels whose every query stayed 0 or NaN over the scenario: {dead}"
    assert {q.panel for q in queries} == {p["title"] for p in grafana.panels(grafana.load())}


async def test_the_dashboard_check_rejects_a_panel_reading_a_misspelt_metric(
    prometheus_run: PrometheusRun,
) -> None:
    run = prometheus_run
    [real] = [
        q for q in grafana.queries(grafana.load()) if "clearance_objects_stuck_diagnosed" in q.expr
    ]
    broken = dataclasses.replace(
        real,
        panel="broken copy",
        expr=real.expr.replace("clearance_objects_stuck_diagnosed", DECOY_METRIC),
    )
    empty, dead = await empty_queries(
        run.prometheus, [broken], start=run.scenario_started, end=run.ended
    )
    assert empty == [f"broken copy [{real.ref}] sum by (cause) ({DECOY_METRIC})"], empty
    assert list(dead) == ["broken copy"]
