"""kubesim API-server benchmark (issue 3 acceptance 5; not a test).

1. LIST of 10,000 pods: server-side time for `GET /api/v1/pods` (raw bytes over HTTP) and the
   same list through kubernetes_asyncio's typed `list_pod_for_all_namespaces` (adds client
   deserialization).
2. Watch fan-out: 20 raw watchers on pods from one resourceVersion while a writer issues
   500 writes/s over HTTP; every watcher must see every write exactly once, in increasing
   resourceVersion order. Reports achieved rate and delivery latency.

The server runs in a child process (its own core), clients in this one:
    uv run --frozen --no-sync python libs/kubesim/bench/api_bench.py [--pods 10000]
        [--watchers 20] [--rate 500] [--seconds 10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import msgspec


class _Meta(msgspec.Struct):
    name: str
    resourceVersion: str


class _Obj(msgspec.Struct):
    metadata: _Meta


class _Event(msgspec.Struct):
    type: str
    object: _Obj


_event_decoder = msgspec.json.Decoder(_Event)


def _serve(port_file: Path, pods: int) -> None:
    from kubesim.apiserver import ApiServer

    async def main() -> None:
        server = ApiServer(history_limit=200_000, watch_queue_limit=1_000_000)
        rt = server.resources.lookup("", "v1", "pods")
        assert rt is not None
        for ns in ("bench", "fanout"):
            server.registry.create(
                server.resources.lookup("", "v1", "namespaces"),  # type: ignore[arg-type]
                None,
                {"metadata": {"name": ns}},
            )
        for i in range(pods):
            server.registry.create(
                rt,
                "bench",
                {
                    "metadata": {
                        "name": f"pod-{i:05d}",
                        "labels": {"app": "bench", "i": str(i % 10)},
                    },
                    "spec": {
                        "nodeName": f"node-{i % 50}",
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox:1.36",
                                "resources": {"requests": {"cpu": "100m"}},
                            }
                        ],
                    },
                },
            )
        url = await server.start(port=0)
        Path(port_file).write_text(url)  # noqa: ASYNC240 - once, before serving
        await asyncio.Event().wait()

    asyncio.run(main())


async def _time_lists(url: str, repeat: int = 5) -> dict[str, float]:
    from kubernetes_asyncio import client as k8s

    out: dict[str, float] = {}
    async with aiohttp.ClientSession() as session:
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            async with session.get(f"{url}/api/v1/pods") as resp:
                body = await resp.read()
            times.append(time.perf_counter() - start)
        out["raw_list_s_median"] = statistics.median(times)
        out["raw_list_mb"] = len(body) / 1e6
        out["items"] = len(json.loads(body)["items"])
    cfg = k8s.Configuration(host=url)
    async with k8s.ApiClient(cfg) as api:
        core = k8s.CoreV1Api(api)
        times = []
        for _ in range(3):
            start = time.perf_counter()
            await core.list_pod_for_all_namespaces()
            times.append(time.perf_counter() - start)
        out["typed_list_s_median"] = statistics.median(times)
    return out


async def _fanout(url: str, watchers: int, rate: float, seconds: float) -> dict[str, Any]:
    total = int(rate * seconds)
    # Watchers and the writer use separate sessions so long-lived watches never hold up writes.
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None)) as session,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as writer,
    ):
        async with session.get(f"{url}/api/v1/namespaces/fanout/pods?limit=1") as resp:
            rv = (await resp.json())["metadata"]["resourceVersion"]
        sent_at: dict[str, float] = {}
        received: list[list[tuple[int, str]]] = [[] for _ in range(watchers)]
        latencies: list[float] = []

        async def watch(idx: int) -> None:
            path = (
                f"{url}/api/v1/namespaces/fanout/pods?watch=true&resourceVersion={rv}"
                f"&timeoutSeconds={int(seconds) + 30}"
            )
            async with session.get(path) as resp:
                async for line in resp.content:
                    if not line.strip():
                        continue
                    event = _event_decoder.decode(line)
                    name = event.object.metadata.name
                    received[idx].append((int(event.object.metadata.resourceVersion), name))
                    if name in sent_at:
                        latencies.append(time.perf_counter() - sent_at[name])
                    if len(received[idx]) >= total:
                        return

        tasks = [asyncio.create_task(watch(i)) for i in range(watchers)]
        await asyncio.sleep(0.5)
        body = {"metadata": {"name": ""}, "spec": {"containers": [{"name": "c", "image": "i"}]}}
        start = time.perf_counter()
        interval = 1.0 / rate
        inflight: set[asyncio.Task[None]] = set()

        template = json.dumps(body).replace('"name": ""', '"name": "{name}"', 1)
        headers = {"Content-Type": "application/json"}

        async def write(i: int) -> None:
            name = f"w-{i:06d}"
            data = template.replace("{name}", name).encode()
            sent_at[name] = time.perf_counter()
            async with writer.post(
                f"{url}/api/v1/namespaces/fanout/pods", data=data, headers=headers
            ) as resp:
                assert resp.status == 201, await resp.text()

        for i in range(total):
            target = start + i * interval
            delay = target - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            t = asyncio.create_task(write(i))
            inflight.add(t)
            t.add_done_callback(inflight.discard)
        await asyncio.gather(*inflight)
        elapsed = time.perf_counter() - start
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=60)
    ok = True
    for events in received:
        revs = [r for r, _ in events]
        names = {n for _, n in events}
        if (
            len(events) != total
            or revs != sorted(revs)
            or len(set(revs)) != total
            or len(names) != total
        ):
            ok = False
    latencies.sort()
    return {
        "writes": total,
        "achieved_writes_per_s": total / elapsed,
        "watchers": watchers,
        "events_delivered": sum(len(r) for r in received),
        "all_complete_in_order_no_duplicates": ok,
        "latency_ms_p50": 1000 * latencies[len(latencies) // 2],
        "latency_ms_p99": 1000 * latencies[int(len(latencies) * 0.99)],
    }


def _cpu_seconds(pid: int) -> float:
    """utime+stime of a process from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--watchers", type=int, default=20)
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "url"
        proc = multiprocessing.get_context("spawn").Process(
            target=_serve, args=(port_file, args.pods), daemon=True
        )
        proc.start()
        try:
            deadline = time.time() + 120
            while not port_file.exists() or not port_file.read_text():
                if time.time() > deadline or not proc.is_alive():
                    raise SystemExit("server did not start")
                time.sleep(0.1)
            url = port_file.read_text()
            assert proc.pid is not None
            listing = asyncio.run(_time_lists(url))
            server_cpu, client_cpu, wall = (
                _cpu_seconds(proc.pid),
                time.process_time(),
                time.perf_counter(),
            )
            fanout = asyncio.run(_fanout(url, args.watchers, args.rate, args.seconds))
            wall = time.perf_counter() - wall
            fanout["server_cpu_share"] = (_cpu_seconds(proc.pid) - server_cpu) / wall
            fanout["client_cpu_share"] = (time.process_time() - client_cpu) / wall
            result = {"cpus": os.cpu_count(), "list": listing, "fanout": fanout}
            print(json.dumps(result, indent=2))
        finally:
            proc.terminate()
            proc.join(5)


if __name__ == "__main__":
    main()
