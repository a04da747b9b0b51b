"""The rack-loss rows of the report: its acceptance targets and its figures (issue 16)."""

from __future__ import annotations

import json
from typing import Any


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _dist(d: dict[str, Any] | None, unit: str = "s") -> str:
    if not d or not d.get("n"):
        return "n/a"
    return f"n {d['n']}: min {d['min']} / p50 {d['p50']} / p99 {d['p99']} / max {d['max']} {unit}"


def targets(r: dict[str, Any] | None, add: Any, strict: dict[str, Any] | None = None) -> None:
    """Acceptance 4: rack loss (tests/bench/rack_loss.py); ``strict``: the same storm against
    a server granting half the clients' rate, which judges the answers to 429s."""
    if not r or "error" in r:
        add(
            "rack_loss",
            "rack loss: every AppWrapper redispatched ≤ 10 s after its force deadline",
            None,
            "",
            (r or {}).get("error", "not run"),
            None if not r else False,
        )
        return  # fmt: skip
    c = r.get("config", {})
    if "setup_requests" in r:
        add(
            "rack_loss",
            f"rack loss ({c.get('nodes')} nodes, {c.get('appwrappers')} x "
            f"{c.get('pods')} pods): every AppWrapper redispatched ≤ 10 s after its force "
            "deadline",
            None,
            "",
            "; ".join(r.get("failures", [])),
            False,
        )
        return  # fmt: skip
    size = f"{c.get('nodes')} nodes, {c.get('appwrappers')} x {c.get('pods')} pods, "
    size += f"{c.get('lost')} lost"
    worst = _get(r, "force_deadline_to_last_redispatch_create_s", "max")
    add(
        "rack_redispatch",
        f"rack loss ({size}): force deadline → last attempt-N+1 pod created (API commit), "
        "worst AppWrapper",
        worst,
        "s",
        "≤ 10 s, every one",
        None if worst is None else worst <= 10 and not r.get("not_redispatched"),
    )
    add(
        "rack_cleared",
        "rack loss: force deadline → cleared stored (JetStream), worst AppWrapper",
        _get(r, "force_deadline_to_cleared_s", "max"),
        "s",
        "(reported)",
        None,
    )
    add(
        "rack_safety",
        "rack loss: safety violations (S1 + S2 over the write history)",
        r.get("safety_violation_count"),
        "",
        "0",
        r.get("safety_violation_count") == 0,
    )
    _manners(r, add, key="rack_rate", what="rack loss", need_429s=not strict)
    if not strict or "error" in strict or "setup_requests" in strict:
        return
    sc = strict.get("config", {})
    where = (
        f"rack loss at {sc.get('nodes')} nodes x {sc.get('appwrappers')} gangs, server at "
        f"{sc.get('server_qps')}/s per client"
    )
    _manners(strict, add, key="rack_rate_429", what=where, need_429s=True)
    add(
        "rack_redispatch_429",
        f"{where}: force deadline → last attempt-N+1 pod created, worst AppWrapper",
        _get(strict, "force_deadline_to_last_redispatch_create_s", "max"),
        "s",
        "(reported: requests ÷ the rate the server grants)",
        None,
    )


def _manners(r: dict[str, Any], add: Any, *, key: str, what: str, need_429s: bool = False) -> None:
    """Each service within its client limit, every 429 retried only after its Retry-After
    (and, where the run is meant to provoke them, some 429s to show it)."""
    c = r.get("config", {})
    rates = r.get("api_requests", {})
    manners = [f for f in r.get("failures", []) if f.split(":")[0] in rates]
    peaks = ", ".join(f"{n} {v['peak_per_s']}/s" for n, v in rates.items())
    answered = r.get("answered_429_total")
    add(
        key,
        f"{what}: peak API requests per service in any 1 s ({peaks}) within qps "
        f"{c.get('qps')}, burst {c.get('burst')}; 429s answered after Retry-After",
        answered,
        "429s",
        "within the limit, no early retry" + (", some 429s" if need_429s else ""),
        not manners and (bool(answered) or not need_429s),
    )


def rows(r: dict[str, Any] | None, *, name: str = "6 rack loss") -> list[tuple[str, str, str]]:
    """(benchmark, figure, value) rows of one rack-loss run."""
    if not r:
        return []
    if "error" in r:
        return [(name, "error", r["error"])]
    c = r.get("config", {})
    if "setup_requests" in r:
        out = [(name, "FAILED setup", "; ".join(r.get("failures", [])))]
        for svc, kinds in r["setup_requests"].items():
            top = list(kinds.items())[:5]
            text = ", ".join(f"{k} {v['count']} x {v['mean_ms']}" for k, v in top)
            out.append((name, f"setup: {svc} requests (count x mean server ms)", text))
        for proc, v in (r.get("setup_processes") or {}).items():
            text = f"{v['cpu_mean_percent_of_core']} | {v['cpu_peak_percent_of_core']}"
            out.append((name, f"setup: {proc} CPU % of a core, mean | peak 1 s", text))
        return out
    out = [
        (name, "size", f"{c.get('nodes')} nodes ({c.get('max_pods')} pods max each), "
         f"{c.get('appwrappers')} AppWrappers x {c.get('pods')} pods, {c.get('lost')} nodes lost "
         f"at once; force deadline {c.get('force_seconds')} s; setup {r.get('setup_running_s')} s"),
        (name, "gangs torn down / forced / held past the deadline / cleared",
         f"{r.get('teardowns')} / {r.get('forced')} / {r.get('held_past_force_deadline')} / "
         f"{r.get('cleared')}"),
        (name, "force deadline → cleared stored", _dist(r.get("force_deadline_to_cleared_s"))),
        (name, "force deadline → first attempt-N+1 pod committed",
         _dist(r.get("force_deadline_to_first_redispatch_create_s"))),
        (name, "force deadline → last attempt-N+1 pod committed",
         _dist(r.get("force_deadline_to_last_redispatch_create_s"))),
        (name, "first force deadline → last cleared",
         f"{r.get('last_cleared_after_first_deadline_s')} s"),
        (name, "storm (loss → every gang back, settled)", f"{r.get('storm_seconds')} s"
         + ("" if r.get("settled") else " - DID NOT SETTLE")),
        (name, "safety violations (S1 + S2)", str(r.get("safety_violation_count"))),
        (name, "client limit per service / kubesim limit per User-Agent",
         f"qps {c.get('qps')} burst {c.get('burst')} / {c.get('server_qps')}/s burst "
         f"{c.get('server_burst')}"),
    ]  # fmt: skip
    for svc, v in (r.get("api_requests") or {}).items():
        out.append((name, f"{svc}: API requests in the storm, mean | peak 1 s | 429s",
                    f"{v['mean_per_s']}/s | {v['peak_per_s']} (allowed {v['peak_allowed_per_s']}) "
                    f"| {v['answered_429']} (wait after 429: {_dist(v.get('retry_wait_s'))}; "
                    f"early {v['retried_before_retry_after']})"))  # fmt: skip
        top = list((v.get("in_storm_by_verb") or {}).items())[:6]
        out.append((name, f"{svc}: requests by verb", ", ".join(f"{k} {n}" for k, n in top)))
    n = r.get("nats_messages_per_s") or {}
    nats = f"{n.get('in_mean')} ({n.get('in_peak')}) | {n.get('out_mean')} ({n.get('out_peak')})"
    out.append((name, "NATS messages/s in | out, mean (peak 1 s)", nats))
    for proc, v in (r.get("processes") or {}).items():
        out.append((name, f"{proc}: CPU % of a core peak 1 s | mean; RSS peak",
                    f"{v['cpu_peak_percent_of_core']} | {v['cpu_mean_percent_of_core']}; "
                    f"{v['rss_peak_mib']} MiB"))  # fmt: skip
    if r.get("failures"):
        out.append((name, "FAILED checks", json.dumps(r["failures"])))
    return out
