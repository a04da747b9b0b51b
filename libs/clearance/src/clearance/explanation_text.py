"""``clearance explain``'s two outputs for an :class:`~clearance.explanation.Explanation`.

:func:`render` is one screen for a person: a label column (``state``, ``cycle``,
``timeline``, ``blocking``, ``next``, ``unblock``) and the facts beside it, times in UTC with the
seconds since ``teardown.started`` in the timeline. :func:`as_json` is the same content as one
JSON document for scripts (times RFC 3339, causes tagged by ``cause`` as in the alerts).
Both are pure.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import msgspec

from clearance.blockers import Blocker
from clearance.causes import cause_text
from clearance.explanation import Explanation, TimelineEntry

LABEL = 12
"""Width of the label column."""


def _at(moment: datetime) -> str:
    return f"{moment.astimezone(UTC):%H:%M:%S}Z"


def _line(label: str, text: str) -> str:
    return f"{label:<{LABEL}}{text}".rstrip()


def _entry(entry: TimelineEntry) -> str:
    since = "" if entry.since_teardown is None else f"{entry.since_teardown:+.1f}s"
    return f"  {_at(entry.at)} {since:>8}  {entry.event:<22} {entry.detail}".rstrip()


def _blocker(blocker: Blocker) -> list[str]:
    obj = blocker.object
    attempt = f"attempt {obj.attempt}" if obj.attempt is not None else "no attempt label"
    where = f" on node {obj.node}" if obj.node else ""
    lines = [f"  {obj.kind.lower()} {obj.name} ({attempt}, uid {obj.uid}){where}:"]
    lines.extend(f"    - {cause_text(c)}" for c in blocker.causes)
    if blocker.node_note:
        lines.append(f"    ({blocker.node_note})")
    return lines


def _state(x: Explanation) -> str:
    limit = f"of at most {x.max_requeuings}" if x.max_requeuings > 0 else "(no limit)"
    parts = [
        x.state or "no state",
        f"phase {x.phase or '-'}",
        f"attempt {x.attempt}",
        f"requeues {x.requeues} {limit}",
    ]
    return " · ".join(parts)


def _cycle(x: Explanation) -> str:
    started = x.teardown_started_at
    text = f"attempt {x.cycle_attempt} torn down"
    if started is not None:
        text += f" from {_at(started)}"
        if x.teardown_open:
            text += f" ({(x.now - started).total_seconds():.0f}s ago), not cleared yet"
        elif x.cleared_at is not None:
            took = (x.cleared_at - started).total_seconds()
            text += f", cleared at {_at(x.cleared_at)} after {took:.1f}s"
    if x.reason:
        text += f", reason {x.reason}"
    if x.trace_id:
        text += f", trace {x.trace_id}"
    return text


def render(x: Explanation) -> list[str]:
    """The screen, as lines (no trailing newline)."""
    read = x.now.astimezone(UTC)
    lines = [
        f"AppWrapper {x.namespace}/{x.name}  uid {x.uid}  (read {read:%Y-%m-%d %H:%M:%S}Z)",
        _line("state", _state(x)),
    ]
    if x.conditions:
        lines.append(_line("conditions", ", ".join(x.conditions)))
    if x.cycle_attempt is None:
        lines.append(_line("cycle", "none: never requeued"))
    else:
        lines.append(_line("cycle", _cycle(x)))
        lines.append(_line("timeline", "(UTC, seconds since teardown.started)"))
        lines.extend(_entry(e) for e in x.timeline)
        if not x.timeline:
            lines.append("  (no events of this cycle on the streams)")
    if x.teardown_open:
        lines.append(_line("blocking", f"{len(x.blocking)} object(s)"))
        for blocker in x.blocking:
            lines.extend(_blocker(blocker))
    elif x.cycle_attempt is not None:
        lines.append(_line("blocking", "nothing"))
    when = f" at {_at(x.next.at)}" if x.next.at is not None else ""
    due = f" ({x.next.due})" if x.next.due else ""
    lines.append(_line("next", f"{x.next.what}{when}{due}: {x.next.detail}"))
    commands = [c for b in x.blocking for c in b.commands]
    if commands:
        lines.append(_line("unblock", "once you know the holders cannot finish, run:"))
        lines.extend(f"  {c}" for c in commands)
    return lines


def as_json(x: Explanation) -> str:
    """The explanation as one JSON document (indented for reading, stable key order)."""
    document: dict[str, Any] = msgspec.to_builtins(x)
    return json.dumps(document, indent=2)
