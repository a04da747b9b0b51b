"""The real Prometheus tools for tests: promtool and a Prometheus server, from Debian's package.

Owns three things the alert and dashboard tests share:

* finding ``promtool`` and ``prometheus`` (installed by ``make install`` through
  ``.ci/install-prometheus``); a missing binary is a test failure naming the install command,
  never a skip;
* rewriting the rules of ``deploy/``: extracting a PrometheusRule's ``spec.groups`` into a plain
  rule file, changing one alert's threshold or ``for:`` (the mutants that prove the promtool
  tests can fail), and compressing every duration by a factor (:func:`compress_durations`, the
  documented way the e2e test runs production rules against a scenario that lasts seconds);
* :class:`PrometheusServer`: ``prometheus`` on a free loopback port with a generated scrape
  config, queried over its HTTP API.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clearance.processes import free_port

INSTALL = (
    "run `make install` (it installs Debian's prometheus package where apt-get can), or as "
    "root: apt-get install -y --no-install-recommends prometheus"
)
Obj = dict[str, Any]


def find_tool(name: str) -> str:
    """The path of ``promtool`` or ``prometheus``; a clear error saying how to install it."""
    found = shutil.which(name) or (f"/usr/bin/{name}" if Path(f"/usr/bin/{name}").exists() else "")
    if not found:
        raise RuntimeError(f"{name} not found on PATH (Prometheus 2.42+ needed): {INSTALL}")
    return found


def tool_version(path: str) -> str:
    """``2.42.0`` from ``prometheus, version 2.42.0+ds (branch: …)``."""
    out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30)
    match = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    assert match, f"{path} --version said: {out.stdout}{out.stderr}"
    return match.group(1)


# ------------------------------------------------------------------------------ rules


def rule_file(prometheus_rule: Obj) -> Obj:
    """A PrometheusRule CR's ``spec.groups`` as the plain rule file Prometheus loads."""
    assert prometheus_rule["kind"] == "PrometheusRule"
    return {"groups": copy.deepcopy(prometheus_rule["spec"]["groups"])}


def write_rules(rules: Obj, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(rules, sort_keys=False))
    return path


def alerts(rules: Obj) -> list[Obj]:
    return [rule for group in rules["groups"] for rule in group["rules"] if "alert" in rule]


def alert(rules: Obj, name: str) -> Obj:
    [found] = [a for a in alerts(rules) if a["alert"] == name]
    return found


THRESHOLD = re.compile(r"(>=|<=|==|!=|>|<)(\s*\(?\s*)(-?\d+(?:\.\d+)?)")
"""A comparison against a number: `> 0`, `< 1`, `== 0`, `> (14.4 * 0.01)` (the first factor)."""
DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w|y)")
UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
RANGE = re.compile(r"\[([0-9a-z.]+)\]")
"""A range selector `[30m]` (the rules use no subqueries)."""


def thresholds(expr: str) -> list[float]:
    """The numbers an expression compares against, in order."""
    return [float(m.group(3)) for m in THRESHOLD.finditer(expr)]


def threshold_mutants(value: float) -> tuple[float, float]:
    """A threshold moved up and down far enough to change a test's outcome: ±1 for the small
    integers that compare counts (0, 1, 2), x2 and /2 otherwise."""
    if value.is_integer() and abs(value) <= 2:
        return value + 1, value - 1
    return value * 2, value / 2


def with_threshold(rules: Obj, name: str, index: int, value: float) -> Obj:
    """A copy of `rules` in which alert `name` compares against `value` at its `index`-th
    comparison."""
    value = float(value)
    out = copy.deepcopy(rules)
    target = alert(out, name)
    matches = list(THRESHOLD.finditer(target["expr"]))
    m = matches[index]
    number = repr(value) if not value.is_integer() else str(int(value))
    target["expr"] = target["expr"][: m.start(3)] + number + target["expr"][m.end(3) :]
    return out


def seconds(duration: str) -> float:
    """A Prometheus duration (`1h30m`, `500ms`) in seconds."""
    parts = DURATION.findall(duration)
    assert parts and "".join(n + u for n, u in parts) == duration, f"not a duration: {duration}"
    return sum(float(n) * UNITS[u] for n, u in parts)


def duration(value: float) -> str:
    """Seconds as a Prometheus duration (whole milliseconds)."""
    millis = max(1, round(value * 1000))
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def with_for(rules: Obj, name: str, value: float) -> Obj:
    """A copy of `rules` in which alert `name` waits `value` seconds (`for:`)."""
    out = copy.deepcopy(rules)
    alert(out, name)["for"] = duration(value)
    return out


def compress_durations(rules: Obj, *, factor: float, min_range: float, min_for: float = 0.0) -> Obj:
    """Every duration of the rules divided by `factor`: each `for:` (at least `min_for`) and each
    range selector `[30m]` (at least `min_range`, which should span several scrapes so that
    `rate`/`increase` have two samples). Thresholds, labels and annotations stay as they are.

    This is how a test runs the production rules against a scenario that lasts seconds: with
    factor 100, `for: 5m` becomes 3 s and `[30m]` becomes 18 s."""
    out = copy.deepcopy(rules)
    for rule in alerts(out):
        if "for" in rule:
            rule["for"] = duration(max(min_for, seconds(rule["for"]) / factor))
        rule["expr"] = RANGE.sub(
            lambda m: f"[{duration(max(min_range, seconds(m.group(1)) / factor))}]",
            rule["expr"],
        )
    return out


def metric_names(expr: str) -> set[str]:
    """The `clearance_*` metric names an expression (or a dashboard query) reads."""
    return set(re.findall(r"\b(clearance_[a-z0-9_]+)", expr))


# ------------------------------------------------------------------------------ server


@dataclass
class ScrapeTarget:
    job: str
    address: str
    """`host:port` serving /metrics."""


@dataclass
class PrometheusServer:
    """A Prometheus server on 127.0.0.1 with its own config, rules and TSDB under `workdir`."""

    workdir: Path
    targets: Sequence[ScrapeTarget]
    rules: Obj | None = None
    scrape_interval: float = 0.5
    evaluation_interval: float = 0.5
    port: int = 0
    process: subprocess.Popen[bytes] | None = None
    flags: Sequence[str] = field(default_factory=tuple)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.workdir / "prometheus.log"

    def config(self) -> Obj:
        scrape = duration(self.scrape_interval)
        config: Obj = {
            "global": {
                "scrape_interval": scrape,
                "scrape_timeout": duration(min(self.scrape_interval, 5.0) * 0.8),
                "evaluation_interval": duration(self.evaluation_interval),
            },
            "scrape_configs": [
                {"job_name": t.job, "static_configs": [{"targets": [t.address]}]}
                for t in self.targets
            ],
        }
        if self.rules is not None:
            config["rule_files"] = [str(write_rules(self.rules, self.workdir / "rules.yaml"))]
        return config

    def start(self, *, timeout: float = 30.0) -> PrometheusServer:
        binary = find_tool("prometheus")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        config = self.workdir / "prometheus.yml"
        config.write_text(yaml.safe_dump(self.config(), sort_keys=False))
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [
                    binary,
                    f"--config.file={config}",
                    f"--storage.tsdb.path={self.workdir / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=warn",
                    *self.flags,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
            )
        deadline = time.monotonic() + timeout
        while not self._answers("/-/ready"):
            if self.process.poll() is not None:
                raise RuntimeError(f"prometheus exited:\n{self.log.read_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"prometheus not ready after {timeout}s:\n{self.log.read_text()}"
                )
            time.sleep(0.05)
        return self

    def _answers(self, path: str) -> bool:
        try:
            with urllib.request.urlopen(self.url + path, timeout=1) as response:
                return int(response.status) == 200
        except (urllib.error.URLError, OSError):
            return False

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def api(self, path: str, params: Mapping[str, str | float] | None = None) -> Any:
        """GET /api/v1/<path>; the `data` of a successful answer."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=5) as r:
                body = json.loads(r.read())
        except urllib.error.HTTPError as exc:
            raise AssertionError(f"/api/v1/{path}{query}: {exc.code} {exc.read()!r}") from exc
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str, *, at: float | None = None) -> list[Obj]:
        params: dict[str, str | float] = {"query": expr}
        if at is not None:
            params["time"] = at
        data = self.api("query", params)
        assert data["resultType"] == "vector", data
        result: list[Obj] = data["result"]
        return result

    def query_range(self, expr: str, *, start: float, end: float, step: float) -> list[Obj]:
        data = self.api("query_range", {"query": expr, "start": start, "end": end, "step": step})
        result: list[Obj] = data["result"]
        return result

    def alerts(self) -> list[Obj]:
        result: list[Obj] = self.api("alerts")["alerts"]
        return result

    def targets_health(self) -> dict[str, str]:
        """Scrape job → health (`up`, `down`, `unknown`) of its active target."""
        active = self.api("targets", {"state": "active"})["activeTargets"]
        return {t["labels"]["job"]: t["health"] for t in active}

    def rule_health(self) -> dict[str, tuple[str, str]]:
        """Rule name → (health, last error) as the server evaluated it."""
        out: dict[str, tuple[str, str]] = {}
        for group in self.api("rules")["groups"]:
            for rule in group["rules"]:
                out[rule["name"]] = (rule["health"], rule.get("lastError", ""))
        return out
