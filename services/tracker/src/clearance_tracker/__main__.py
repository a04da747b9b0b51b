"""`clearance-tracker`: run the deletion tracker (configuration from the environment)."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence

from clearance import stopping
from clearance.bus import BusError
from clearance.entrypoint import Command, run_command
from clearance_tracker.settings import TrackerSettings

COMMAND = Command(
    prog="clearance-tracker",
    usage="""\
usage: clearance-tracker [--help]

The Clearance deletion tracker: records each teardown the dispatcher starts, confirms every
object gone by UID (watch events, GET, quorum LIST), escalates stuck deletions (alert, force
delete, optional finalizer removal) and publishes `cleared` only on a verified empty view.
Kubernetes access: CLEARANCE_KUBECONFIG, else $KUBECONFIG, else the in-cluster service account.""",
    unexpected="{prog}: unexpected arguments {args!r}\n\n{usage}\n",
)


async def _run(settings: TrackerSettings) -> int:
    from clearance_tracker.service import run

    stop = asyncio.Event()
    stopping.install(stop, grace=settings.shutdown_grace)
    return await run(settings, stop=stop)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(COMMAND, TrackerSettings, _serve, argv)


def _serve(settings: TrackerSettings) -> int:
    # Imported here: kubernetes-asyncio is slow to import and --help does not need it.
    from kubernetes_asyncio.config.config_exception import ConfigException

    try:
        return asyncio.run(_run(settings))
    except BusError as exc:
        print(f"{COMMAND.prog}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # e.g. the HTTP port is taken
        print(f"{COMMAND.prog}: {exc}", file=sys.stderr)
        return 1
    except ConfigException as exc:  # no usable kubeconfig / in-cluster configuration
        print(f"{COMMAND.prog}: Kubernetes configuration: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":
    sys.exit(main())
