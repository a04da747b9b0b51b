"""Kubernetes timestamps as the services write and read them.

Writes use ``MicroTime`` (RFC 3339 in UTC with microseconds and ``Z``), the form the Lease and
MCAD's ``*MicroTime`` fields carry; a ``Time`` field accepts it too. Reads accept ``Z`` or an
offset and refuse a timestamp without a zone (None), so no local clock ever enters a decision.
"""

from __future__ import annotations

from datetime import UTC, datetime


def micro_time(moment: datetime) -> str:
    """``moment`` as a Kubernetes ``MicroTime`` string (UTC, microseconds, ``Z``)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(value: object) -> datetime | None:
    """An RFC 3339 timestamp with ``Z`` or an offset as an aware datetime; anything else
    (not a string, empty, unparseable, no zone): None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None
