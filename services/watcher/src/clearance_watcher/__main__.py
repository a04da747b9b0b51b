"""``clearance-watcher``: list-then-watch Kubernetes, publish slim events to JetStream.

Configuration comes only from the environment (``--help`` lists every variable). Exit
codes: 0 after an orderly shutdown (SIGTERM/SIGINT), 2 for bad configuration (one line per
offending variable, no traceback), 1 when start-up fails (NATS or the API unreachable).
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence

from opentelemetry import trace
from opentelemetry.trace import Tracer
from prometheus_client import CollectorRegistry

from clearance import bus, stopping
from clearance.entrypoint import Command, run_command
from clearance.kube import Kube, KubeConfig, KubeError, user_agent
from clearance.tasks import TaskCrashed
from clearance.telemetry import HealthServer, setup_tracing
from clearance_watcher.metrics import WatcherMetrics
from clearance_watcher.service import Watcher
from clearance_watcher.settings import WatcherSettings

log = logging.getLogger("clearance_watcher")

PROG = "clearance-watcher"
COMMAND = Command(
    prog=PROG,
    usage=f"usage: {PROG} [--help]   (configuration from environment variables)",
    unexpected="{prog}: unexpected arguments {words!r}\n{usage}",
    invalid="{prog}: invalid setting: {error}",
    invalid_each=True,
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(COMMAND, WatcherSettings, _serve, argv)


def _serve(settings: WatcherSettings) -> int:
    try:
        return asyncio.run(run(settings))
    except KeyboardInterrupt:
        return 0


async def run(settings: WatcherSettings) -> int:
    stop = asyncio.Event()
    stopping.install(stop, grace=settings.shutdown_grace)

    registry = CollectorRegistry()
    metrics = WatcherMetrics(registry)
    bus_metrics = bus.BusMetrics(registry)
    provider = setup_tracing(PROG)
    tracer: Tracer = (
        provider.get_tracer("clearance_watcher") if settings.trace_events else trace.NoOpTracer()
    )
    health = HealthServer(registry=registry, host=settings.http_host, port=settings.http_port)
    # /readyz must fail until the real checks replace this one (no check = ready).
    health.add_check("started", lambda: False)
    await health.start()
    log.info("health server listening", extra={"port": health.port})

    try:
        kube = await Kube.connect(
            KubeConfig(
                kubeconfig=str(settings.kubeconfig) if settings.kubeconfig else None,
                user_agent=user_agent("watcher", settings.resolved_lease_identity()),
                qps=settings.kube_qps,
                burst=settings.kube_burst,
                max_retries=settings.kube_max_retries,
            )
        )
    except Exception as exc:
        log.error(
            "cannot load Kubernetes configuration", extra={"error": f"{type(exc).__name__}: {exc}"}
        )
        await health.stop()
        return 1
    try:
        nc = await bus.connect(settings, name=PROG, drain_timeout=settings.shutdown_timeout)
    except bus.BusError as exc:
        log.error("cannot connect to NATS", extra={"error": str(exc)})
        await kube.close()
        await health.stop()
        return 1

    watcher = Watcher(
        settings=settings,
        kube=kube,
        nc=nc,
        metrics=metrics,
        bus_metrics=bus_metrics,
        tracer=tracer,
        cycle_tracer=provider.get_tracer("clearance_watcher"),
    )
    metrics.oldest_pending.set_function(watcher.oldest_pending)
    health.add_check("nats connected", lambda: nc.is_connected)
    health.add_check("watches synced (or standby of a live leader)", watcher.ready)
    health.remove_check("started")
    code = 0
    try:
        await watcher.run(stop)
    except (KubeError, bus.BusError, TaskCrashed) as exc:
        log.error("watcher failed", extra={"error": f"{type(exc).__name__}: {exc}"})
        code = 1
    finally:
        log.info("shutting down")
        await bus.shutdown(nc, timeout=settings.shutdown_timeout)
        await kube.close()
        await health.stop()
        provider.shutdown()
    log.info("stopped", extra={"exit_code": code})
    return code


if __name__ == "__main__":
    sys.exit(main())
