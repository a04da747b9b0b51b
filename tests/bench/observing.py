"""The benchmarks' own eyes: a pod watch on the API and a cycle-event follower on NATS.

Both are load-generator-side observers, independent of the services measured:

* :class:`PodLedger` lists then watches every pod carrying an AppWrapper label and stamps each
  ADDED / DELETED with ``time.time()`` on arrival. Deletion and redispatch-create times come
  from the same watch stream, so its delivery delay cancels out of their difference;
* :class:`CycleFollower` reads ``CLEARANCE_CYCLE`` with an ordered consumer and keeps, per
  event, the JetStream store time (stamped by nats-server on this machine's clock) and the
  arrival time.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import msgspec
from nats.aio.client import Client as NatsClient
from nats.js import api
from tests.support.serverclock import Commit

from clearance import events, labels, subjects
from clearance.kube import PODS, Kube, KubeError


class _Meta(msgspec.Struct):
    # Defaults everywhere: BOOKMARK objects carry only a resourceVersion.
    name: str = ""
    uid: str = ""
    resourceVersion: str = ""  # Kubernetes wire name
    labels: dict[str, str] = {}


class _Obj(msgspec.Struct):
    metadata: _Meta


_OBJ = msgspec.json.Decoder(_Obj)


@dataclass(frozen=True, slots=True)
class PodFact:
    at: float
    action: str
    aw: str
    attempt: int | None
    uid: str
    name: str


@dataclass
class PodLedger:
    """ADDED/DELETED of labelled pods in one namespace, timestamped on arrival."""

    kube: Kube
    namespace: str
    facts: list[PodFact] = field(default_factory=list)
    added: dict[tuple[str, int], float] = field(default_factory=dict)
    """(aw, attempt) → first ADDED of a pod of that attempt."""
    deleted: dict[tuple[str, int], float] = field(default_factory=dict)
    """(aw, attempt) → last DELETED of a pod of that attempt so far."""
    restarts: int = 0
    _task: asyncio.Task[None] | None = None

    async def start(self) -> PodLedger:
        listed = await self._relist()
        self._task = asyncio.create_task(self._watch(listed.resource_version))
        return self

    async def _relist(self) -> Any:
        return await self.kube.list(
            PODS, namespace=self.namespace, label_selector=labels.ANY_APPWRAPPER
        )

    async def _watch(self, rv: str) -> None:
        while True:
            try:
                async for line in self.kube.watch(
                    PODS,
                    resource_version=rv,
                    namespace=self.namespace,
                    label_selector=labels.ANY_APPWRAPPER,
                    timeout_seconds=600,
                ):
                    now = time.time()
                    if line.type == "ERROR":
                        # Expired (410): start over from a fresh LIST; the cycles whose
                        # events fell in the gap are left out of the figures.
                        self.restarts += 1
                        rv = (await self._relist()).resource_version
                        break
                    meta = _OBJ.decode(line.object).metadata
                    rv = meta.resourceVersion or rv
                    if line.type not in ("ADDED", "DELETED"):
                        continue
                    aw = meta.labels.get(labels.MCAD_APPWRAPPER, "")
                    attempt = labels.attempt_of(meta.labels)
                    self.facts.append(PodFact(now, line.type, aw, attempt, meta.uid, meta.name))
                    if attempt is None:
                        continue
                    if line.type == "ADDED":
                        self.added.setdefault((aw, attempt), now)
                    else:
                        self.deleted[(aw, attempt)] = now
            except KubeError:
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


@dataclass(frozen=True, slots=True)
class Seen:
    event: events.Event
    stored: float
    """JetStream store time (epoch seconds, nats-server clock)."""
    arrived: float


def cycle_filter(namespace: str = "*", event: str = ">") -> str:
    ns = namespace if namespace == "*" else subjects.encode_token(namespace)
    return f"clearance.cycle.v1.{ns}.*.{event}" if event != ">" else f"clearance.cycle.v1.{ns}.>"


@dataclass
class CycleFollower:
    """Every cycle event matching a subject filter, with store and arrival times."""

    nc: NatsClient
    subject: str
    """Filter, e.g. ``clearance.cycle.v1.default.>`` (see :func:`cycle_filter`)."""
    on_event: Callable[[Seen], None] | None = None
    stream: str = subjects.CYCLE_STREAM
    """The stream the filter reads (``CLEARANCE_KUBE`` for the watcher's events)."""
    seen: list[Seen] = field(default_factory=list)
    _sub: object | None = None
    _task: asyncio.Task[None] | None = None
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    async def start(self) -> CycleFollower:
        js = self.nc.jetstream()
        self._sub = await js.subscribe(
            self.subject,
            stream=self.stream,
            ordered_consumer=True,
            config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.NEW),
        )
        self._task = asyncio.create_task(self._follow())
        return self

    async def _follow(self) -> None:
        sub = self._sub
        assert sub is not None
        while True:
            try:
                msg = await sub.next_msg(timeout=1.0)  # type: ignore[attr-defined]
            except TimeoutError:
                continue
            arrived = time.time()
            try:
                event = events.decode(msg.data)
            except events.EventDecodeError:
                continue
            stored = msg.metadata.timestamp.timestamp()
            seen = Seen(event, stored, arrived)
            self.seen.append(seen)
            if self.on_event is not None:
                self.on_event(seen)
            self._changed.set()

    def of(self, kind: type[events.Event]) -> list[Seen]:
        return [s for s in self.seen if isinstance(s.event, kind)]

    async def wait_until(self, predicate: Callable[[], bool], *, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not predicate():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), min(remaining, 1.0))
        return True

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
        with contextlib.suppress(Exception):
            await self._sub.unsubscribe()  # type: ignore[union-attr]


class _Clearance(msgspec.Struct):
    phase: str | None = None
    attempt: int | None = None


class _AwStatus(msgspec.Struct):
    clearance: _Clearance | None = None


class _Aw(msgspec.Struct):
    metadata: _Meta
    status: _AwStatus | None = None


_AW = msgspec.json.Decoder(_Aw)


@dataclass
class PhaseLedger:
    """When each AppWrapper's ``status.clearance`` first showed (phase, attempt).

    It splits the dispatcher's share of a cycle: ``cleared`` → (TearingDown→) **Queued**
    written → **Dispatching** of N+1 written → the first pod of N+1 created.
    """

    kube: Kube
    resource: Any
    namespace: str
    first: dict[tuple[str, str, int], float] = field(default_factory=dict)
    """(aw, phase, attempt) → first time seen."""
    _task: asyncio.Task[None] | None = None

    async def start(self) -> PhaseLedger:
        listed = await self.kube.list(self.resource, namespace=self.namespace)
        self._task = asyncio.create_task(self._watch(listed.resource_version))
        return self

    async def _watch(self, rv: str) -> None:
        while True:
            try:
                async for line in self.kube.watch(
                    self.resource,
                    resource_version=rv,
                    namespace=self.namespace,
                    timeout_seconds=600,
                ):
                    now = time.time()
                    if line.type == "ERROR":
                        listed = await self.kube.list(self.resource, namespace=self.namespace)
                        rv = listed.resource_version
                        break
                    if line.type == "BOOKMARK":
                        rv = _OBJ.decode(line.object).metadata.resourceVersion or rv
                        continue
                    aw = _AW.decode(line.object)
                    rv = aw.metadata.resourceVersion or rv
                    cl = aw.status.clearance if aw.status is not None else None
                    if cl is None or cl.phase is None or cl.attempt is None:
                        continue
                    self.first.setdefault((aw.metadata.name, cl.phase, cl.attempt), now)
            except KubeError:
                await asyncio.sleep(0.1)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task


async def fetch_history(
    kubesim_url: str, *, namespace: str | None = None, kind: str | None = None
) -> list[Commit]:
    """kubesim's write history (``/kubesim/v1/history``): every commit, with its time."""
    import aiohttp

    params = {k: v for k, v in (("namespace", namespace), ("kind", kind)) if v is not None}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{kubesim_url}/kubesim/v1/history", params=params) as response,
    ):
        response.raise_for_status()
        body = await response.json()
    return [Commit.from_json(entry) for entry in body["items"]]


def service_of(user_agent: str) -> str:
    """``clearance-dispatcher/0.1 (host; pid 7)`` → ``clearance-dispatcher``."""
    return user_agent.split("/", 1)[0] or "(none)"


class RequestRates:
    """The API requests each service makes, from kubesim's flow control counters
    (``/kubesim/v1/flowcontrol``: admitted and 429-rejected per User-Agent), sampled every
    ``period`` seconds: the total, the mean rate and the peak rate of any one sample."""

    def __init__(self, kubesim_url: str, *, period: float = 1.0) -> None:
        self.url = f"{kubesim_url}/kubesim/v1/flowcontrol"
        self.period = period
        self.limits: dict[str, Any] = {}
        self.admitted: dict[str, int] = {}
        self.rejected: dict[str, int] = {}
        self.peak: dict[str, float] = {}
        self.requests: dict[str, dict[str, int]] = {}
        """Service → "<verb> <resource>" → admitted requests."""
        self._started = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _state(self, *, reset: bool = False) -> dict[str, Any]:
        import aiohttp

        async with aiohttp.ClientSession() as http:
            if reset:
                post = http.post(self.url, json={"resetCounters": True})
                async with post as response:
                    response.raise_for_status()
            async with http.get(self.url) as response:
                response.raise_for_status()
                body: dict[str, Any] = await response.json()
                return body

    @staticmethod
    def _by_service(counts: dict[str, int]) -> dict[str, int]:
        out: dict[str, int] = {}
        for agent, n in counts.items():
            out[service_of(agent)] = out.get(service_of(agent), 0) + n
        return out

    async def start(self) -> RequestRates:
        state = await self._state(reset=True)
        self.limits = {k: state[k] for k in ("rateLimit", "rateBurst", "rateScope")}
        self._started = time.monotonic()
        self._task = asyncio.create_task(self._run())
        return self

    async def _sample(self) -> None:
        state = await self._state()
        admitted = self._by_service(state.get("admittedByUserAgent") or {})
        for name, n in admitted.items():
            rate = (n - self.admitted.get(name, 0)) / self.period
            self.peak[name] = max(self.peak.get(name, 0.0), rate)
        self.admitted = admitted
        self.rejected = self._by_service(state["rejected"]["byUserAgent"])
        requests: dict[str, dict[str, int]] = {}
        for row in state.get("admittedByRequest") or []:
            mine = requests.setdefault(service_of(row["userAgent"]), {})
            mine[row["request"]] = mine.get(row["request"], 0) + row["count"]
        self.requests = requests

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.period)
            with contextlib.suppress(Exception):
                await self._sample()

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        with contextlib.suppress(Exception):
            await self._sample()
        seconds = time.monotonic() - self._started
        return {
            "server_limit": self.limits,
            "seconds": round(seconds, 1),
            "by_service": {
                name: {
                    "requests": n,
                    "mean_per_s": round(n / seconds, 1) if seconds else None,
                    "peak_per_s": round(self.peak.get(name, 0.0), 1),
                    "rejected_429": self.rejected.get(name, 0),
                    "by_request": dict(
                        sorted((self.requests.get(name) or {}).items(), key=lambda kv: -kv[1])
                    ),
                }
                for name, n in sorted(self.admitted.items())
            },
        }
