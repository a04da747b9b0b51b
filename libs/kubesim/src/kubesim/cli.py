"""`kubesim serve` (run the simulator and its fake cluster) and `kubesim ctl` (fault injection).

`serve` prints `kubesim listening on URL (kubeconfig: FILE)` as its first stdout line, so scripts
can wait for it, and exits 0 on SIGTERM/SIGINT. `ctl` talks to a running simulator over HTTP
(`--server`, else `$KUBESIM_URL`, else http://127.0.0.1:8080, `serve`'s default address).

Exit codes: 0 success; 1 the server answered with an error; 2 bad usage or input (argparse,
unreadable CRD file, bad duration); 3 the server is unreachable or the port is busy.
"""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import os
import signal
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from typing import Any

from kubesim import cli_flowcontrol
from kubesim.builtin_crds import BUILTIN_CRDS
from kubesim.durations import DurationError, format_duration, parse_duration
from kubesim.flowcontrol import FlowControlError
from kubesim.quantity import QuantityError, canonical_resource

__all__ = ["main"]

DEFAULT_PORT = 8080
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
EXIT_OK, EXIT_API, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _quantity(text: str) -> str:
    """A resource quantity, as the API server would store it (`8000m` → `8`)."""
    try:
        value = canonical_resource(text)
    except QuantityError as exc:
        raise argparse.ArgumentTypeError(f"{text!r}: {exc}") from exc
    if value.startswith("-"):
        raise argparse.ArgumentTypeError(f"{text!r}: must be greater than or equal to 0")
    return value


# (flag, ClusterConfig field, default seconds, help). Help states the real Kubernetes default.
TIMING_FLAGS: tuple[tuple[str, str, float, str], ...] = (
    (
        "--node-monitor-grace",
        "node_monitor_grace",
        40.0,
        "how long a node may stay silent (no Lease renewal, no Ready heartbeat) before the node "
        "lifecycle controller marks it Unknown and taints it unreachable "
        "(kube-controller-manager --node-monitor-grace-period, real default 40s)",
    ),
    (
        "--node-monitor-period",
        "node_monitor_period",
        5.0,
        "how often the node lifecycle controller checks nodes "
        "(--node-monitor-period, real default 5s)",
    ),
    (
        "--default-toleration",
        "default_toleration",
        300.0,
        "tolerationSeconds the DefaultTolerationSeconds admission plugin gives every pod for the "
        "not-ready and unreachable NoExecute taints (kube-apiserver "
        "--default-not-ready-toleration-seconds / --default-unreachable-toleration-seconds, "
        "real default 300s); rounded to whole seconds",
    ),
    (
        "--pod-start-delay",
        "pod_start_delay",
        1.0,
        "time a fake kubelet takes to move a bound pod from Pending to Running (image pull + "
        "container start; no real default)",
    ),
    (
        "--pod-run-time",
        "pod_run_time",
        5.0,
        "how long the containers of Job-owned pods run before exiting 0 (no real default; a pod "
        "can set the kubesim.dev/run-time annotation instead)",
    ),
    (
        "--kubelet-termination-delay",
        "kubelet_termination_delay",
        1.0,
        "upper bound on how long a live kubelet takes to stop a deleted pod; it takes "
        "min(this, the pod's grace period) (real: as long as the containers need, up to "
        "terminationGracePeriodSeconds, default 30s)",
    ),
    (
        "--heartbeat-interval",
        "heartbeat_interval",
        10.0,
        "how often each kubelet renews its Lease in kube-node-lease (real default 10s, a "
        "quarter of --node-lease-duration-seconds=40)",
    ),
    (
        "--node-status-report-frequency",
        "node_status_report_frequency",
        300.0,
        "how often a kubelet re-posts unchanged node status (kubelet "
        "--node-status-report-frequency, real default 5m); changes are posted at the next "
        "heartbeat",
    ),
    (
        "--podgc-period",
        "podgc_period",
        20.0,
        "how often PodGC runs (gcCheckPeriod, real 20s, not configurable in Kubernetes)",
    ),
    (
        "--podgc-quarantine",
        "podgc_quarantine",
        40.0,
        "how long PodGC waits after a pod's node disappeared before force-deleting the pod "
        "(quarantineTime, real 40s, not configurable in Kubernetes)",
    ),
    (
        "--scheduler-retry",
        "scheduler_retry",
        1.0,
        "how often the scheduler retries unschedulable pods at the latest (real initial pod "
        "backoff 1s, growing to 10s; cluster changes retry at once in both)",
    ),
    (
        "--bookmark-interval",
        "bookmark_interval",
        60.0,
        "how often watches with allowWatchBookmarks receive a BOOKMARK (real: about 1m)",
    ),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kubesim",
        description="A Kubernetes API simulator with a fake cluster and fault injection.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = sub.add_parser(
        "serve",
        help="run the API server and the fake cluster",
        description=(
            "Run the kubesim API server with its controllers (scheduler, one fake kubelet per "
            "node, node lifecycle, taint eviction, PodGC, garbage collector, Job controller). "
            "Prints 'kubesim listening on URL (kubeconfig: FILE)' first; SIGTERM/SIGINT stop it "
            "cleanly (exit 0). Durations are Kubernetes-style: 500ms, 2s, 5m, 1h30m."
        ),
    )
    serve.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: 127.0.0.1)"
    )
    serve.add_argument(
        "--port",
        type=int,
        default=DEFAULT_PORT,
        help=f"port to listen on, 0 = any free port (default: {DEFAULT_PORT})",
    )
    serve.add_argument("--nodes", type=int, default=3, help="number of fake nodes (default: 3)")
    serve.add_argument(
        "--node-name-prefix",
        default="node-",
        help="nodes are named PREFIX1, PREFIX2, … (default: node-)",
    )
    serve.add_argument(
        "--node-cpu",
        type=_quantity,
        default="8",
        help="cpu capacity of each node, a quantity (default: 8)",
    )
    serve.add_argument(
        "--node-memory",
        type=_quantity,
        default="32Gi",
        help="memory capacity of each node, a quantity (default: 32Gi)",
    )
    serve.add_argument(
        "--node-gpu", type=int, default=0, help="nvidia.com/gpu capacity of each node (default: 0)"
    )
    serve.add_argument(
        "--node-max-pods",
        type=int,
        default=110,
        metavar="N",
        help="pods capacity of each node (kubelet --max-pods; default: 110, the real default)",
    )
    serve.add_argument(
        "--kubeconfig",
        default=None,
        help="where to write the kubeconfig (default: a temporary file, removed on exit)",
    )
    serve.add_argument(
        "--crd",
        action="append",
        default=[],
        metavar="FILE",
        help="CustomResourceDefinition YAML to register at start (repeatable, multi-doc OK)",
    )
    serve.add_argument(
        "--audit-objects",
        default="",
        metavar="KINDS",
        help="keep the committed body of these kinds in the write history (comma-separated, "
        "'*' for all; default none): a history checker sees status and phase at each commit",
    )
    serve.add_argument(
        "--builtin-crd",
        action="append",
        default=[],
        choices=sorted(BUILTIN_CRDS),
        metavar="NAME",
        help="register a CRD bundled with kubesim (repeatable): "
        + ", ".join(sorted(BUILTIN_CRDS))
        + " (kubeflow.org/v1 PyTorchJob, run by kubesim's stand-in for the training operator)",
    )
    serve.add_argument(
        "--no-controllers",
        action="store_true",
        help="serve the API only: no nodes, no scheduler, no kubelets",
    )
    serve.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the asyncio event loop to serve on (default: uvloop, libuv's: a watch event or a "
        "request waits less behind the others; asyncio: the standard library's own)",
    )
    for flag, _field, default, text in TIMING_FLAGS:
        serve.add_argument(
            flag,
            type=_duration,
            default=default,
            metavar="DURATION",
            help=f"{text}. kubesim default: {format_duration(default)}",
        )
    cli_flowcontrol.add_serve_arguments(serve)
    serve.add_argument("-v", "--verbose", action="store_true", help="log controller activity")

    ctl = sub.add_parser(
        "ctl",
        help="fault injection against a running simulator",
        description=(
            "Fault injection over HTTP. The server is --server, else $KUBESIM_URL, else "
            f"{DEFAULT_URL}. Exit codes: 0 ok, 1 API error, 2 usage, 3 unreachable."
        ),
    )
    ctl.add_argument("--server", default=None, help="simulator URL")
    actions = ctl.add_subparsers(dest="action", required=True, metavar="ACTION")
    lose = actions.add_parser("lose-node", help="stop a node's kubelet (no heartbeat, no pods)")
    lose.add_argument("name")
    recover = actions.add_parser("recover-node", help="bring a lost node's kubelet back")
    recover.add_argument("name")
    delete = actions.add_parser("delete-node", help="delete the Node object (PodGC then acts)")
    delete.add_argument("name")
    fin = actions.add_parser(
        "add-finalizer", help="add a finalizer to an object (e.g. to make a pod stick)"
    )
    fin.add_argument("kind", help="resource kind or plural, e.g. pod, pods, job, appwrapper")
    fin.add_argument("target", help="NAMESPACE/NAME (or NAME for cluster-scoped kinds)")
    fin.add_argument("finalizer")
    actions.add_parser("compact", help="compact watch history (older resourceVersions get 410)")
    fail = actions.add_parser("fail", help="make matching API requests fail or slow down")
    fail.add_argument("--path", default=None, help="regular expression on the request path")
    fail.add_argument("--code", type=int, default=None, help="HTTP status to answer")
    fail.add_argument("--count", type=int, default=None, help="how many requests (default: all)")
    fail.add_argument("--latency", type=_duration, default=None, help="delay before answering")
    fail.add_argument("--method", default=None, help="only this HTTP method")
    fail.add_argument(
        "--retry-after",
        type=int,
        default=None,
        metavar="S",
        help="add Retry-After / details.retryAfterSeconds (e.g. with --code 429)",
    )
    fail.add_argument("--clear", action="store_true", help="remove every failure rule")
    actions.add_parser("drop-watches", help="close every open watch (clients see EOF)")
    cli_flowcontrol.add_ctl_parser(actions)
    return parser


# ---- serve -------------------------------------------------------------------------------


def _serve(args: argparse.Namespace) -> int:
    import logging

    from kubesim.cluster import Cluster, ClusterConfig, ClusterError

    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
        stream=sys.stderr,
    )
    if args.nodes < 0:
        return _fail("--nodes must be >= 0", EXIT_USAGE)
    if args.node_max_pods < 1:
        return _fail("--node-max-pods must be >= 1", EXIT_USAGE)
    timings = {field: getattr(args, field) for _, field, _, _ in TIMING_FLAGS}
    try:
        flow_control = cli_flowcontrol.config_from_args(args)
    except FlowControlError as exc:
        return _fail(str(exc), EXIT_USAGE)
    try:
        config = ClusterConfig(
            nodes=args.nodes,
            node_name_prefix=args.node_name_prefix,
            node_cpu=args.node_cpu,
            node_memory=args.node_memory,
            node_gpu=args.node_gpu,
            node_max_pods=args.node_max_pods,
            crd_files=tuple(args.crd),
            builtin_crds=tuple(args.builtin_crd),
            enable_controllers=not args.no_controllers,
            flow_control=flow_control,
            audit_objects=tuple(k for k in args.audit_objects.split(",") if k.strip()),
            **timings,
        )
        cluster = Cluster(config, kubeconfig_path=args.kubeconfig)
    except ClusterError as exc:
        return _fail(str(exc), EXIT_USAGE)
    if args.event_loop == "uvloop":
        try:
            import uvloop
        except ImportError as exc:
            return _fail(f"--event-loop uvloop: {exc}; use --event-loop asyncio", EXIT_USAGE)
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return asyncio.run(_run_cluster(cluster, host=args.host, port=args.port))


async def _run_cluster(cluster: Any, *, host: str, port: int) -> int:
    from kubesim.cluster import ClusterError
    from kubesim.heap import keep_collections_short

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    try:
        url = await cluster.start(host=host, port=port)
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
            return _fail(f"cannot listen on {host}:{port}: {exc.strerror}", EXIT_UNREACHABLE)
        return _fail(f"cannot start: {exc}", EXIT_UNREACHABLE)
    except ClusterError as exc:
        return _fail(str(exc), EXIT_USAGE)
    keep_collections_short(loop)
    print(f"kubesim listening on {url} (kubeconfig: {cluster.kubeconfig_path})", flush=True)
    try:
        await stop.wait()
    finally:
        await cluster.stop()
    return EXIT_OK


def _fail(message: str, code: int) -> int:
    print(f"kubesim: error: {message}", file=sys.stderr)
    return code


# ---- ctl ---------------------------------------------------------------------------------


class CtlError(Exception):
    def __init__(self, message: str, code: int) -> None:
        super().__init__(message)
        self.code = code


def _request(
    server: str, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(server.rstrip("/") + path, data=data, method=method)
    req.add_header("Accept", "application/json")
    if data is not None:
        req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            text = resp.read().decode() or "{}"
    except urllib.error.HTTPError as exc:
        raw = exc.read().decode(errors="replace")
        try:
            message = json.loads(raw).get("message") or raw
        except ValueError:
            message = raw
        raise CtlError(f"{method} {path}: {exc.code} {message}".strip(), EXIT_API) from exc
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise CtlError(f"cannot reach kubesim at {server}: {reason}", EXIT_UNREACHABLE) from exc
    try:
        return json.loads(text)
    except ValueError:
        return {"raw": text}


def _resolve_kind(server: str, kind: str) -> tuple[str, bool]:
    """Find the collection path for a kind/plural/singular/short name through discovery."""
    wanted = kind.lower()
    groups: list[str] = ["/api/v1"]
    apis = _request(server, "GET", "/apis")
    for group in apis.get("groups") or []:
        preferred = (group.get("preferredVersion") or {}).get("groupVersion")
        if preferred:
            groups.append(f"/apis/{preferred}")
    for base in groups:
        listing = _request(server, "GET", base)
        for res in listing.get("resources") or []:
            name = str(res.get("name", ""))
            if "/" in name:
                continue
            names = {name, str(res.get("singularName", "")), str(res.get("kind", "")).lower()}
            names |= {str(s) for s in res.get("shortNames") or []}
            if wanted in {n.lower() for n in names if n}:
                return f"{base}/{name}", bool(res.get("namespaced"))
    raise CtlError(f'the server doesn\'t have a resource type "{kind}"', EXIT_API)


def _add_finalizer(server: str, kind: str, target: str, finalizer: str) -> str:
    collection, namespaced = _resolve_kind(server, kind)
    if namespaced:
        if "/" not in target:
            raise CtlError(f"{kind} is namespaced: give NAMESPACE/NAME, not {target!r}", EXIT_USAGE)
        namespace, name = target.split("/", 1)
        base, plural = collection.rsplit("/", 1)
        path = f"{base}/namespaces/{namespace}/{plural}/{name}"
    else:
        name = target.split("/")[-1]
        path = f"{collection}/{name}"
    obj = _request(server, "GET", path)
    meta = obj.get("metadata") or {}
    finalizers = list(meta.get("finalizers") or [])
    if finalizer in finalizers:
        return f"{target}: finalizer {finalizer} already present"
    # JSON patch guarded by the resourceVersion, so a concurrent edit is not overwritten.
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": meta.get("resourceVersion")},
        {"op": "add", "path": "/metadata/finalizers", "value": [*finalizers, finalizer]},
    ]
    _request(server, "PATCH", path, ops, content_type="application/json-patch+json")
    return f"{target}: finalizer {finalizer} added"


def _ctl(args: argparse.Namespace) -> int:
    server = args.server or os.environ.get("KUBESIM_URL") or DEFAULT_URL
    try:
        if args.action == "lose-node":
            _request(server, "POST", f"/kubesim/v1/nodes/{urllib.parse.quote(args.name)}/lose")
            print(f"node/{args.name} lost")
        elif args.action == "recover-node":
            _request(server, "POST", f"/kubesim/v1/nodes/{urllib.parse.quote(args.name)}/recover")
            print(f"node/{args.name} recovered")
        elif args.action == "delete-node":
            _request(server, "DELETE", f"/api/v1/nodes/{urllib.parse.quote(args.name)}")
            print(f'node "{args.name}" deleted')
        elif args.action == "add-finalizer":
            print(_add_finalizer(server, args.kind, args.target, args.finalizer))
        elif args.action == "compact":
            result = _request(server, "POST", "/kubesim/v1/compact")
            print(f"compacted at resourceVersion {result.get('resourceVersion')}")
        elif args.action == "drop-watches":
            result = _request(server, "POST", "/kubesim/v1/drop-watches")
            print(f"dropped {result.get('dropped', 0)} watches")
        elif args.action == "flowcontrol":
            print(cli_flowcontrol.run_ctl(server, args, _request))
        elif args.action == "fail":
            if args.clear:
                _request(server, "DELETE", "/kubesim/v1/fail")
                print("failure rules cleared")
                return EXIT_OK
            if args.code is None and args.latency is None:
                raise CtlError("fail needs --code and/or --latency (or --clear)", EXIT_USAGE)
            rule = {
                "path": args.path or ".*",
                "code": args.code,
                "count": args.count,
                "latency": args.latency or 0.0,
                "method": args.method,
                "retryAfter": args.retry_after,
            }
            result = _request(server, "POST", "/kubesim/v1/fail", rule)
            print(f"failure rule added ({result.get('rules', '?')} active)")
    except CtlError as exc:
        return _fail(str(exc), exc.code)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve":
        return _serve(args)
    return _ctl(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
