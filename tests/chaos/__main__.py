"""``make chaos``: randomized fault schedules against the real stack, judged from the outside.

    python -m tests.chaos [--schedules N] [--seed S] [--replay SEED] [--short] [--jobs N]

Schedule *i* of a run has seed ``S + i``; ``--replay SEED`` runs that one schedule alone (what
a failing schedule prints). ``--jobs N`` (default 2) runs N schedules at once, each in a
process of its own (tests/chaos/parallel.py); a schedule's seed alone decides its faults and
workload. The run exits 1 on any violation (or harness error) and writes ``docs/chaos.md``
and ``docs/chaos.json`` (``--out``) unless ``--no-report``. A failing schedule's directory
(every process log) is kept under ``--workdir`` and named in the output.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import platform
import shlex
import sys
import tempfile
import time
from pathlib import Path

from tests.chaos import parallel, plan, report
from tests.chaos.runner import ScheduleResult, run_schedule

DEFAULT_SCHEDULES = 100
DEFAULT_SEED = 1
DEFAULT_JOBS = 2
"""Two schedules at once on the 2-core machine: one keeps ~40% of a core busy."""


def replay_command(seed: int, *, short: bool, fault: str) -> str:
    args = (
        f"--replay {seed}" + (" --short" if short else "") + (f" --fault {fault}" if fault else "")
    )
    return f"make chaos CHAOS_ARGS={shlex.quote(args)}"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos", description=__doc__)
    parser.add_argument("--schedules", type=int, default=DEFAULT_SCHEDULES)
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of schedule 0")
    parser.add_argument("--replay", type=int, default=None, help="run only this seed")
    parser.add_argument("--short", action="store_true", help="short schedules (make test)")
    parser.add_argument("--out", type=Path, default=Path("docs"))
    parser.add_argument("--no-report", action="store_true")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep every schedule's logs")
    parser.add_argument(
        "--jobs",
        type=int,
        default=DEFAULT_JOBS,
        help=f"schedules run at once, each in its own process (default {DEFAULT_JOBS})",
    )
    parser.add_argument("--result", type=Path, default=None, help=argparse.SUPPRESS)
    parser.add_argument(
        "--fault",
        default="",
        help="CLEARANCE_TEST_FAULT for the services (a deliberately broken build)",
    )
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> int:
    length = plan.SHORT if args.short else plan.DEFAULT
    seeds = (
        [args.replay] if args.replay is not None else [args.seed + i for i in range(args.schedules)]
    )
    root = args.workdir or Path(tempfile.mkdtemp(prefix="clearance-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    began = time.monotonic()

    def done(count: int, result: ScheduleResult) -> None:
        _print_result(count, len(seeds), result, args)

    async def in_process(seed: int) -> ScheduleResult:
        schedule = plan.schedule_for(seed, length=length)
        return await run_schedule(
            schedule, root / f"seed-{seed}", fault_env=args.fault, keep=args.keep
        )

    async def in_child(seed: int) -> ScheduleResult:
        return await parallel.run_in_child(
            seed, root, short=args.short, fault=args.fault, keep=args.keep
        )

    one = in_process if args.jobs <= 1 or len(seeds) == 1 else in_child
    results = await parallel.run_all(seeds, jobs=args.jobs, one=one, done=done)
    if args.result is not None and len(results) == 1:
        parallel.dump(results[0], args.result)
    wall = time.monotonic() - began
    command = "make chaos" + (
        f" CHAOS_ARGS={shlex.quote(' '.join(sys.argv[1:]))}" if sys.argv[1:] else ""
    )
    summary = report.summarize(
        results,
        wall=wall,
        command=command,
        machine=platform.platform(),
        fault=args.fault,
        jobs=1 if len(seeds) == 1 else max(1, args.jobs),
    )
    print(report.headline(summary))
    if not args.no_report and args.replay is None:
        report.write(summary, args.out)
        print(f"report: {args.out / 'chaos.md'}, {args.out / 'chaos.json'}")
    return 0 if all(r.ok for r in results) else 1


def _print_result(count: int, total: int, result: ScheduleResult, args: argparse.Namespace) -> None:
    verdict = "ok" if result.ok else "FAIL"
    recovery = "-" if result.recovery is None else f"{result.recovery:.1f}s"
    print(
        f"[{count}/{total}] seed {result.seed}: {verdict} "
        f"({result.wall:.1f}s, {sum(result.faults.values())} faults, "
        f"{result.cycles} cycles, recovery {recovery})",
        flush=True,
    )
    for note in result.notes:
        print(f"  note: {note}")
    if not result.ok:
        print(f"  {result.description}")
        for line in [*result.errors, *map(str, result.violations)][:20]:
            print(f"  {line}")
        print(f"  logs: {result.workdir / 'logs'}")
        print(f"  replay: {replay_command(result.seed, short=args.short, fault=args.fault)}")


def main() -> None:
    # The harness's own NATS connection (reading the cycle stream) sees every nats-server crash
    # the nemesis injects; its reconnect warnings would bury the one line per schedule.
    logging.getLogger("clearance.bus").setLevel(logging.ERROR)
    sys.exit(asyncio.run(run(parse(sys.argv[1:]))))


if __name__ == "__main__":
    main()
