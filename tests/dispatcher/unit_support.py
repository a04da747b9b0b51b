"""Shared inputs of the dispatcher's unit tests (no servers)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from tests.support.dispatcher_env import job_appwrapper

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def appwrapper_raw(**kw: Any) -> dict[str, Any]:
    """A Job AppWrapper as the API returns it (uid, generation, resourceVersion set)."""
    raw = job_appwrapper("aw", "ns", **kw)
    raw["metadata"].update(
        uid="u-1", generation=1, resourceVersion="1", creationTimestamp="2026-01-01T00:00:00Z"
    )
    return raw
