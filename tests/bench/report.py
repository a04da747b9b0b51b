"""The acceptance table, the console table and docs/benchmarks.md, from one run's results."""

from __future__ import annotations

import json
from typing import Any

from . import rack_report
from .analysis import NOTES, OBSERVATIONS


def _get(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each acceptance target of issue #9: the figure, the threshold, met or not."""
    out: list[dict[str, Any]] = []

    def add(tid: str, what: str, value: Any, unit: str, target: str, met: bool | None) -> None:
        out.append(
            {"id": tid, "target": what, "value": value, "unit": unit, "threshold": target,
             "met": met}
        )  # fmt: skip

    c = results.get("clearance", {})
    p99 = _get(c, "deleted_to_redispatch_create_ms", "p99")
    add(
        "redispatch_p99",
        "last old object removed → attempt N+1 created, p99 (API commits, pause 0; steady state)",
        p99,
        "ms",
        "≤ 50 ms",
        None if p99 is None else p99 <= 50,
    )
    cleared_p99 = _get(c, "deleted_to_cleared_ms", "p99")
    add(
        "cleared_p99",
        "last old object removed (API commit) → cleared stored (JetStream), p99 (steady state)",
        cleared_p99,
        "ms",
        "≤ 20 ms",
        None if cleared_p99 is None else cleared_p99 <= 20,
    )
    for pct, tid in ((50, "speedup"), (99, "speedup_p99")):
        ratio = _get(c, "speedup", f"p{pct}_measured_baseline_vs_cleared")
        add(
            tid,
            f"last old object removed → confirmed, p{pct}: 5 s polling ÷ Clearance (cleared)",
            ratio,
            "x",
            "≥ 100x",
            None if ratio is None else ratio >= 100,
        )
    w = results.get("watcher", {})
    decode = _get(w, "decode_events_per_cpu_s", "median")
    add(
        "watcher_rate",
        "watcher decode path, events/s per core (median of runs)",
        decode,
        "events/s/core",
        "≥ 20,000",
        None if decode is None else decode >= 20_000,
    )
    publish = _get(w, "decode_publish", "events_per_s", "median")
    add(
        "watcher_publish",
        "watcher decode + publish (PubAck, order per object), events/s wall (median of runs)",
        publish,
        "events/s",
        "≥ 20,000",
        None if publish is None else publish >= 20_000,
    )
    vs = _get(w, "decode_vs_model_per_core", "median")
    add(
        "watcher_vs_model",
        "watcher decode path ÷ kubernetes-asyncio model path (per core)",
        vs,
        "x",
        "≥ 10x",
        None if vs is None else vs >= 10,
    )
    t = results.get("tracker", {})
    last = _get(t, "last_deletion_to_last_cleared_s")
    n = _get(t, "teardowns")
    add(
        "teardowns",
        f"{n or 1000} teardowns x {_get(t, 'pods_per_teardown') or 8} pods: "
        "last deletion → last cleared",
        last,
        "s",
        "≤ 5 s",
        None if last is None else (last <= 5 and bool(_get(t, "all_cleared"))),
    )
    per_object = _get(t, "rss_bytes_per_tracked_object")
    add(
        "tracker_memory",
        "tracker RSS per tracked object",
        per_object,
        "bytes",
        "≤ 2 KB (2,048 B)",
        None if per_object is None else per_object <= 2048,
    )
    sizes = _get(results, "tracker_growth", "by_size") or []
    top = max((r for r in sizes if "error" not in r), key=lambda r: r["teardowns"], default=None)
    if top is not None and top["teardowns"] > (n or 0):
        factor = top["per_object_time_growth"]
        add(
            "tracker_growth",
            f"{top['teardowns']:,} x 8 teardowns complete; per-object time vs "
            f"{sizes[0].get('teardowns')} x 8 (1.0 = linear total time, 25% noise margin)",
            factor,
            "x",
            "≤ 1.25x, all cleared",
            bool(top["all_cleared"]) and factor <= 1.25,
        )
        add(
            "tracker_memory_top",
            f"tracker RSS per tracked object at {top['teardowns']:,} x 8",
            top["rss_bytes_per_tracked_object"],
            "bytes",
            "≤ 2 KB (2,048 B)",
            top["rss_bytes_per_tracked_object"] <= 2048,
        )
    rack_report.targets(results.get("rackloss"), add, results.get("rackloss_429"))
    d = results.get("dispatcher", {})
    big = next((q for q in d.get("by_queue_length", []) if q.get("queued") == 20_000), None)
    scan = _get(big, "scan_ms", "median")
    add(
        "dispatcher_pass",
        "dispatcher: one decision pass over 20,000 queued AppWrappers (CPU ms, median)",
        scan,
        "ms",
        "≤ 100 ms",
        None if scan is None else scan <= 100,
    )
    return out


SERVICES = ("watcher", "tracker", "dispatcher")


def _mark(met: bool | None) -> str:
    return {True: "met", False: "NOT MET", None: "n/a"}[met]


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        if value.is_integer() and abs(value) >= 100:
            return f"{int(value):,}"
        return f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _dist(d: Any, unit: str = "ms") -> str:
    if not isinstance(d, dict) or not d.get("n"):
        return "-"
    return (
        f"p50 {_fmt(d['p50'])} / p95 {_fmt(d['p95'])} / p99 {_fmt(d['p99'])} {unit} "
        f"(min {_fmt(d['min'])}, max {_fmt(d['max'])}, n={d['n']})"
    )


def _spread(d: Any, unit: str = "") -> str:
    if not isinstance(d, dict) or "median" not in d:
        return "-"
    return (
        f"{_fmt(d['median'])}{unit} (min {_fmt(d['min'])}, max {_fmt(d['max'])}, {d['runs']} runs)"
    )


def _api_rows(api: dict[str, Any]) -> list[tuple[str, str, str]]:
    """API requests per service during the clearance load (kubesim's flow control)."""
    if not api:
        return []
    limit = api.get("server_limit") or {}
    rows = [
        ("1 clearance", "API server limit (kubesim, 429 + Retry-After above it)",
         f"{limit.get('rateLimit')} req/s burst {limit.get('rateBurst')} per "
         f"{limit.get('rateScope')}; services' client limit "
         f"{api.get('client_qps')}/s burst {api.get('client_burst')} (set by the benchmark)"),
    ]  # fmt: skip
    cycles = (api.get("cycles_per_second") or 0) * (api.get("seconds") or 0)
    for name, s in (api.get("by_service") or {}).items():
        per_cycle = f", {s['requests'] / cycles:.1f} per cycle" if cycles else ""
        mix = ", ".join(f"{what} {n}" for what, n in list(s.get("by_request", {}).items())[:8])
        rows.append((
            "1 clearance", f"  API requests of {name}",
            f"{s['requests']} in {api.get('seconds')} s{per_cycle}: mean {s['mean_per_s']}/s, "
            f"peak {s['peak_per_s']}/s (1 s samples), 429s {s['rejected_429']}"
            + (f" ({mix})" if mix else ""),
        ))  # fmt: skip
    return rows


def figures(data: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(benchmark, figure, value) rows of everything measured."""
    r = data["results"]
    rows: list[tuple[str, str, str]] = []
    c = r.get("clearance", {})
    if "error" in c:
        rows.append(("1 clearance", "error", c["error"]))
    elif c:
        rows += [
            ("1 clearance", "cycles measured (AppWrappers in parallel)",
             f"{c['cycles_measured']} ({c['appwrappers_in_parallel']}), "
             f"{c['cycles_per_second']} cycles/s"
             + ("" if c.get("finished") else " - DID NOT FINISH: "
                + json.dumps(c.get("stall_diagnostics", {})))),
            ("1 clearance", "last old object removed → cleared stored",
             _dist(c["deleted_to_cleared_ms"])),
            ("1 clearance", "  warm-up cycles apart (each AppWrapper's first "
             f"{c.get('warmup_cycles_per_appwrapper', '?')}, not in the targets)",
             _dist(c.get("warmup_deleted_to_cleared_ms", {}))),
            ("1 clearance", "  every cycle together (warm-up included)",
             _dist(c.get("all_cycles_deleted_to_cleared_ms", {}))),
            ("1 clearance", "  of which removed → pod DELETED event stored (watcher)",
             _dist(_get(c, "deleted_to_cleared_hops_ms", "removed_to_deleted_event_stored"))),
            ("1 clearance", "  of which DELETED event stored → cleared stored (tracker)",
             _dist(_get(c, "deleted_to_cleared_hops_ms",
                        "deleted_event_stored_to_cleared_stored"))),
            ("1 clearance", "last old object removed → attempt N+1 created",
             _dist(c["deleted_to_redispatch_create_ms"])),
            ("1 clearance", "  warm-up cycles apart (not in the targets)",
             _dist(c.get("warmup_deleted_to_redispatch_create_ms", {}))),
            ("1 clearance", "  every cycle together (warm-up included)",
             _dist(c.get("all_cycles_deleted_to_redispatch_create_ms", {}))),
            ("1 clearance", "cleared stored → attempt N+1 created",
             _dist(c["cleared_to_redispatch_create_ms"])),
            ("1 clearance", "  of which cleared → first dispatcher status write",
             _dist(_get(c, "dispatcher_breakdown_ms", "cleared_stored_to_first_status_write"))),
            ("1 clearance", "  of which last status write → pod created",
             _dist(_get(c, "dispatcher_breakdown_ms", "last_status_write_to_pod_created"))),
            ("1 clearance", "  dispatcher status writes per redispatch",
             _dist(_get(c, "dispatcher_breakdown_ms", "status_writes_per_redispatch"), "")),
            ("1 baseline", "5 s polling: last old object removed → confirmed (measured)",
             _dist(_get(c, "baseline_poll_5s", "measured_deleted_to_confirmed_ms"))),
            ("1 baseline", "5 s polling: analytical (P - deletion delay, every cycle)",
             _dist(_get(c, "baseline_poll_5s", "analytical_deleted_to_confirmed_ms"))),
            ("1 baseline", "polling ÷ Clearance, p50 | p99 (→ cleared)",
             f"{_fmt(_get(c, 'speedup', 'p50_measured_baseline_vs_cleared'))}x | "
             f"{_fmt(_get(c, 'speedup', 'p99_measured_baseline_vs_cleared'))}x"),
            ("1 baseline", "polling ÷ Clearance, p50 | p99 (→ redispatch create)",
             f"{_fmt(_get(c, 'speedup', 'p50_measured_baseline_vs_redispatch'))}x | "
             f"{_fmt(_get(c, 'speedup', 'p99_measured_baseline_vs_redispatch'))}x"),
            ("1 clearance", "clock-order errors (pairs not timed, expected 0)",
             json.dumps(c.get("clock_order_errors", {}))),
            ("1 clearance", "safety violations (N+1 created before N gone)",
             str(len(c.get("safety_violations", [])))),
        ]  # fmt: skip
        rows += _api_rows(c.get("api_requests") or {})
    w = r.get("watcher", {})
    if "error" in w:
        rows.append(("2 watcher", "error", w["error"]))
    elif w:
        p = w["decode_publish"]
        rows += [
            ("2 watcher", f"decode path, events/s per core ({w['line_bytes_avg']} B lines)",
             _spread(w["decode_events_per_cpu_s"])),
            ("2 watcher", "decode path, events/s wall", _spread(w["decode_events_per_s"])),
            ("2 watcher", "kubernetes-asyncio V1Pod model path, events/s per core",
             _spread(w["model_events_per_cpu_s"])),
            ("2 watcher", "decode ÷ model (per core)", _spread(w["decode_vs_model_per_core"], "x")),
            ("2 watcher", "decode + publish (PubAck), events/s wall",
             _spread(p["events_per_s"])),
            ("2 watcher", "decode + publish, events per CPU-s of the watcher side",
             _spread(p["events_per_cpu_s_watcher_side"])),
            ("2 watcher", "stored in JetStream / published",
             f"{p['stored_in_jetstream']:,} / {p['expected_stored']:,}"),
        ]  # fmt: skip
    t = r.get("tracker", {})
    if "error" in t:
        rows.append(("3 tracker", "error", t["error"]))
    elif t:
        rows += [
            ("3 tracker", "teardowns x pods (tracked objects)",
             f"{t['teardowns']:,} x {t['pods_per_teardown']} ({t['tracked_objects']:,})"),
            ("3 tracker", "API deletion of every pod (kubesim, before t0)",
             f"{t['api_deletion_seconds']} s"),
            ("3 tracker", "DELETED events injected into NATS after t0",
             f"{t['injection_seconds']} s"),
            ("3 tracker", "last deletion → last cleared",
             f"{t['last_deletion_to_last_cleared_s']} s"),
            ("3 tracker", "last deletion → each cleared", _dist(t["last_deletion_to_cleared_ms"])),
            ("3 tracker", "tracker CPU during the burst",
             f"{t['tracker_cpu_seconds_during_burst']} s"),
            ("3 tracker", "tracker RSS idle → tracking → after burst",
             f"{t['tracker_rss_idle_mib']} → {t['tracker_rss_tracking_mib']} → "
             f"{t['tracker_rss_after_burst_mib']} MiB"),
            ("3 tracker", "RSS per tracked object (per teardown)",
             f"{t['rss_bytes_per_tracked_object']:,} B ({t['rss_bytes_per_teardown']:,} B)"),
        ]  # fmt: skip
    g = r.get("tracker_growth", {})
    if isinstance(g, dict) and "error" in g:
        rows.append(
            (
                "3 tracker growth",
                "error",
                f"{g['error']} - " + NOTES["tracker_growth"]["bottleneck"],
            )
        )
    for row in g.get("by_size", []) if isinstance(g, dict) else []:
        if "error" in row:
            rows.append(("3 tracker growth", f"{row.get('teardowns')} teardowns", row["error"]))
            continue
        rows.append(
            (
                "3 tracker growth",
                f"{row['teardowns']:,} x 8 ({row['tracked_objects']:,} objects)",
                f"last cleared {row['last_deletion_to_last_cleared_s']} s"
                f"{'' if row['all_cleared'] else ' (NOT all cleared)'}; "
                f"{row['us_per_object']} µs/object (x{row['per_object_time_growth']}), "
                f"CPU {row['cpu_us_per_object']} µs/object (x{row['per_object_cpu_growth']}); "
                f"RSS {row['rss_bytes_per_tracked_object']:,} B/object",
            )
        )
    d = r.get("dispatcher", {})
    if "error" in d:
        rows.append(("4 dispatcher", "error", d["error"]))
    elif d:
        for q in d["by_queue_length"]:
            rows.append(
                (
                    "4 dispatcher",
                    f"{q['queued']:,} queued: decisions/s per core (scan ms)",
                    f"{_spread(q['decisions_per_s'])}; scan {_spread(q['scan_ms'], ' ms')}; "
                    f"{q['us_per_queued_appwrapper']} µs per AppWrapper "
                    f"(x{q.get('per_item_growth_vs_500')} the 500 per-item cost); "
                    f"{q.get('bytes_per_queued_appwrapper', '-')} B held per AppWrapper",
                )
            )
    f = _get(c, "footprint")
    if f:
        for name in (*SERVICES, "kubesim", "nats-server"):
            idle, loaded = f["idle"].get(name), f["loaded"].get(name)
            if idle and loaded:
                rows.append(
                    (
                        "5 footprint",
                        name,
                        f"idle {idle['rss_mib']} MiB, {idle['cpu_percent_of_core']}% CPU; "
                        f"loaded peak {loaded['rss_peak_mib']} MiB, "
                        f"{loaded['cpu_percent_of_core']}% of a core",
                    )
                )
    fp = r.get("footprint", {})
    if fp and "error" not in fp:
        ka = next(
            (s for s in fp["cumulative_imports"] if s["import"] == "kubernetes_asyncio.client"),
            None,
        )
        if ka:
            rows.append(
                ("5 footprint", "RSS added by importing kubernetes_asyncio.client",
                 f"{ka['delta_mib']} MiB after the other libraries "
                 f"({fp['kubernetes_asyncio_client_alone_mib']} MiB alone)")
            )  # fmt: skip
    rows += rack_report.rows(r.get("rackloss"))
    rows += rack_report.rows(r.get("rackloss_429"), name="7 rack loss, server at half")
    return rows


def table(data: dict[str, Any]) -> str:
    lines = []
    rows = figures(data)
    width = max((len(r[1]) for r in rows), default=10)
    lines.append("FIGURES (this run)")
    for bench, fig, value in rows:
        lines.append(f"  {bench:<13} {fig:<{width}}  {value}")
    lines.append("")
    lines.append("TARGETS")
    for t in data["targets"]:
        lines.append(
            f"  {_mark(t['met']):<8} {t['target']}: {_fmt(t['value'])} {t['unit']} "
            f"(target {t['threshold']})"
        )
    return "\n".join(lines)


def markdown(data: dict[str, Any]) -> str:
    m = data["machine"]
    out = [
        "# Clearance benchmarks",
        "",
        "Generated by `make bench` (`tests/bench/`); every figure below comes from the run of "
        f"**{data['generated_at']}**, which took **{data['wall_seconds']} s** of wall time. "
        "Do not edit by hand: run `make bench` again.",
        "",
        "## Reproduce",
        "",
        "```sh",
        data["command"],
        "# one benchmark:  make bench BENCH_ARGS='--only tracker'",
        "# smoke run:      make bench BENCH_ARGS='--quick --no-profile'",
        "```",
        "",
        "## Machine",
        "",
        f"* CPU: {m['cpu_model']} ({m['cpu_mhz']} MHz), `nproc` = {m['nproc']}",
        f"* memory: {m['memory_total']}; kernel {m['kernel']}",
        f"* {m['python_impl']} {m['python']}; nats-server {m['nats_server']}; event loop "
        f"{m.get('event_loop', 'asyncio')} (the services' and kubesim's: uvloop, their default)",
        f"* load average (1, 5, 15 min) at start {m['load_average_at_start']}, at end "
        f"{m.get('load_average_at_end')}. The machine is shared: other work ran beside the "
        "benchmarks, which inflates wall-clock latencies; per-core rates are CPU-time based "
        "and are not inflated.",
        "",
        "```",
        m["free_m"],
        "```",
        "",
        "## Targets (issue #16)",
        "",
        "| target | figure | threshold | verdict |",
        "|---|---|---|---|",
    ]
    for t in data["targets"]:
        out.append(
            f"| {t['target']} | {_fmt(t['value'])} {t['unit']} | {t['threshold']} | "
            f"**{_mark(t['met'])}** |"
        )
    out += ["", "## Figures", "", "| benchmark | figure | value |", "|---|---|---|"]
    for bench, fig, value in figures(data):
        out.append(f"| {bench} | {fig} | {value} |")
    out += ["", "Seconds per benchmark: " + ", ".join(
        f"{k} {v}" for k, v in data["seconds_per_benchmark"].items()), ""]  # fmt: skip
    loads = {
        name: result["load_average_1m"]
        for name, result in data["results"].items()
        if isinstance(result, dict) and "load_average_1m" in result
    }
    out += ["Load average (1 min) before → after each benchmark, on 2 shared cores: " + ", ".join(
        f"{k} {v['before']} → {v['after']}" for k, v in loads.items()), ""]  # fmt: skip
    out += _clocks(data)
    out += _method()
    out += _profiles(data)
    out += _experiments(data)
    out += _notes(data)
    return "\n".join(out) + "\n"


def _clocks(data: dict[str, Any]) -> list[str]:
    out = [
        "## Clock sources",
        "",
        "Latencies are measured between server-side timestamps only: an interval is computed "
        "between causally ordered events (two API commits in resourceVersion order, or a "
        "commit and a JetStream store time on the same host clock); a pair that runs "
        "backwards is counted as a clock-order error (or a safety violation) and is never a "
        "figure, so no latency can be negative (tests/measurement).",
        "",
        "| benchmark | timestamp | source |",
        "|---|---|---|",
    ]
    for bench in ("clearance", "tracker"):
        sources = _get(data["results"], bench, "clock_sources") or {}
        for name, source in sources.items():
            out.append(f"| {bench} | {name} | {source} |")
    return [*out, ""]


def _method() -> list[str]:
    return [
        "## What each benchmark does (and what was the bottleneck of the load)",
        "",
        "1. **Clearance latency** - `LocalStack`: nats-server, `kubesim serve` and the three "
        "services as separate processes (tracing off, log level WARNING). AppWrappers cycle in "
        "parallel, each a gang of two pods (minAvailable 2) whose second pod can never be "
        "scheduled, requeue wait 1 s, pause 0: the dispatcher requeues, deletes both pods (the "
        "running one terminates in kubesim's 300 ms), the tracker clears, the dispatcher creates "
        "attempt N+1. Every time is a server's: the commit of the last attempt-N pod removal "
        "and of the first attempt-N+1 pod creation from kubesim's write history, `cleared` "
        "from its JetStream store time (see *Clock sources*). "
        "The 5 s polling baseline (MCAD v2 / AppWrapper controller style: LIST after the "
        "deletions, again every 5 s) runs for real on the first teardowns, on the same "
        "deletions; the analytical column applies the same rule to every measured cycle. Load "
        "generator: the AppWrappers themselves; the services, kubesim and nats-server share the "
        "two cores, and CPU contention between the five processes is part of what is measured. "
        "**Warm-up:** each AppWrapper's first two cycles run right after every process started, "
        "with all the gangs created together and in exact lockstep; they are reported on their "
        "own and with the rest (*every cycle together*), and the targets are judged on the "
        "cycles after them (steady state). kubesim freezes its heap after each older-generation "
        "collection (`kubesim.heap`): a full collection of the simulator's write history "
        "stopped it for 38-70 ms, a pause a real API server does not have.",
        "2. **Watcher ingest** - in-process, same input for every path: realistic 5 KB pod watch "
        "lines. Decode path = `WatchLine` + msgspec into `PodObject` + `KubePodEvent` + JSON; "
        "model path = kubernetes-asyncio `Watch.unmarshal_event(line, 'V1Pod')`; "
        "decode + publish = the watcher's `Publisher` to a real nats-server with PubAck. "
        "kubesim is not used (it cannot produce "
        "thousands of pod changes per second: it would be the bottleneck). Per core = "
        "events per CPU-second of this single-threaded process.",
        "3. **Tracker scale** - nats-server, `kubesim serve --no-controllers` and the real "
        "tracker only. 8,000 pods exist in the API; 1,000 `teardown.started` are recorded; then "
        "every pod is deleted in the API (DELETE-collection, grace 0) and the 8,000 DELETED kube "
        "events are **injected straight into NATS** by the benchmark (a watcher relaying a "
        "kubesim burst would be the bottleneck); t0 = the moment the last API deletion "
        "returned. The tracker's verification LIST/GETs still go to kubesim (part of the path). "
        "Memory: tracker RSS once all teardowns are tracked minus idle RSS, per tracked object.",
        "4. **Dispatcher** - the real `Dispatcher.scan()` (order + free capacity + plan, the "
        "dispatcher's whole decision) over in-memory state: 200 nodes, 4,000 running pods, "
        "500 / 5,000 / 20,000 queued AppWrappers of one priority (every one capacity-checked). "
        "A full process would be bounded by kubesim (status writes, item creation), so the pure "
        "modules are measured; CPU time of the scanning thread.",
        "5. **Footprint** - `VmRSS` (`/proc/<pid>/status`) and `utime + stime` "
        "(`/proc/<pid>/stat`) of each service: idle = 5 s after start-up settled, loaded = "
        "during the clearance cycles (peak RSS, CPU as % of one core). Plus the resident cost of "
        "each library a service imports.",
        "6. **Rack loss** - `LocalStack` with the services' client limit set (qps/burst) and, "
        "from the loss on, kubesim's own limit per User-Agent (429 + Retry-After above it): "
        "gangs of bare pods running, half the nodes lost at once, the evicted pods held past "
        "every gang's force deadline; judged from kubesim's write and request logs and the "
        "JetStream store times (tests/bench/rack_analysis.py). The judged run grants each "
        "service the rate it is configured for; **7** runs a storm at the --quick size "
        "(16 nodes, 100 gangs) against a server granting half of it when the judged storm "
        "met no 429, to show the services wait out every 429. The storm ends when every gang "
        "runs at full strength on the surviving nodes.",
        "",
    ]


def _profiles(data: dict[str, Any]) -> list[str]:
    profiles = data.get("profiles") or {}
    if not profiles:
        return []
    out = ["## Profiles of this run (pyinstrument)", ""]
    out.append(
        "Sampled in a second, profiled run (1 ms interval: the profiled run is slower; its "
        "figures are not used above). *Inclusive* = time with the function on the stack, "
        "event-loop idle wait excluded from the *own time* tables."
    )
    out.append("")
    for area, sections in profiles.items():
        if area == "experiments":
            continue
        if area == "watcher":
            out += [
                f"### watcher decode + publish ({sections.get('events')} events, in process)",
                "",
            ]
            out += _frames(sections.get("hot_project_functions", []), "inclusive_s")
            out += _frames(sections.get("hot_functions", []), "self_s")
            continue
        if area == "dispatcher":
            out += [
                f"### dispatcher decision pass ({sections.get('queued')} queued, "
                f"{sections.get('rounds')} passes, in process)",
                "",
            ]
            out += _frames(sections.get("hot_project_functions", []), "inclusive_s")
            out += _frames(sections.get("hot_functions", []), "self_s")
            continue
        if area == "tracker":
            out += [
                f"### tracker scale (profiled run: {sections.get('profiled_run_latency_s')} s)",
                "",
            ]
            out += _frames(sections.get("hot_project_functions", []), "inclusive_s")
            out += _frames(sections.get("hot_functions", []), "self_s")
            continue
        for service, section in sections.items():
            out += [f"### {area}: clearance-{service}", ""]
            out += _frames(section.get("hot_project_functions", []), "inclusive_s")
            out += _frames(section.get("hot_functions", []), "self_s")
    return out


def _experiments(data: dict[str, Any]) -> list[str]:
    experiments = (data.get("profiles") or {}).get("experiments") or {}
    baseline = data["results"].get("clearance") or {}
    if not experiments or "error" in baseline:
        return []
    out = [
        "## Experiment of this run: the dispatcher's work queue",
        "",
        "The same clearance benchmark (same AppWrappers in parallel, fewer cycles), run again "
        "with one setting changed; compare with the main run above.",
        "",
        "| figure | main run | " + " | ".join(experiments) + " |",
        "|---|---|" + "---|" * len(experiments),
    ]
    rows = [
        ("last old object removed → cleared", ("deleted_to_cleared_ms",)),
        ("last old object removed → N+1 created", ("deleted_to_redispatch_create_ms",)),
        ("cleared → N+1 created", ("cleared_to_redispatch_create_ms",)),
        ("  cleared → first status write",
         ("dispatcher_breakdown_ms", "cleared_stored_to_first_status_write")),
        ("  last status write → pod created",
         ("dispatcher_breakdown_ms", "last_status_write_to_pod_created")),
    ]  # fmt: skip
    for label, path in rows:
        cells = [_dist(_get(baseline, *path))]
        cells += [_dist(_get(e, *path)) for e in experiments.values()]
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out.append("")
    return out


def _frames(rows: list[dict[str, Any]], key: str) -> list[str]:
    if not rows:
        return []
    title = "inclusive s" if key == "inclusive_s" else "own s (share of busy)"
    out = [f"| function | {title} |", "|---|---|"]
    for row in rows[:10]:
        extra = f" ({row['share_of_busy']:.0%})" if "share_of_busy" in row else ""
        out.append(f"| `{row['function']}` | {row[key]}{extra} |")
    out.append("")
    return out


def _notes(data: dict[str, Any]) -> list[str]:
    missed = [t for t in data["targets"] if t["met"] is False]
    out = ["## Missed targets: bottleneck and proposed fix", ""]
    tail = ["## Other observations", "", *(f"* {text}" for text in OBSERVATIONS.values()), ""]
    if not missed:
        return [*out, "Every target was met in this run.", "", *tail]
    out.append(
        "The bottleneck named for each missed target comes from the profiles and breakdowns "
        "above (the analysis was written from the profiles and host measurements of the "
        "2026-12-03 and 2026-12-06 runs (issue 16); the tables above are regenerated on every "
        "run, so check that they still say the same)."
    )
    out.append("")
    for t in missed:
        note = NOTES.get(t["id"])
        if note is None:
            continue
        out += [f"### {t['target']}: {_fmt(t['value'])} {t['unit']} (target {t['threshold']})", ""]
        out += [f"**Bottleneck.** {note['bottleneck']}", "", f"**Proposed fix.** {note['fix']}", ""]
    return [*out, *tail]


def dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2)
