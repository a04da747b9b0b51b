"""The ``clearance`` command: tools for people around the services.

``clearance events`` tails cycle events or alerts (see :mod:`clearance.tailing`);
``clearance explain NAMESPACE/NAME`` says why one AppWrapper is not running (see
:mod:`clearance.explaining` and :mod:`clearance.explanation`);
``clearance demo`` runs the seed scenario end to end (see :mod:`clearance.demo`).
NATS connection settings come from the same ``CLEARANCE_*`` variables as the services.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import textwrap
from collections.abc import Sequence
from datetime import timedelta

from clearance.settings import CommonSettings, SettingsError, parse_duration

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2


def _duration(text: str) -> timedelta:
    try:
        return timedelta(seconds=parse_duration(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration like 30s, 5m, 1h") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clearance",
        description="Clearance: requeue cycles of AppWrappers that wait for confirmed deletion.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    events = commands.add_parser(
        "events",
        help="tail cycle events or alerts from NATS",
        description=(
            "Tail Clearance's cycle events (default) or alerts from NATS JetStream. Output is "
            "one readable line per event, or with --json the event itself, one JSON object per "
            "line (schema: proto/events.schema.json). Connection settings come from "
            "CLEARANCE_NATS_URL (default nats://127.0.0.1:4222), CLEARANCE_NATS_CREDS, "
            "CLEARANCE_NATS_USER/_PASSWORD and CLEARANCE_NATS_TLS_*."
        ),
        epilog=(
            "examples:\n"
            "  clearance events --alerts                     follow new alerts\n"
            "  clearance events -n team-a --since 1h         cycle events of the last hour\n"
            "  clearance events --alerts --json | ./pager    feed a webhook, one JSON per line\n"
            "  clearance events --since 24h --no-follow      print and exit"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    events.add_argument("--alerts", action="store_true", help="tail alerts instead of cycles")
    events.add_argument("-n", "--namespace", help="only this namespace")
    events.add_argument("-a", "--appwrapper", help="only this AppWrapper (name)")
    events.add_argument("--json", action="store_true", help="one JSON event per line")
    events.add_argument(
        "--since",
        type=_duration,
        help="replay stored events this far back first (e.g. 30s, 10m, 2h)",
    )
    events.add_argument(
        "--no-follow",
        dest="follow",
        action="store_false",
        help="print stored events and exit instead of following new ones",
    )

    explain = commands.add_parser(
        "explain",
        help="why is this AppWrapper not running? state, cycle, blockers, next step",
        description=textwrap.fill(
            "One screen for one AppWrapper: its state and attempt, the current requeue "
            "cycle's timeline (requeued, teardown started, alerts, forced, confirmed, "
            "cleared, redispatched), what blocks it now (each remaining object with its "
            "diagnosis), the next escalation step and when, and commands that unblock it. "
            "Reads only with your access: the Kubernetes API through your kubeconfig "
            "(KUBECONFIG, --kubeconfig, --context), NATS through CLEARANCE_NATS_URL, "
            "CLEARANCE_NATS_CREDS, CLEARANCE_NATS_USER/_PASSWORD and CLEARANCE_NATS_TLS_*. "
            "Exit status 1 with one line on stderr when it cannot (unknown AppWrapper, no "
            "permission, API server or NATS unreachable).",
            width=88,
        ),
        epilog=(
            "examples:\n"
            "  clearance explain team-a/train-llm\n"
            "  clearance explain team-a/train-llm --json | jq .next"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    explain.add_argument("target", metavar="NAMESPACE/NAME", help="the AppWrapper")
    explain.add_argument("--json", action="store_true", help="one JSON document for scripts")
    explain.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG)")
    explain.add_argument("--context", help="kubeconfig context (default: the current one)")
    explain.add_argument(
        "--timeout",
        type=_duration,
        default=timedelta(seconds=10),
        help="bound of each API request and of connecting to NATS (default 10s)",
    )

    demo = commands.add_parser(
        "demo",
        help="run the seed scenario on embedded NATS + kubesim with the three services",
        description=(
            "Start an embedded nats-server, kubesim (one node) and the three services as "
            "separate processes, run the seed scenario of MCAD issue #599 (the node under a "
            "running AppWrapper is lost; its pod stays Terminating past every deadline, then "
            "finally goes) with a narrated timeline, print the alerts, the cycle's trace as a "
            "waterfall and key metrics, then stop everything (also on Ctrl-C)."
        ),
    )
    demo.add_argument(
        "--stuck-for",
        type=_duration,
        default=timedelta(seconds=12),
        help="how long the evicted pod stays Terminating before it goes (default 12s)",
    )
    demo.add_argument(
        "--workload",
        choices=("pod", "pytorchjob"),
        default="pod",
        help="what the AppWrapper wraps: one bare pod (default), or the seed's own example, a "
        "PyTorchJob of 1 master + 3 workers whose worker-1 gets stuck",
    )
    demo.add_argument(
        "--ha",
        action="store_true",
        help="run it the way the prod overlay deploys: a 3-node NATS cluster (R3 streams), two "
        "tracker and two dispatcher replicas; right after the requeue, kill -9 the NATS node "
        "leading the cycle stream and the dispatcher leader, narrate the fail-overs, then "
        "start the node again on its store (the pod workload only)",
    )
    demo.add_argument(
        "--workdir",
        help="keep logs, the kubeconfig, the events seen (events.jsonl) and kubesim's write "
        "history (kubesim-history.json) in this directory (default: temporary)",
    )
    return parser


async def _run_events(args: argparse.Namespace) -> int:
    from clearance import bus
    from clearance.tailing import TailRequest, tail

    settings = CommonSettings.from_env()
    request = TailRequest(
        alerts=args.alerts,
        namespace=args.namespace,
        appwrapper=args.appwrapper,
        since=args.since,
        follow=args.follow,
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    nc = await bus.connect(settings, name="clearance-events", first_connect_timeout=5.0)
    try:

        def emit(line: str) -> None:
            print(line, flush=True)

        await tail(nc, request, emit=emit, as_json=args.json, stop=stop)
    finally:
        with contextlib.suppress(Exception):
            await nc.drain()
    return EXIT_OK


async def _run_explain(args: argparse.Namespace) -> int:
    from clearance.explaining import ExplainError, ExplainRequest, gather, parse_target
    from clearance.explanation import explain
    from clearance.explanation_text import as_json, render

    try:
        namespace, name = parse_target(args.target)
    except ValueError as exc:
        print(f"clearance explain: {exc}", file=sys.stderr)
        return EXIT_USAGE
    request = ExplainRequest(
        namespace=namespace,
        name=name,
        settings=CommonSettings.from_env(),
        timeout=args.timeout.total_seconds(),
        kubeconfig=args.kubeconfig,
        context=args.context,
    )
    try:
        explanation = explain(await gather(request))
    except ExplainError as exc:
        print(f"clearance explain: {exc}", file=sys.stderr)
        return EXIT_FAILURE
    print(as_json(explanation) if args.json else "\n".join(render(explanation)), flush=True)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Connection retries are logged as warnings by the bus; a CLI reports the outcome once.
    logging.basicConfig(level=logging.ERROR, format="%(message)s")
    try:
        if args.command == "events":
            return asyncio.run(_run_events(args))
        if args.command == "explain":
            return asyncio.run(_run_explain(args))
        from clearance.demo import run_demo

        if args.ha and args.workload != "pod":
            print("clearance demo: --ha runs the pod workload only", file=sys.stderr)
            return EXIT_USAGE
        return run_demo(
            stuck_for=args.stuck_for, workdir=args.workdir, workload=args.workload, ha=args.ha
        )
    except SettingsError as exc:
        print(f"clearance: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # the CLI's boundary: one clear line, never a traceback
        print(f"clearance {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
