"""What the rack-loss run samples once a second while the storm lasts: each process's CPU and
RSS (``/proc``), and nats-server's message counters (``/varz`` of its monitoring port).

Peaks are of one-second windows; means are over the whole sampled span.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from .common import MiB, cpu_seconds, rss_bytes

INTERVAL = 1.0


@dataclass
class _Series:
    at: list[float] = field(default_factory=list)
    values: list[float] = field(default_factory=list)

    def add(self, at: float, value: float) -> None:
        self.at.append(at)
        self.values.append(value)

    def rates(self) -> list[float]:
        return [
            (self.values[i] - self.values[i - 1]) / (self.at[i] - self.at[i - 1])
            for i in range(1, len(self.at))
            if self.at[i] > self.at[i - 1]
        ]

    def mean_rate(self) -> float:
        if len(self.at) < 2 or self.at[-1] <= self.at[0]:
            return 0.0
        return (self.values[-1] - self.values[0]) / (self.at[-1] - self.at[0])


class StormSampler:
    """CPU % of a core and RSS per process, NATS messages/s in and out."""

    def __init__(self, pids: dict[str, int], *, nats_monitor: str) -> None:
        self.pids = pids
        self.nats_monitor = nats_monitor
        self.cpu: dict[str, _Series] = {name: _Series() for name in pids}
        self.rss: dict[str, int] = dict.fromkeys(pids, 0)
        self.nats_in = _Series()
        self.nats_out = _Series()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> StormSampler:
        self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2))
        await self._sample()
        self._task = asyncio.create_task(self._run())
        return self

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(INTERVAL)
            await self._sample()

    async def _sample(self) -> None:
        now = time.monotonic()
        for name, pid in self.pids.items():
            with contextlib.suppress(OSError):
                self.cpu[name].add(now, cpu_seconds(pid))
                self.rss[name] = max(self.rss[name], rss_bytes(pid))
        with contextlib.suppress(Exception):
            async with self._http.get(f"{self.nats_monitor}/varz") as answer:
                varz = await answer.json()
            self.nats_in.add(now, float(varz["in_msgs"]))
            self.nats_out.add(now, float(varz["out_msgs"]))

    async def stop(self) -> dict[str, Any]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self._sample()
        await self._http.close()
        return {
            "processes": {
                name: {
                    "cpu_peak_percent_of_core": round(100 * max(series.rates(), default=0.0), 1),
                    "cpu_mean_percent_of_core": round(100 * series.mean_rate(), 1),
                    "rss_peak_mib": round(self.rss[name] / MiB, 1),
                }
                for name, series in self.cpu.items()
            },
            "nats_messages_per_s": {
                "in_peak": round(max(self.nats_in.rates(), default=0.0)),
                "in_mean": round(self.nats_in.mean_rate()),
                "out_peak": round(max(self.nats_out.rates(), default=0.0)),
                "out_mean": round(self.nats_out.mean_rate()),
            },
        }
