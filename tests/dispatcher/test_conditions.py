"""Conditions: one per type, upserted, an unchanged one never rewritten."""

from __future__ import annotations

import copy
from datetime import timedelta
from typing import Any

from tests.dispatcher.unit_support import T0

from clearance_dispatcher.status import with_conditions


def test_conditions_are_upserted_and_unchanged_ones_not_rewritten() -> None:
    raw: dict[str, Any] = {"status": {}}
    first = with_conditions(raw, {"Queueing": (True, "A", "m")}, now=T0)
    assert first is not None and first[0]["lastTransitionMicroTime"].startswith("2026-01-01")
    raw["status"]["conditions"] = first
    assert with_conditions(raw, {"Queueing": (True, "A", "m")}, now=T0) is None
    assert with_conditions(raw, {"Never": (False, "x", "")}, now=T0) is None
    later = with_conditions(
        copy.deepcopy(raw), {"Queueing": (False, "B", "")}, now=T0 + timedelta(seconds=5)
    )
    assert later is not None and len(later) == 1 and later[0]["status"] == "False"
