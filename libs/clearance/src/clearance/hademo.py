"""``clearance demo --ha``: the seed scenario on the deployment shape of the prod overlay, broken.

Three ``nats-server`` nodes form one JetStream cluster (every stream, consumer and bucket R3);
tracker and dispatcher run two replicas each, the watcher one. The seed scenario runs as in
``make demo`` — a node is lost, its pod stays ``Terminating`` — and right after the requeue, in
the middle of the cycle, two things fail at once: the NATS node that leads the cycle stream is
killed (SIGKILL, its store possibly mid-write), and so is the dispatcher replica that holds the
Lease. The narration says who led, who took over and how long each hand-over took, as an
operator would read it: stream leaders from the nodes' monitor endpoints (``/jsz``), the
dispatcher leader from the replicas' own ``clearance_dispatcher_leader`` gauge. The cycle still
ends with one requeue, the stuck alert and one trace; then the killed node is started again on
its store, rejoins and catches up.

:mod:`clearance.demo` starts the stack, tells the seed story and prints the trace; this module
adds the replicas, the topology report and the failures.
"""

from __future__ import annotations

import asyncio
import time
from typing import Final

from clearance import subjects
from clearance.narration import Narrator
from clearance.natscluster import NatsCluster
from clearance.processes import ServiceProcess
from clearance.stack import LocalStack

NATS_NODES: Final = 3
REPLICAS: Final = {"tracker": 2, "dispatcher": 2}
"""Replicas per service in the HA demo (the watcher stays single: it elects one too, but the
demo's failures are the NATS stream leader and the dispatcher leader)."""
STREAMS: Final = (subjects.KUBE_STREAM, subjects.CYCLE_STREAM, subjects.ALERT_STREAM)
LEADER_GAUGE: Final = "clearance_dispatcher_leader 1.0"
FAILOVER_TIMEOUT: Final = 30.0


def add_replicas(stack: LocalStack, narrator: Narrator) -> None:
    """Start the second replica of each replicated service and wait until it is ready."""
    for name, count in REPLICAS.items():
        for replica in range(1, count):
            process = stack.add_replica(name, replica)
            process.wait_ready(timeout=stack.config.ready_timeout)
    narrator.say(
        "replicas: "
        + ", ".join(f"{name} x{count}" for name, count in REPLICAS.items())
        + ", watcher x1"
    )


def _cluster(stack: LocalStack) -> NatsCluster:
    if stack.cluster is None:
        raise RuntimeError("the HA demo needs the stack on a NATS cluster (nats_nodes=3)")
    return stack.cluster


def dispatchers(stack: LocalStack) -> dict[str, ServiceProcess]:
    return {
        name: process
        for name, process in stack.services.items()
        if name == "dispatcher" or name.startswith("dispatcher-")
    }


def _leads(process: ServiceProcess) -> bool:
    if not process.running:
        return False
    try:
        status, body = process.http_get("/metrics")
    except OSError:
        return False
    return status == 200 and LEADER_GAUGE in body


async def dispatcher_leader(stack: LocalStack, *, timeout: float = FAILOVER_TIMEOUT) -> str:
    """The one dispatcher replica that reports holding the Lease (waits for exactly one)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        leading = [
            name
            for name, process in dispatchers(stack).items()
            if await asyncio.to_thread(_leads, process)
        ]
        if len(leading) == 1:
            return leading[0]
        if len(leading) > 1:
            raise RuntimeError(f"two dispatcher leaders at once: {', '.join(leading)}")
        await asyncio.sleep(0.1)
    raise TimeoutError(f"no dispatcher replica leads after {timeout:.0f}s")


async def describe_topology(stack: LocalStack, narrator: Narrator) -> None:
    """Say where every stream lives and who leads the meta group and the dispatchers."""
    cluster = _cluster(stack)
    meta = await asyncio.to_thread(cluster.meta_leader)
    narrator.say(f"NATS cluster {', '.join(cluster.names)}: meta leader {meta}")
    for stream in STREAMS:
        placement = await asyncio.to_thread(cluster.placement, stream)
        if placement is None:
            narrator.say(f"  {stream}: not found")
            continue
        narrator.say(
            f"  {stream}: R{placement.size}, leader {placement.leader}, "
            f"followers {', '.join(placement.replicas) or '-'}"
        )
    narrator.say(f"dispatcher leader: {await dispatcher_leader(stack)} (holds the Lease)")


async def fail_mid_cycle(stack: LocalStack, narrator: Narrator) -> str:
    """Kill -9 the cycle stream's leader node and the dispatcher leader; narrate the hand-overs.

    Returns the killed node's name (started again by :func:`rejoin`)."""
    cluster = _cluster(stack)
    stream = subjects.CYCLE_STREAM
    old_stream_leader = await asyncio.to_thread(cluster.stream_leader, stream)
    if old_stream_leader is None:
        raise RuntimeError(f"{stream} has no leader before the failure")
    old_dispatcher = await dispatcher_leader(stack)
    narrator.step(
        f"mid-cycle failures: kill -9 NATS node {old_stream_leader} (leads {stream}) "
        f"and kill -9 the dispatcher leader {old_dispatcher}"
    )
    killed_at = time.monotonic()
    cluster.kill(old_stream_leader)
    stack.services[old_dispatcher].kill()
    new_leader, new_dispatcher = await asyncio.gather(
        cluster.await_stream_leader(stream, other_than=old_stream_leader, timeout=FAILOVER_TIMEOUT),
        dispatcher_leader(stack),
    )
    took = time.monotonic() - killed_at
    narrator.say(
        f"{stream} failed over to {new_leader}; dispatcher {new_dispatcher} now holds the Lease "
        f"(both within {took:.1f}s of the kills; the Lease had to expire first)"
    )
    return old_stream_leader


async def rejoin(stack: LocalStack, narrator: Narrator, node: str) -> None:
    """Start the killed node again on its own store and wait until it has caught up."""
    cluster = _cluster(stack)
    narrator.step(f"start NATS node {node} again on its store")
    started = time.monotonic()
    await asyncio.to_thread(cluster.start_node, node)
    await cluster.await_healthy(node, timeout=FAILOVER_TIMEOUT)
    narrator.say(f"{node} rejoined and caught up in {time.monotonic() - started:.1f}s")
    await describe_topology(stack, narrator)
