"""The simulator's heap and CPython's garbage collector: no stop-the-world pause that grows.

kubesim keeps every object, a ring of changes and the audit log (the write history) as plain
dicts and lists, all tracked by CPython's cyclic collector. A full collection walks every one
of them with the event loop stopped: in the clearance benchmark it took 38 ms halfway through
a run and 66-70 ms at its end, and every request, watch line and controller step waited. A
real API server (Go, a concurrent collector) does not stop for tens of milliseconds, so the
pause was the simulator's, charged to the services measured against it.

:func:`keep_collections_short` freezes (``gc.freeze``) what is alive once the server is up,
and again right after every collection of the middle or oldest generation: what survived two
young collections is then set aside, and a full collection walks only the little promoted
since. (Freezing only after full collections left 21 ms pauses every ~20 s of load.) Dropped
objects are still freed by reference counting, and cycles that die young are still
collected; the cost is that a reference cycle among frozen objects that becomes garbage later
is never reclaimed, which for a simulator whose data are acyclic JSON values is a small leak.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

_MIDDLE = 1


def keep_collections_short(loop: asyncio.AbstractEventLoop) -> None:
    """Freeze the heap now and after every collection of an older generation (from ``loop``,
    between callbacks)."""
    gc.collect()
    gc.freeze()

    def after(phase: str, info: dict[str, Any]) -> None:
        if phase == "stop" and info.get("generation", 0) >= _MIDDLE and not loop.is_closed():
            loop.call_soon_threadsafe(gc.freeze)

    gc.callbacks.append(after)
