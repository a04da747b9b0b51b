"""Refusal of a spec that cannot be dispatched: the Failed condition, the Event, ``failed``.

What is wrong comes from :mod:`clearance_dispatcher.appwrapper` (the spec alone) and from
discovery (:meth:`Validation.kinds_served`: every item's kind must be served by the API). The
AppWrapper goes ``Invalid`` for this ``metadata.generation`` and is looked at again only when the
spec changes. ``failed`` carries the attempt that would have been dispatched
(:attr:`~clearance_dispatcher.bookkeeping.ClearanceStatus.refused_attempt`) and the refused
generation.
"""

from __future__ import annotations

import contextlib
import logging

from clearance import bus
from clearance.discovery import UnknownKind
from clearance.events import CycleFailed
from clearance_dispatcher import transitions
from clearance_dispatcher.appwrapper import UNKNOWN_KIND, AppWrapperSpec, Problem
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.state import Entry, Key
from clearance_dispatcher.transitions import MESSAGE_LIMIT

log = logging.getLogger(__name__)


class Validation:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    async def refuse(self, key: Key, entry: Entry, problems: tuple[Problem, ...]) -> None:
        rt = self.rt
        reason = problems[0].reason
        message = "; ".join(p.message for p in problems)
        generation = entry.generation
        refused = entry.observed.clearance.refused_attempt
        now = rt.now()
        written = await rt.write(
            key,
            lambda obs: transitions.mark_invalid(
                obs, generation=generation, reason=reason, message=message, now=now
            ),
        )
        if written is None:
            return
        rt.metrics.failures.labels(reason).inc()
        log.warning(
            "invalid appwrapper",
            extra={"aw": f"{key[0]}/{key[1]}", "reason": reason, "error": message},
        )
        await rt.warn(entry, reason, message, key=f"invalid:{generation}")
        with contextlib.suppress(bus.PublishError):
            await rt.publish(
                CycleFailed(
                    appwrapper=rt.ref(entry),
                    attempt=refused,
                    occurred_at=now,
                    reason=reason,
                    message=message[:MESSAGE_LIMIT],
                    generation=generation or None,
                )
            )

    async def kinds_served(self, key: Key, entry: Entry, spec: AppWrapperSpec) -> bool:
        """Every item's kind is served by the API (discovery); else the spec is refused."""
        problems = []
        for item in spec.items:
            try:
                await self.rt.discovery.resolve(item.api_version, item.kind)
            except UnknownKind as exc:
                problems.append(
                    Problem(
                        UNKNOWN_KIND,
                        f"spec.resources.GenericItems[{item.index}].generictemplate: {exc}",
                    )
                )
        if problems:
            await self.refuse(key, entry, tuple(problems))
            return False
        return True
