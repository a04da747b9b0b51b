"""``clearance-dispatcher``: run the dispatcher (configuration from ``CLEARANCE_*`` variables)."""

from __future__ import annotations

import asyncio
import sys

from clearance import stopping
from clearance.settings import OTEL_HELP, SettingsError
from clearance.telemetry import setup_logging
from clearance_dispatcher.settings import DispatcherSettings

USAGE = """\
usage: clearance-dispatcher [--help]

MCAD-compatible AppWrapper dispatcher that redispatches a requeued AppWrapper only after the
tracker's `cleared` event for its previous attempt. Kubernetes access from KUBECONFIG or the
in-cluster service account.
"""


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in args):
        print(USAGE)
        print(DispatcherSettings.render_help())
        print(OTEL_HELP)
        return 0
    if args:
        print(f"clearance-dispatcher: unexpected arguments {args!r}; see --help", file=sys.stderr)
        return 2
    try:
        settings = DispatcherSettings.from_env()
    except SettingsError as exc:
        print(f"clearance-dispatcher: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, fmt=settings.log_format)
    return asyncio.run(_run(settings))


async def _run(settings: DispatcherSettings) -> int:
    from clearance_dispatcher.service import Service

    stop = asyncio.Event()
    stopping.install(stop, grace=settings.shutdown_grace)
    return await Service(settings).run(stop)


if __name__ == "__main__":
    raise SystemExit(main())
