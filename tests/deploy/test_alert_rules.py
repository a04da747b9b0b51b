"""Acceptance 1 of issue #18: the alerts of deploy/ checked and unit-tested by the real promtool.

* ``promtool check rules`` accepts the ``spec.groups`` of the PrometheusRule rendered from each
  overlay (written out as a plain rule file);
* ``promtool test rules`` passes tests/deploy/data/alert-tests.yaml, which holds a quiet and a
  firing case for every alert (and a pending one for every alert with a ``for:``);
* the proof that those unit tests can fail: for every alert, each threshold moved up and down and
  its ``for:`` doubled and halved, in a temporary copy of the rules, makes promtool report
  ``FAILED`` for that alert — so a rule's threshold cannot change without a test noticing.

promtool comes from Debian's ``prometheus`` package (2.42 here; ``make install`` installs it).
When it is missing these tests fail and say how to install it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from deploy_support import DATA, DEPLOY, OVERLAYS, Obj, render

from support.prometheus import (
    alert,
    alerts,
    find_tool,
    rule_file,
    seconds,
    threshold_mutants,
    thresholds,
    with_for,
    with_threshold,
    write_rules,
)

RULE_SOURCE = DEPLOY / "base/observability/prometheusrule.yaml"
UNIT_TESTS = DATA / "alert-tests.yaml"
RULES_NAME = "clearance-rules.yaml"
"""The rule file name alert-tests.yaml loads (`rule_files`), written next to it."""


def source_rules() -> Obj:
    return rule_file(yaml.safe_load(RULE_SOURCE.read_text()))


ALERT_NAMES = [a["alert"] for a in alerts(source_rules())]


def rendered_rules(overlay: str) -> Obj:
    [rule] = [o for o in render(f"overlays/{overlay}") if o["kind"] == "PrometheusRule"]
    return rule_file(rule)


def unit_tests() -> Obj:
    tests: Obj = yaml.safe_load(UNIT_TESTS.read_text())
    return tests


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [find_tool("promtool"), *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def run_unit_tests(directory: Path, rules: Obj, tests: Obj) -> subprocess.CompletedProcess[str]:
    """`promtool test rules` on `tests` with `rules` as its rule file, in `directory`."""
    write_rules(rules, directory / RULES_NAME)
    (directory / "alert-tests.yaml").write_text(yaml.safe_dump(tests, sort_keys=False))
    return promtool("test", "rules", "alert-tests.yaml", cwd=directory)


def cases_of(tests: Obj, name: str) -> Obj:
    """Only the cases about alert `name` (a mutant is judged by its own alert's cases)."""
    groups = []
    for group in tests["tests"]:
        cases = [c for c in group.get("alert_rule_test", []) if c["alertname"] == name]
        if cases:
            groups.append({**group, "alert_rule_test": cases, "promql_expr_test": []})
    return {**tests, "tests": groups}


def only(rules: Obj, name: str) -> Obj:
    """A rule file holding alert `name` alone (its group's name kept)."""
    for group in rules["groups"]:
        for rule in group["rules"]:
            if rule.get("alert") == name:
                return {"groups": [{"name": group["name"], "rules": [rule]}]}
    raise AssertionError(f"no alert {name}")


@dataclass(frozen=True)
class Mutant:
    change: str
    rules: Obj


def mutants(rules: Obj, name: str) -> Iterator[Mutant]:
    """Alert `name` with each threshold moved up and down, and its `for:` doubled and halved."""
    rule = alert(rules, name)
    for index, value in enumerate(thresholds(rule["expr"])):
        for moved in threshold_mutants(value):
            yield Mutant(
                f"threshold #{index} {value:g} -> {moved:g}",
                with_threshold(rules, name, index, moved),
            )
    if "for" in rule:
        wait = seconds(rule["for"])
        for factor in (2.0, 0.5):
            yield Mutant(f"for {rule['for']} x{factor:g}", with_for(rules, name, wait * factor))


# ---------------------------------------------------------------------------------- tests


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_promtool_accepts_the_rules_rendered_from_each_overlay(
    overlay: str, tmp_path: Path
) -> None:
    rules = rendered_rules(overlay)
    assert rules == source_rules(), "kustomize changed the rules on the way"
    write_rules(rules, tmp_path / RULES_NAME)
    result = promtool("check", "rules", RULES_NAME, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    count = sum(len(g["rules"]) for g in rules["groups"])
    assert f"SUCCESS: {count} rules found" in result.stdout


def test_promtool_check_rules_refuses_a_broken_expression(tmp_path: Path) -> None:
    rules = source_rules()
    alert(rules, "ClearanceTeardownStuck")["expr"] = "sum(clearance_objects_stuck > 0"
    write_rules(rules, tmp_path / RULES_NAME)
    result = promtool("check", "rules", RULES_NAME, cwd=tmp_path)
    assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def test_every_alert_has_quiet_and_firing_unit_tests_and_no_test_names_a_missing_alert() -> None:
    cases = [c for g in unit_tests()["tests"] for c in g.get("alert_rule_test", [])]
    tested = {c["alertname"] for c in cases}
    assert tested == set(ALERT_NAMES), (
        f"untested: {set(ALERT_NAMES) - tested}, unknown: {tested - set(ALERT_NAMES)}"
    )
    for name in ALERT_NAMES:
        mine = sorted(
            (seconds(c["eval_time"]), bool(c["exp_alerts"]))
            for c in cases
            if c["alertname"] == name
        )
        firing = [t for t, fires in mine if fires]
        assert firing, f"{name}: no case in which it fires"
        assert any(not fires and t < firing[0] for t, fires in mine), (
            f"{name}: no quiet case before it first fires"
        )


def test_promtool_unit_tests_pass_for_every_alert(tmp_path: Path) -> None:
    result = run_unit_tests(tmp_path, rendered_rules("prod"), unit_tests())
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_promtool_fails_when_a_threshold_or_the_wait_of_the_alert_changes(
    name: str, tmp_path: Path
) -> None:
    rules = only(rendered_rules("prod"), name)
    tests = cases_of(unit_tests(), name)
    variants = [Mutant("unchanged", rules), *mutants(rules, name)]
    assert len(variants) > 1, f"{name} has no threshold and no wait to change"

    def run(index: int) -> subprocess.CompletedProcess[str]:
        directory = tmp_path / f"variant-{index}"
        directory.mkdir()
        return run_unit_tests(directory, variants[index].rules, tests)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(run, range(len(variants))))
    unchanged, *changed = results
    assert unchanged.returncode == 0, unchanged.stdout + unchanged.stderr
    survivors = []
    for mutant, result in zip(variants[1:], changed, strict=True):
        output = result.stdout + result.stderr
        caught = (
            result.returncode == 1
            and "FAILED:" in output
            and f"alertname: {name}," in output
            and "exp:" in output
            and "got:" in output
        )
        if not caught:
            survivors.append(f"{mutant.change}: promtool said\n{output}")
    assert not survivors, f"{name}: mutants the unit tests did not catch:\n" + "\n".join(survivors)
