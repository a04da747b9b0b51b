"""The request-limit parts of the CLI: `kubesim serve` flags and `kubesim ctl flowcontrol`.

Both map onto :class:`kubesim.flowcontrol.FlowControlConfig`; `ctl flowcontrol` changes a
running server through `POST /kubesim/v1/flowcontrol` (or `DELETE` for `--off`) and prints
the resulting state (settings, in-flight counts, admitted and rejected requests).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from kubesim.flowcontrol import FlowControlConfig

__all__ = ["add_ctl_parser", "add_serve_arguments", "config_from_args", "run_ctl"]

Request = Callable[..., Any]


def _add_limits(parser: argparse.ArgumentParser, *, runtime: bool) -> None:
    default = None if runtime else 0
    parser.add_argument(
        "--max-requests-inflight",
        type=int,
        default=default,
        metavar="N",
        help="read-only (get/list) requests executing at once before 429; watches never count "
        "(kube-apiserver --max-requests-inflight, real default 400). 0 = no limit"
        + ("" if runtime else " (kubesim default)"),
    )
    parser.add_argument(
        "--max-mutating-requests-inflight",
        type=int,
        default=default,
        metavar="N",
        help="mutating requests executing at once before 429 "
        "(--max-mutating-requests-inflight, real default 200). 0 = no limit",
    )
    parser.add_argument(
        "--rate-limit",
        type=float,
        default=None if runtime else 0.0,
        metavar="QPS",
        help="token-bucket rate in requests/s (watch starts included); above it requests get "
        "429 with Retry-After. 0 = no limit",
    )
    parser.add_argument(
        "--rate-burst",
        type=int,
        default=default,
        metavar="N",
        help="token-bucket size (0 = ceil(QPS))",
    )
    parser.add_argument(
        "--rate-limit-scope",
        choices=("global", "user-agent"),
        default=None if runtime else "global",
        help="one bucket for the server, or one per User-Agent (each service process)",
    )


def add_serve_arguments(serve: argparse.ArgumentParser) -> None:
    group = serve.add_argument_group(
        "request limits",
        "429 Too Many Requests with Retry-After, as a loaded API server answers (off by "
        "default; kubesim's own controllers and /healthz are exempt; change at run time with "
        "`kubesim ctl flowcontrol`)",
    )
    _add_limits(group, runtime=False)  # type: ignore[arg-type]


def config_from_args(args: argparse.Namespace) -> FlowControlConfig:
    """The serve flags as a config (raises FlowControlError for out-of-range values)."""
    return FlowControlConfig(
        max_requests_inflight=args.max_requests_inflight,
        max_mutating_requests_inflight=args.max_mutating_requests_inflight,
        rate_limit=args.rate_limit,
        rate_burst=args.rate_burst,
        rate_scope=args.rate_limit_scope,
    ).checked()


def add_ctl_parser(actions: Any) -> None:
    flow = actions.add_parser(
        "flowcontrol",
        help="show or change the request limits (429 Too Many Requests)",
        description="Without options: print the limits, requests in flight and the admitted "
        "and rejected counts. With options: change those limits (others stay as they are).",
    )
    _add_limits(flow, runtime=True)
    flow.add_argument(
        "--retry-after", type=int, default=None, metavar="S", help="Retry-After of in-flight 429s"
    )
    flow.add_argument("--off", action="store_true", help="switch every limit off")
    flow.add_argument(
        "--reset-counters", action="store_true", help="zero the admitted/rejected counters"
    )


_FIELDS = (
    ("max_requests_inflight", "maxRequestsInflight"),
    ("max_mutating_requests_inflight", "maxMutatingRequestsInflight"),
    ("rate_limit", "rateLimit"),
    ("rate_burst", "rateBurst"),
    ("rate_limit_scope", "rateScope"),
    ("retry_after", "retryAfter"),
)


def run_ctl(server: str, args: argparse.Namespace, request: Request) -> str:
    """Apply `ctl flowcontrol` and return the state to print."""
    path = "/kubesim/v1/flowcontrol"
    if args.off:
        request(server, "DELETE", path)
    body: dict[str, Any] = {
        key: getattr(args, attr) for attr, key in _FIELDS if getattr(args, attr) is not None
    }
    if args.reset_counters:
        body["resetCounters"] = True
    state = request(server, "POST", path, body) if body else request(server, "GET", path)
    return json.dumps(state, indent=2, sort_keys=True)
