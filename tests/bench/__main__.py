"""``make bench``: run every benchmark, print the table, write docs/benchmarks.{md,json}.

    uv run --frozen --no-sync python -m tests.bench [--only NAME ...] [--quick] [--no-profile]

Each benchmark is independent and runs in sequence (never two at once: they would share the
cores). Targets that a run misses are profiled right away in a second, profiled run (the
measured figures always come from the unprofiled run), and the report names the hot spots.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from clearance.entrypoint import use_event_loop

from . import (
    clearance_latency,
    dispatcher_queue,
    footprint,
    rack_loss,
    report,
    tracker_scale,
    watcher_ingest,
)
from .common import machine, progress

BENCHMARKS = ("clearance", "watcher", "tracker", "dispatcher", "footprint", "rackloss")
ROOT = Path(__file__).resolve().parents[2]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.bench", description=__doc__)
    parser.add_argument("--only", action="append", choices=BENCHMARKS, help="repeatable")
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled reruns")
    parser.add_argument(
        "--cycles",
        type=int,
        default=240,
        help="clearance: measured requeue cycles (each AppWrapper runs "
        f"{clearance_latency.WARMUP_CYCLES} warm-up cycles first)",
    )
    parser.add_argument("--appwrappers", type=int, default=8, help="clearance: in parallel")
    parser.add_argument("--baseline-cycles", type=int, default=20)
    parser.add_argument("--teardowns", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=8)
    parser.add_argument(
        "--growth",
        type=lambda text: [int(x) for x in text.split(",") if x],
        default=[5_000, 10_000],
        help="tracker: larger teardown counts, comma-separated ('' = none)",
    )
    parser.add_argument("--events", type=int, default=20_000, help="watcher: watch lines")
    parser.add_argument("--model-events", type=int, default=2_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20, help="dispatcher: scans per size")
    parser.add_argument(
        "--rack-nodes",
        type=int,
        default=64,
        help="rackloss: cluster nodes (issue 16's size, with --rack-appwrappers 500: ~5 min on "
        "2 cores; --quick runs 16 x 100)",
    )
    parser.add_argument(
        "--rack-lost", type=int, default=None, help="rackloss: nodes lost (default: half)"
    )
    parser.add_argument("--rack-appwrappers", type=int, default=500, help="rackloss: gangs")
    parser.add_argument("--rack-pods", type=int, default=8, help="rackloss: pods per gang")
    parser.add_argument(
        "--rack-server-qps",
        type=float,
        default=None,
        help="rackloss: kubesim's limit per User-Agent from the loss on (requests/s; default: "
        "RackConfig.server_qps), burst the same",
    )
    parser.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the loop of this process's in-process measurements (watcher decode + publish, "
        "the dispatcher's decision pass) and of its observers; the services and kubesim run on "
        "their own default, uvloop (default: uvloop, as deployed)",
    )
    parser.add_argument("--md", type=Path, default=ROOT / "docs" / "benchmarks.md")
    parser.add_argument("--json", type=Path, default=ROOT / "docs" / "benchmarks.json")
    args = parser.parse_args(argv)
    if args.quick:
        args.cycles, args.appwrappers, args.baseline_cycles = 40, 8, 4
        args.teardowns, args.events, args.model_events = 100, 4_000, 400
        args.repeat, args.rounds = 2, 5
        args.growth = [300]
        args.rack_nodes, args.rack_appwrappers = 16, 100
    return args


async def main_async(args: argparse.Namespace, host: dict[str, Any]) -> dict[str, Any]:
    selected = args.only or list(BENCHMARKS)
    results: dict[str, Any] = {}
    timings: dict[str, float] = {}

    async def timed(name: str, coro: Any) -> None:
        started = time.monotonic()
        load = os.getloadavg()[0]
        try:
            results[name] = await coro
        except Exception as exc:  # one broken benchmark must not hide the others
            progress(f"{name}: FAILED: {type(exc).__name__}: {exc}")
            results[name] = {"error": f"{type(exc).__name__}: {exc}"}
        timings[name] = round(time.monotonic() - started, 1)
        if isinstance(results[name], dict):
            results[name]["load_average_1m"] = {
                "before": round(load, 2),
                "after": round(os.getloadavg()[0], 2),
            }

    async def sync(fn: Any, **kwargs: Any) -> Any:
        return fn(**kwargs)

    if "clearance" in selected:
        await timed(
            "clearance",
            clearance_latency.run(
                cycles=args.cycles,
                appwrappers=args.appwrappers,
                baseline_cycles=args.baseline_cycles,
            ),
        )
    if "watcher" in selected:
        await timed(
            "watcher",
            watcher_ingest.run(
                events=args.events, model_events=args.model_events, repeat=args.repeat
            ),
        )
    if "tracker" in selected:
        await timed("tracker", tracker_scale.run(teardowns=args.teardowns, pods=args.pods))
        if args.growth and "error" not in results["tracker"]:
            await timed(
                "tracker_growth",
                tracker_scale.growth(
                    sizes=tuple(args.growth), pods=args.pods, base=results["tracker"]
                ),
            )
    if "dispatcher" in selected:
        await timed("dispatcher", sync(dispatcher_queue.run, rounds=args.rounds))
    if "footprint" in selected:
        await timed("footprint", sync(footprint.run))

    if "rackloss" in selected:
        rack = rack_loss.RackConfig(
            nodes=args.rack_nodes,
            appwrappers=args.rack_appwrappers,
            pods=args.rack_pods,
            lost=args.rack_lost if args.rack_lost is not None else args.rack_nodes // 2,
        )
        if args.rack_server_qps is not None:
            rack = replace(
                rack, server_qps=args.rack_server_qps, server_burst=int(args.rack_server_qps)
            )
        await timed("rackloss", rack_loss.run(rack))
        if not (results.get("rackloss") or {}).get("answered_429_total"):
            # No 429 came (a small storm): a storm against a server that grants half the
            # clients' rate, so the services must wait 429s out (Retry-After) without
            # breaking their own limits. It shows the manners, not the scale, so it runs at
            # the --quick size (16 x 100): the full one is another ~4 minutes.
            half = rack.qps / 2
            strict = replace(
                rack,
                server_qps=half,
                server_burst=int(half),
                nodes=min(rack.nodes, 16),
                appwrappers=min(rack.appwrappers, 100),
                lost=min(rack.lost, 8),
            )
            await timed("rackloss_429", rack_loss.run(strict))

    targets = report.targets(results)
    profiles: dict[str, Any] = {}
    if not args.no_profile:
        missed = {t["id"] for t in targets if t["met"] is False}
        if missed & {"redispatch_p99", "cleared_p99", "speedup", "speedup_p99"} and (
            "clearance" in selected
        ):
            # The tracker's part (removal → cleared) and the dispatcher's (cleared → created)
            # are profiled together in one shorter rerun.
            progress("profile: clearance run again with the dispatcher and tracker profiled")
            rerun = await clearance_latency.run(
                cycles=max(40, args.cycles // 3),
                appwrappers=args.appwrappers,
                baseline_cycles=0,
                profile=("dispatcher", "tracker"),
            )
            profiles["clearance"] = rerun.get("profile", {})
        if "teardowns" in missed and "tracker" in selected:
            progress("profile: tracker scale run again with the tracker profiled")
            rerun = await tracker_scale.run(teardowns=args.teardowns, pods=args.pods, profile=True)
            profiles["tracker"] = rerun.get("profile", {})
            profiles["tracker"]["profiled_run_latency_s"] = rerun.get(
                "last_deletion_to_last_cleared_s"
            )
        if "dispatcher" in selected:
            progress("profile: the dispatcher's decision pass at 20,000 queued, in this process")
            profiles["dispatcher"] = await sync(dispatcher_queue.profile_scan)
        if "watcher" in selected:
            progress("profile: the watcher's decode + publish path in this process")
            profiles["watcher"] = await watcher_ingest.profile_publish(events=args.events // 4)
    return {
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": "make bench"
        + (f" BENCH_ARGS='{' '.join(sys.argv[1:])}'" if sys.argv[1:] else ""),
        "machine": host,
        "seconds_per_benchmark": timings,
        "results": results,
        "targets": targets,
        "profiles": profiles,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    started = time.monotonic()
    progress(f"benchmarks: {', '.join(args.only or BENCHMARKS)}")
    use_event_loop(args.event_loop)
    host = machine()
    host["event_loop"] = args.event_loop
    data = asyncio.run(main_async(args, host))
    data["wall_seconds"] = round(time.monotonic() - started, 1)
    data["machine"]["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(data, indent=2) + "\n")
    args.md.write_text(report.markdown(data))
    print(report.table(data))
    print(f"\nwall time {data['wall_seconds']} s; wrote {args.md} and {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
