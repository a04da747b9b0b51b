"""Coalesced quorum LISTs: one LIST per namespace and kind serves every teardown asking for it.

This module owns the sharing of verification LISTs between teardowns. When a burst clears
many teardowns of one namespace at once, each asks for a quorum LIST of its AppWrapper's
objects; instead of one LIST each, the requests for one (apiVersion, kind, namespace) form
a lane: at most one LIST of a lane is in flight, and every request that arrives meanwhile
joins the next one, which selects all of their AppWrappers at once
(``appwrapper.mcad.ibm.com in (a,b,…)``, at most ``max_values`` of them). Each requester
gets exactly the objects carrying its own label value, as its own LIST would have shown.

Freshness is kept by construction: a request only ever joins a LIST that has not been sent
yet, so the LIST it gets is issued after the request was made — after the DELETED event that
prompted it was seen (confirmation.py's rule for a verification's reads).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from clearance import labels
from clearance.events import NodeObject
from clearance_tracker.confirmation import Snapshot

LaneKey = tuple[str, str, str]
"""(apiVersion, kind, namespace)."""

Fetch = Callable[[str, str, str, str], Awaitable[list[Snapshot]]]
"""LIST of (apiVersion, kind, namespace, label selector) → the objects it shows."""


def selector_of(values: list[str]) -> str:
    """The AppWrapper-label selector of one or more label values."""
    if len(values) == 1:
        return f"{labels.MCAD_APPWRAPPER}={values[0]}"
    return f"{labels.MCAD_APPWRAPPER} in ({','.join(sorted(values))})"


def _fail(futures: Iterable[asyncio.Future[Any]], exc: BaseException) -> None:
    """Hand the LIST's failure to every requester still waiting for it."""
    for future in futures:
        if not future.done():
            future.set_exception(exc)


@dataclass
class _Lane:
    waiting: dict[str, list[asyncio.Future[list[Snapshot]]]] = field(default_factory=dict)
    running: bool = False


class CoalescedLists:
    """Quorum LISTs by AppWrapper label, shared by the requests of one namespace and kind."""

    def __init__(self, fetch: Fetch, *, max_values: int = 50) -> None:
        self.fetch = fetch
        self.max_values = max_values
        self._lanes: dict[LaneKey, _Lane] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self.lists_sent = 0
        """LISTs issued (for tests and the benchmark's accounting)."""

    async def by_label(
        self, api_version: str, kind: str, namespace: str, value: str
    ) -> list[Snapshot]:
        """The objects of `kind` in `namespace` whose AppWrapper label is `value`, from a
        quorum LIST issued after this call."""
        key = (api_version, kind, namespace)
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        future: asyncio.Future[list[Snapshot]] = asyncio.get_running_loop().create_future()
        lane.waiting.setdefault(value, []).append(future)
        if not lane.running:
            lane.running = True
            task = asyncio.create_task(self._drain(key, lane), name=f"tracker:list:{namespace}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await future

    async def _drain(self, key: LaneKey, lane: _Lane) -> None:
        api_version, kind, namespace = key
        try:
            while lane.waiting:
                await asyncio.sleep(0)  # requests made in the same turn join this LIST
                values = list(lane.waiting)[: self.max_values]
                batch = {value: lane.waiting.pop(value) for value in values}
                self.lists_sent += 1
                try:
                    found = await self.fetch(api_version, kind, namespace, selector_of(values))
                except BaseException as exc:
                    _fail((f for futures in batch.values() for f in futures), exc)
                    if isinstance(exc, asyncio.CancelledError):
                        raise
                    continue
                by_value: dict[str, list[Snapshot]] = {}
                for snapshot in found:
                    value = snapshot.metadata.labels.get(labels.MCAD_APPWRAPPER)
                    if value is not None:
                        by_value.setdefault(value, []).append(snapshot)
                for value, futures in batch.items():
                    for future in futures:
                        if not future.done():
                            future.set_result(list(by_value.get(value, ())))
        finally:
            lane.running = False
            # only when cancelled: no LIST will come
            abandoned = RuntimeError("coalesced LIST abandoned")
            _fail((f for futures in lane.waiting.values() for f in futures), abandoned)
            lane.waiting.clear()
            if self._lanes.get(key) is lane:
                del self._lanes[key]


class SharedNodeList:
    """Quorum LISTs of every node, one shared by the diagnoses asking at once.

    Same rule as a lane above: a request joins a LIST not sent yet (issued after the request),
    never one already in flight. A rack loss puts many teardowns at their stuck alert in the
    same second; each used to GET every node its pods ran on."""

    def __init__(self, fetch: Callable[[], Awaitable[dict[str, NodeObject]]]) -> None:
        self.fetch = fetch
        self._next: asyncio.Future[dict[str, NodeObject]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.lists_sent = 0

    async def nodes(self) -> dict[str, NodeObject]:
        """Every node by name, from a LIST issued after this call."""
        if self._next is None:
            self._next = asyncio.get_running_loop().create_future()
            task = asyncio.create_task(self._send(), name="tracker:list:nodes")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(self._next)

    async def _send(self) -> None:
        await asyncio.sleep(0)  # requests made in the same turn join this LIST
        future, self._next = self._next, None
        assert future is not None
        self.lists_sent += 1
        try:
            found = await self.fetch()
        except BaseException as exc:
            _fail((future,), exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        if not future.done():
            future.set_result(found)
