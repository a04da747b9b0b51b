"""The faults of a schedule, done to a running :class:`~clearance.stack.LocalStack` on time.

:class:`Nemesis` starts one task per :class:`~tests.chaos.plan.Fault` at ``start + fault.at``;
faults overlap freely (a replica may be frozen while NATS is down and a node is lost).
:meth:`Nemesis.heal` then undoes whatever is still in force — restarts every replica that is
not running, wakes every frozen one, recovers every lost node, clears kubesim's fault rules —
and notes the instant the last fault ended: L1 and the recovery time count from it.

Each injection is logged as an :class:`Injection` with its real start and end and whether it
took effect (a redelivery while NATS is down cannot publish; it is logged as not injected and
not counted).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from dataclasses import dataclass, field

import aiohttp
from nats.aio.client import Client as NatsClient
from tests.chaos.plan import Fault, Schedule

from clearance import bus, subjects
from clearance.stack import LocalStack

API_FAULTS: dict[str, dict[str, object]] = {
    "429": {"path": ".*", "code": 429, "retryAfter": 1},
    "500": {"path": ".*", "code": 500},
    "slow": {"path": ".*"},
    "delete": {"path": ".*", "method": "DELETE", "code": 500},
    "status": {"path": "/status$", "code": 500},
}
"""kubesim fault rules by kind; only clients whose User-Agent starts ``clearance-`` are hit."""


@dataclass
class Injection:
    fault: Fault
    started: float
    ended: float = 0.0
    injected: bool = False
    error: str = ""


@dataclass
class Nemesis:
    stack: LocalStack
    schedule: Schedule
    nc: NatsClient
    injections: list[Injection] = field(default_factory=list)
    frozen: set[int] = field(default_factory=set)
    lost: set[str] = field(default_factory=set)
    healed_at: float = 0.0
    _tasks: list[asyncio.Task[None]] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None
    _busy: dict[str, asyncio.Lock] = field(default_factory=dict)
    held_down: set[str] = field(default_factory=set)
    """Replicas a kill keeps down for now; the supervisor leaves them alone."""
    exits: int = 0
    """Replicas that exited by themselves (a leader that lost its lease) and were restarted."""

    def start(self, origin: float) -> None:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10))
        self._tasks.append(asyncio.create_task(self.supervise()))
        for index, fault in enumerate(self.schedule.faults):
            rng = random.Random(self.schedule.seed * 1000 + index)
            self._tasks.append(asyncio.create_task(self._run(fault, origin, rng)))

    async def _run(self, fault: Fault, origin: float, rng: random.Random) -> None:
        await asyncio.sleep(max(0.0, origin + fault.at - time.time()))
        record = Injection(fault, started=time.time())
        self.injections.append(record)
        try:
            record.injected = await getattr(self, f"_{fault.cls}")(fault, rng)
        except Exception as exc:  # a fault that cannot be done is logged, never fatal
            record.error = repr(exc)
        record.ended = time.time()

    async def supervise(self) -> None:
        """What the kubelet does for a Deployment's pod: restart a replica that exited.

        A service that loses its lease exits so that a fresh process takes its place; in a
        cluster its container is restarted, here this loop does it (every 200 ms)."""
        while True:
            await asyncio.sleep(0.2)
            for name in self.schedule.replicas:
                process = self.stack.services[name]
                if name not in self.held_down and not process.running:
                    self.exits += 1
                    process.start()

    async def finish(self) -> None:
        """Wait for every fault to run its course (the supervisor keeps running)."""
        await asyncio.gather(*self._tasks[1:], return_exceptions=True)

    async def stop_supervising(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def heal(self) -> float:
        """Undo everything still in force; returns (and keeps) the instant faults ended."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for pid in list(self.frozen):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        self.frozen.clear()
        await self._admin("DELETE", "/kubesim/v1/fail")
        for node in list(self.lost):
            await self._admin("POST", f"/kubesim/v1/nodes/{node}/recover")
        self.lost.clear()
        assert self.stack.nats is not None
        if not self.stack.nats.running:
            await self.stack.nats.astart()
        self.held_down.clear()
        for name in self.schedule.replicas:
            process = self.stack.services[name]
            if not process.running:
                process.start()
        self._tasks = [asyncio.create_task(self.supervise())]
        ends = [i.ended for i in self.injections]
        self.healed_at = max([time.time(), *ends])
        if self._session is not None:
            await self._session.close()
        return self.healed_at

    # ------------------------------------------------------------------ helpers

    async def _admin(self, method: str, path: str, body: object = None) -> None:
        assert self._session is not None
        url = self.stack.kubesim_url + path
        async with self._session.request(method, url, json=body) as response:
            response.raise_for_status()

    def _lock(self, target: str) -> asyncio.Lock:
        return self._busy.setdefault(target, asyncio.Lock())

    async def _kill_once(self, name: str, *, down: float) -> None:
        process = self.stack.services[name]
        pid = process.pid
        self.held_down.add(name)
        try:
            await asyncio.to_thread(process.kill)
            if pid is not None:
                self.frozen.discard(pid)
            await asyncio.sleep(down)
            if not process.running:
                process.start()
        finally:
            self.held_down.discard(name)

    def _peer(self, name: str) -> str | None:
        base = name.split("-")[0]
        peers = [r for r in self.schedule.replicas if r.split("-")[0] == base and r != name]
        return peers[0] if peers else None

    # ------------------------------------------------------------------ fault classes

    async def _kill(self, fault: Fault, rng: random.Random) -> bool:
        async with self._lock(fault.target):
            await self._kill_once(fault.target, down=fault.duration)
        if fault.kind == "startup":
            # again while it starts: before it is ready, often before it holds its lease
            await asyncio.sleep(rng.uniform(0.2, 0.8))
            async with self._lock(fault.target):
                await self._kill_once(fault.target, down=rng.uniform(0.0, 0.5))
        elif fault.kind == "handover":
            # the replica taking over (the peer, or the restarted one) dies while it does
            other = self._peer(fault.target) or fault.target
            await asyncio.sleep(rng.uniform(0.5, 2.5))
            async with self._lock(other):
                await self._kill_once(other, down=rng.uniform(0.0, 0.5))
        return True

    async def _freeze(self, fault: Fault, rng: random.Random) -> bool:
        pid = self.stack.services[fault.target].pid
        if pid is None or not self.stack.services[fault.target].running:
            return False
        os.kill(pid, signal.SIGSTOP)
        self.frozen.add(pid)
        await asyncio.sleep(fault.duration)
        if pid in self.frozen:
            self.frozen.discard(pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        return True

    async def _nats(self, fault: Fault, rng: random.Random) -> bool:
        server = self.stack.nats
        assert server is not None
        async with self._lock("nats"):
            if not server.running:
                return False
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(fault.duration)
            await server.astart()
        return True

    async def _watch(self, fault: Fault, rng: random.Random) -> bool:
        path = "/kubesim/v1/compact" if fault.kind == "compact" else "/kubesim/v1/drop-watches"
        await self._admin("POST", path)
        return True

    async def _api(self, fault: Fault, rng: random.Random) -> bool:
        rule = {**API_FAULTS[fault.kind], "count": fault.count, "userAgent": "clearance-"}
        if fault.kind == "slow":
            rule["latency"] = fault.duration
        await self._admin("POST", "/kubesim/v1/fail", rule)
        return True

    async def _redeliver(self, fault: Fault, rng: random.Random) -> bool:
        """Republish the last ``count`` kube events with new Msg-Ids (duplicates), in their
        order or reversed (stale ones after newer ones)."""
        js = self.nc.jetstream()
        info = await js.stream_info(subjects.KUBE_STREAM, subjects_filter=None)
        last = info.state.last_seq
        first = max(info.state.first_seq, last - fault.count + 1)
        messages = []
        for seq in range(first, last + 1):
            with contextlib.suppress(Exception):
                messages.append(await js.get_msg(subjects.KUBE_STREAM, seq))
        if fault.kind == "reorder":
            messages.reverse()
        published = 0
        for n, msg in enumerate(messages):
            headers = dict(msg.headers or {})
            headers[bus.MSG_ID] = f"{headers.get(bus.MSG_ID, msg.seq)}:chaos-{fault.at}-{n}"
            assert msg.subject is not None
            await js.publish(msg.subject, msg.data or b"", headers=headers, timeout=2)
            published += 1
        return published > 0

    async def _node(self, fault: Fault, rng: random.Random) -> bool:
        async with self._lock(fault.target):
            if fault.target in self.lost:
                return False
            await self._admin("POST", f"/kubesim/v1/nodes/{fault.target}/lose")
            self.lost.add(fault.target)
            await asyncio.sleep(fault.duration)
            if fault.target in self.lost:
                await self._admin("POST", f"/kubesim/v1/nodes/{fault.target}/recover")
                self.lost.discard(fault.target)
        return True
