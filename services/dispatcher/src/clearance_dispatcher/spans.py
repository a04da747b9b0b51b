"""The cycle root span (``requeue.cycle``) survives a restart of the dispatcher.

The root is started in memory at the requeue decision and ended at the redispatch (or at the
``cleared`` of a Failed attempt). Its ids are in ``status.clearance.cycleTraceparent`` and its
start time in ``status.clearance.cycleStartedAt``, so a process that does not hold the live
span (it was started by a replica that died) emits it itself, *with those ids* and the
original start time: every span of the cycle, whoever made it, then has its parent. The
technique is the tracker's for ``deletion.await`` (:mod:`clearance.spanids`); for a root the
trace id is preset too (a root has no parent to inherit it from).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from clearance import spanids
from clearance.spanids import PresetIds, ids_of, install, nanos

__all__ = ["PresetIds", "ids_of", "install", "nanos", "preset_ids"]


@contextlib.contextmanager
def preset_ids(trace_id: int, span_id: int) -> Iterator[None]:
    """The next span (a cycle root) gets these trace and span ids."""
    with spanids.preset_ids(span_id=span_id, trace_id=trace_id):
        yield
