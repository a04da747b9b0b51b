"""A dispatcher replica whose leader term is over leaves every ``cleared`` to the leader."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import pytest

from clearance.bus import Retry
from clearance.events import AppWrapperRef, CycleCleared
from clearance.fencing import Term
from clearance_dispatcher.handlers import Handlers


def _handlers(term: Term) -> Handlers:
    # Stand-in runtime: only the fence is read before the term decides.
    rt: Any = SimpleNamespace(kube=SimpleNamespace(fence=term))
    return Handlers(rt, roots=None, admission=None, dispatch=None)  # type: ignore[arg-type]


async def test_a_deposed_dispatcher_redelivers_a_cleared_instead_of_acking_it() -> None:
    # Found by make chaos (seed 58): the old leader, exiting after losing its lease, took the
    # cleared from the shared consumer, judged it stale on its old cache and acked it; the new
    # leader never saw it and the AppWrapper stayed in TearingDown.
    term = Term(name="clearance-dispatcher", duration=2.0)
    term.began(sent_at=0.0)
    term.ended()
    now = datetime.now(UTC)
    event = CycleCleared(
        appwrapper=AppWrapperRef(namespace="default", name="aw0", uid="u"),
        attempt=1,
        occurred_at=now,
        cleared_at=now,
    )
    with pytest.raises(Retry):
        await _handlers(term).handle_cleared(event, delivery=None)  # type: ignore[arg-type]
