"""`clearance-tracker`: run the deletion tracker (configuration from the environment)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from clearance import stopping
from clearance.bus import BusError
from clearance.settings import OTEL_HELP, SettingsError
from clearance.telemetry import setup_logging
from clearance_tracker.settings import TrackerSettings

USAGE = """\
usage: clearance-tracker [--help]

The Clearance deletion tracker: records each teardown the dispatcher starts, confirms every
object gone by UID (watch events, GET, quorum LIST), escalates stuck deletions (alert, force
delete, optional finalizer removal) and publishes `cleared` only on a verified empty view.
Kubernetes access: CLEARANCE_KUBECONFIG, else $KUBECONFIG, else the in-cluster service account.
"""


def help_text() -> str:
    return USAGE + "\n" + TrackerSettings.render_help() + "\n" + OTEL_HELP


async def _serve(settings: TrackerSettings) -> None:
    from clearance_tracker.service import run

    stop = asyncio.Event()
    stopping.install(stop, grace=settings.shutdown_grace)
    await run(settings, stop=stop)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if any(a in ("-h", "--help") for a in args):
        print(help_text())
        return 0
    if args:
        print(f"clearance-tracker: unexpected arguments {args!r}\n\n{USAGE}", file=sys.stderr)
        return 2
    try:
        settings = TrackerSettings.from_env()
    except SettingsError as exc:
        print(f"clearance-tracker: {exc}", file=sys.stderr)
        return 2
    setup_logging(settings.log_level, fmt=settings.log_format)
    # Imported here: kubernetes-asyncio is slow to import and --help does not need it.
    from kubernetes_asyncio.config.config_exception import ConfigException

    try:
        asyncio.run(_serve(settings))
    except BusError as exc:
        print(f"clearance-tracker: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the HTTP port is taken
        print(f"clearance-tracker: {exc}", file=sys.stderr)
        return 1
    except ConfigException as exc:  # no usable kubeconfig / in-cluster configuration
        print(f"clearance-tracker: Kubernetes configuration: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
