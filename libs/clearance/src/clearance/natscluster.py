"""An N-node JetStream cluster of real ``nats-server`` children on loopback, for tests and demos.

The production overlay runs three NATS nodes with R3 streams; the only way to prove that
Clearance survives losing one is to run the same thing and break it. :class:`NatsCluster`
starts ``size`` :class:`~clearance.natsserver.NatsServer` processes, each with its own
server name (``n0``, ``n1``, …), client, monitor and route ports picked free once (and kept
across restarts, so clients reconnect to the same URLs), one cluster name, routes to every
other node and a JetStream store of its own. Any node can be killed (SIGKILL: a crash, the
store possibly mid-write), frozen (SIGSTOP: a long pause or a partition, the sockets stay
open) and thawed (SIGCONT), or started again on the same store.

Who leads is read from the monitor endpoint ``/jsz`` (``meta_cluster.leader`` for the meta
group, ``stream_detail[].cluster.leader`` per stream and per consumer), never from client
state, so a test sees the cluster the way an operator does. ``/healthz`` answering 200 on a
node means its JetStream assets are current: that is "caught up" after a restart.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from clearance.natsserver import (
    BIND_RETRIES,
    DEFAULT_START_TIMEOUT,
    NatsServer,
    NatsServerError,
    free_port,
    lost_port_race,
)

__all__ = ["ClusterError", "NatsCluster", "Placement"]

DEFAULT_CLUSTER_TIMEOUT: Final = 30.0
_PROBE_TIMEOUT: Final = 1.0


class ClusterError(NatsServerError):
    """The cluster did not form, a node did not come back, or a leader was not elected."""


@dataclass(frozen=True)
class Placement:
    """Where a stream (or consumer) lives: its leader and the other peers, by server name."""

    leader: str | None
    replicas: tuple[str, ...]
    current: tuple[str, ...]
    """The replicas the leader reports as current (caught up)."""

    @property
    def peers(self) -> tuple[str, ...]:
        return ((self.leader,) if self.leader else ()) + self.replicas

    @property
    def size(self) -> int:
        return len(self.peers)


Node = int | str
"""A node by index (0…size-1) or by server name (``n0``…)."""


class NatsCluster:
    """``size`` clustered ``nats-server -js`` processes; start, break and inspect them."""

    def __init__(
        self,
        workdir: Path,
        *,
        size: int = 3,
        name: str = "clearance",
        host: str = "127.0.0.1",
        binary: Path | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        if size < 1:
            raise ValueError("a cluster has at least one node")
        self.workdir = Path(workdir)
        self.name = name
        self.size = size
        self.names = tuple(f"n{i}" for i in range(size))
        self._host = host
        self._binary = binary
        self._extra_args = extra_args
        self.nodes: list[NatsServer] = self._lay_out()
        self._started_once = False
        self._frozen: set[int] = set()

    def _lay_out(self) -> list[NatsServer]:
        """Draw every node's client, monitor and route ports; each node routes to all."""
        host, size = self._host, self.size
        routes = [free_port(host) for _ in range(size)]
        route_urls = ",".join(f"nats://{host}:{port}" for port in routes)
        nodes: list[NatsServer] = []
        for index, server_name in enumerate(self.names):
            args: tuple[str, ...] = ("--server_name", server_name)
            if size > 1:
                args += (
                    "--cluster_name",
                    self.name,
                    "--cluster",
                    f"nats://{host}:{routes[index]}",
                    "--routes",
                    route_urls,
                )
            nodes.append(
                NatsServer(
                    self.workdir / server_name / "store",
                    host=host,
                    binary=self._binary,
                    extra_args=(*args, *self._extra_args),
                    log_file=self.workdir / server_name / "nats-server.log",
                )
            )
        return nodes

    # -- facts -------------------------------------------------------------------------

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    @property
    def url(self) -> str:
        """Every node's client URL, comma-separated (what ``CLEARANCE_NATS_URL`` takes)."""
        return ",".join(self.urls)

    def index(self, node: Node) -> int:
        if isinstance(node, int):
            if not 0 <= node < self.size:
                raise ClusterError(f"no node {node} in a cluster of {self.size}")
            return node
        try:
            return self.names.index(node)
        except ValueError:
            raise ClusterError(f"no node named {node!r} (nodes: {', '.join(self.names)})") from None

    def server(self, node: Node) -> NatsServer:
        return self.nodes[self.index(node)]

    def running(self, node: Node) -> bool:
        index = self.index(node)
        return self.nodes[index].running and index not in self._frozen

    def live(self) -> list[int]:
        """Indexes of nodes that are running and not frozen."""
        return [i for i in range(self.size) if self.running(i)]

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, *, timeout: float = DEFAULT_CLUSTER_TIMEOUT) -> NatsCluster:
        """Start every node, then wait until they agree on a meta leader.

        Ports are drawn free but not held, so another listener can take one before a node
        binds it; on a first start such a lost race ("address already in use") redraws every
        port of the cluster (routes name each other) and starts again, a few times at most.
        Once the cluster has run, clients know its URLs and a restart keeps them.
        """
        for attempt in range(BIND_RETRIES + 1):
            try:
                self._start_all(timeout)
            except NatsServerError as exc:
                if self._started_once or not lost_port_race(exc) or attempt == BIND_RETRIES:
                    raise
                self.nodes = self._lay_out()
                continue
            break
        self._started_once = True
        return self

    def _start_all(self, timeout: float) -> None:
        try:
            for node in self.nodes:  # all spawned before any wait: routes need peers
                node.spawn()
            for node in self.nodes:
                node.wait_ready(timeout=timeout)
            self.wait_formed(timeout=timeout)
        except BaseException:
            self.stop()
            raise

    async def astart(self, *, timeout: float = DEFAULT_CLUSTER_TIMEOUT) -> NatsCluster:
        return await asyncio.to_thread(self.start, timeout=timeout)

    def stop(self) -> None:
        """Stop every node (frozen ones are thawed first so they can exit cleanly)."""
        for index in list(self._frozen):
            self.thaw(index)
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()

    async def astop(self) -> None:
        await asyncio.to_thread(self.stop)

    def kill(self, node: Node) -> str:
        """SIGKILL one node (a crash); returns its server name."""
        index = self.index(node)
        self._frozen.discard(index)
        self.nodes[index].kill()
        return self.names[index]

    def freeze(self, node: Node) -> str:
        """SIGSTOP one node: it holds its sockets but answers nothing (a pause, a partition)."""
        index = self._signal(node, signal.SIGSTOP)
        self._frozen.add(index)
        return self.names[index]

    def thaw(self, node: Node) -> str:
        index = self._signal(node, signal.SIGCONT)
        self._frozen.discard(index)
        return self.names[index]

    def _signal(self, node: Node, sig: signal.Signals) -> int:
        """Send ``sig`` to one node's process; returns the node's index."""
        index = self.index(node)
        os.kill(self._pid(index), sig)
        return index

    def start_node(self, node: Node, *, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Start a stopped or killed node again on its own store (it rejoins and catches up)."""
        self.nodes[self.index(node)].start(timeout=timeout)

    def restart(self, node: Node, *, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        """Stop one node gracefully and start it again on the same store."""
        index = self.index(node)
        if index in self._frozen:
            self.thaw(index)
        self.nodes[index].stop()
        self.nodes[index].start(timeout=timeout)

    async def arestart(self, node: Node, *, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        await asyncio.to_thread(self.restart, node, timeout=timeout)

    async def astart_node(self, node: Node, *, timeout: float = DEFAULT_START_TIMEOUT) -> None:
        await asyncio.to_thread(self.start_node, node, timeout=timeout)

    def __enter__(self) -> NatsCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    async def __aenter__(self) -> NatsCluster:
        return await self.astart()

    async def __aexit__(self, *exc: object) -> None:
        await self.astop()

    # -- monitoring --------------------------------------------------------------------

    def monitor(self, node: Node, path: str, **query: str) -> tuple[int, dict[str, Any]]:
        """GET a monitor endpoint of one node: (HTTP status, JSON body); (0, {}) if it is down."""
        server = self.server(node)
        url = f"{server.monitor_url}{path}"
        if query:
            url += "?" + urllib.parse.urlencode(query)
        try:
            with urllib.request.urlopen(url, timeout=_PROBE_TIMEOUT) as response:
                return int(response.status), json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            with contextlib.suppress(Exception):
                return int(exc.code), json.loads(exc.read() or b"{}")
            return int(exc.code), {}
        except (urllib.error.URLError, OSError, ValueError):
            return 0, {}

    def healthy(self, node: Node) -> bool:
        """``/healthz`` is 200: JetStream is up on the node and its assets are current."""
        return self.running(node) and self.monitor(node, "/healthz")[0] == 200

    def meta_leader(self) -> str | None:
        """The meta group's leader as the live nodes report it (None while they disagree)."""
        seen = {self._jsz(i).get("meta_cluster", {}).get("leader") for i in self.live()}
        seen.discard(None)
        seen.discard("")
        return seen.pop() if len(seen) == 1 else None

    def placement(self, stream: str, *, consumer: str | None = None) -> Placement | None:
        """Where ``stream`` (or one of its consumers) lives, as its leader reports it.

        A follower's view can lag (just after creation it may list the leader among the
        replicas), so the leader named by any live node is asked again when it is live.
        """
        seen: Placement | None = None
        for index in self.live():
            seen = self._placement_on(index, stream, consumer)
            if seen is not None:
                break
        if seen is None or seen.leader is None or seen.leader not in self.names:
            return seen
        leader = self.index(seen.leader)
        if leader not in self.live():
            return seen
        return self._placement_on(leader, stream, consumer) or seen

    def _placement_on(self, index: int, stream: str, consumer: str | None) -> Placement | None:
        query = {"streams": "true", "consumers": "true" if consumer else "false"}
        for account in self._jsz(index, **query).get("account_details") or []:
            for detail in account.get("stream_detail") or []:
                if detail.get("name") != stream:
                    continue
                if consumer is None:
                    return _placement(detail.get("cluster") or {})
                for c in detail.get("consumer_detail") or []:
                    if c.get("name") == consumer:
                        return _placement(c.get("cluster") or {})
        return None

    def stream_state(self, node: Node, stream: str) -> dict[str, Any] | None:
        """The ``state`` block (messages, last_seq, …) of ``stream`` as ``node`` stores it."""
        for account in self._jsz(self.index(node), streams="true").get("account_details") or []:
            for detail in account.get("stream_detail") or []:
                if detail.get("name") == stream:
                    return dict(detail.get("state") or {})
        return None

    def caught_up(self, node: Node, stream: str) -> bool:
        """``node`` holds the same last sequence of ``stream`` as its leader."""
        leader = self.stream_leader(stream)
        if leader is None or not self.running(leader) or not self.running(node):
            return False
        mine, theirs = self.stream_state(node, stream), self.stream_state(leader, stream)
        return mine is not None and theirs is not None and mine["last_seq"] == theirs["last_seq"]

    def formed(self) -> str | None:
        """The meta leader once every node runs, is healthy and the leader sees all current."""
        if len(self.live()) != self.size or not all(self.healthy(i) for i in self.live()):
            return None
        leader = self.meta_leader()
        if leader is None:
            return None
        meta = self._jsz(self.index(leader)).get("meta_cluster") or {}
        current = [r for r in meta.get("replicas") or [] if r.get("current")]
        return leader if len(current) == self.size - 1 else None

    def stream_leader(self, stream: str) -> str | None:
        found = self.placement(stream)
        return found.leader if found is not None else None

    # -- waiting -----------------------------------------------------------------------

    def wait_formed(self, *, timeout: float = DEFAULT_CLUSTER_TIMEOUT) -> str:
        """Until the cluster is :meth:`formed`; returns the meta leader's name."""
        return str(self._wait(self.formed, timeout=timeout, what="a formed cluster"))

    def wait_healthy(self, node: Node, *, timeout: float = DEFAULT_CLUSTER_TIMEOUT) -> None:
        """Until ``node`` reports healthy (rejoined and caught up)."""
        self._wait(lambda: self.healthy(node), timeout=timeout, what=f"node {node} healthy")

    def wait_stream_leader(
        self,
        stream: str,
        *,
        other_than: str | None = None,
        timeout: float = DEFAULT_CLUSTER_TIMEOUT,
    ) -> str:
        """Until ``stream`` has a leader (other than ``other_than``); returns its name."""

        def probe() -> str | None:
            leader = self.stream_leader(stream)
            return leader if leader and leader != other_than else None

        return str(self._wait(probe, timeout=timeout, what=f"a leader of {stream}"))

    def wait_caught_up(
        self, node: Node, stream: str, *, timeout: float = DEFAULT_CLUSTER_TIMEOUT
    ) -> None:
        """Until ``node`` holds everything the leader of ``stream`` holds."""
        self._wait(lambda: self.caught_up(node, stream), timeout=timeout, what=f"{node} caught up")

    async def await_caught_up(
        self, node: Node, stream: str, *, timeout: float = DEFAULT_CLUSTER_TIMEOUT
    ) -> None:
        await asyncio.to_thread(self.wait_caught_up, node, stream, timeout=timeout)

    async def await_formed(self, *, timeout: float = DEFAULT_CLUSTER_TIMEOUT) -> str:
        return await asyncio.to_thread(self.wait_formed, timeout=timeout)

    async def await_healthy(self, node: Node, *, timeout: float = DEFAULT_CLUSTER_TIMEOUT) -> None:
        await asyncio.to_thread(self.wait_healthy, node, timeout=timeout)

    async def await_stream_leader(
        self,
        stream: str,
        *,
        other_than: str | None = None,
        timeout: float = DEFAULT_CLUSTER_TIMEOUT,
    ) -> str:
        return await asyncio.to_thread(
            self.wait_stream_leader, stream, other_than=other_than, timeout=timeout
        )

    # -- internals ---------------------------------------------------------------------

    def _jsz(self, index: int, **query: str) -> dict[str, Any]:
        status, body = self.monitor(index, "/jsz", **query)
        return body if status == 200 else {}

    def _pid(self, index: int) -> int:
        pid = self.nodes[index].pid
        if pid is None or not self.nodes[index].running:
            raise ClusterError(f"node {self.names[index]} is not running")
        return pid

    def _wait(self, probe: Callable[[], Any], *, timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = probe()
            if found:
                return found
            if time.monotonic() > deadline:
                raise ClusterError(f"no {what} within {timeout:.1f}s ({self!r})")
            time.sleep(0.05)

    def __repr__(self) -> str:
        states = []
        for index, name in enumerate(self.names):
            state = (
                "frozen" if index in self._frozen else "up" if self.nodes[index].running else "down"
            )
            states.append(f"{name}={state}")
        return f"<NatsCluster {self.name} {' '.join(states)}>"


def _placement(cluster: dict[str, Any]) -> Placement:
    """From a ``/jsz`` cluster block (an R1 asset names its host as the leader, no replicas)."""
    replicas = cluster.get("replicas") or []
    return Placement(
        leader=cluster.get("leader") or None,
        replicas=tuple(str(r.get("name")) for r in replicas),
        current=tuple(str(r.get("name")) for r in replicas if r.get("current")),
    )
