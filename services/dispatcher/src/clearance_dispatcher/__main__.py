"""``clearance-dispatcher``: run the dispatcher (configuration from ``CLEARANCE_*`` variables)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from clearance import stopping
from clearance.entrypoint import Command, run_command
from clearance_dispatcher.settings import DispatcherSettings

COMMAND = Command(
    prog="clearance-dispatcher",
    usage="""\
usage: clearance-dispatcher [--help]

MCAD-compatible AppWrapper dispatcher that redispatches a requeued AppWrapper only after the
tracker's `cleared` event for its previous attempt. Kubernetes access from KUBECONFIG or the
in-cluster service account.""",
)


def main(argv: Sequence[str] | None = None) -> int:
    return run_command(COMMAND, DispatcherSettings, _serve, argv)


def _serve(settings: DispatcherSettings) -> int:
    return asyncio.run(_run(settings))


async def _run(settings: DispatcherSettings) -> int:
    from clearance_dispatcher.service import Service

    stop = asyncio.Event()
    stopping.install(stop, grace=settings.shutdown_grace)
    return await Service(settings).run(stop)


if __name__ == "__main__":
    raise SystemExit(main())
