"""Triage's lanes (pure, on cached entries): which reconcile is a first look, which a dispatch."""

from __future__ import annotations

from typing import Any

import pytest
from tests.dispatcher.unit_support import appwrapper_raw

from clearance_dispatcher.appwrapper import parse_appwrapper
from clearance_dispatcher.state import Entry
from clearance_dispatcher.triage import dispatching, first_look


def entry(phase: str | None, *, admitted: bool = False, deleting: bool = False) -> Entry:
    raw: dict[str, Any] = appwrapper_raw()
    if phase is not None:
        raw["status"] = {"clearance": {"phase": phase, "attempt": 1}}
    if deleting:
        raw["metadata"]["deletionTimestamp"] = "2026-01-01T00:01:00Z"
    parsed = parse_appwrapper(raw)
    made = Entry(raw=raw, parsed=parsed, last_valid=None)
    made.local.admitted = admitted
    return made


def test_a_gang_in_dispatching_is_a_dispatch() -> None:
    assert dispatching(entry("Dispatching"))


@pytest.mark.parametrize("phase", [None, "Queued"])
def test_an_admitted_appwrapper_is_a_dispatch(phase: str | None) -> None:
    assert dispatching(entry(phase, admitted=True))


@pytest.mark.parametrize("phase", ["Queued", "Dispatched", "TearingDown", "Failed", "Completed"])
def test_teardowns_monitoring_and_waiting_are_not_dispatches(phase: str) -> None:
    assert not dispatching(entry(phase))


def test_an_appwrapper_being_deleted_is_not_a_dispatch() -> None:
    assert not dispatching(entry("Dispatching", deleting=True))


def test_a_dispatch_is_not_a_first_look() -> None:
    assert not first_look(entry("Dispatching"))
