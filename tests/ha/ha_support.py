"""What the HA end-to-end tests need beyond the e2e support: a stack on a NATS cluster, the
seed scenario with a hook at the requeue, and the checks judged from the outside.

* :func:`ha_stack_config` — the e2e defaults on a 3-node JetStream cluster (the services get
  every node's URL and ``CLEARANCE_STREAM_REPLICAS=3``);
* :func:`drive_seed` — the seed scenario (lost node, pod stuck behind a finalizer past the
  alert and force deadlines, then released), calling ``at_requeue`` right after the requeue;
* :func:`stored` — every message a stream holds, read afresh after the run (Msg-Id, subject);
* :func:`missing_kube_events` — pod writes in kubesim's history with no event on the stream
  (a failure report tells late events from lost ones);
* :func:`replica_problems` — streams that are not R3 on three peers with a live leader.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nats.aio.client import Client as NatsClient
from nats.js import api

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "e2e"))

from e2e_support import (
    HOLD,
    Scenario,
    Write,
    appwrapper,
    eventually,
    item,
    pod_state,
    pod_template,
    requeuing,
    stack_config,
)

from clearance import bus, events, subjects
from clearance.natscluster import NatsCluster
from clearance.stack import StackConfig

SEED = "seed-job"
POD = "seed-job-0"
STUCK_ALERT, FORCE, PAUSE = 2, 4, 1
HOLD_PAST_FORCE = 3.0
CYCLE_TIMEOUT = 60.0
"""Bound of each wait for a cycle event: a NATS election plus a loaded machine fit in it."""
STREAMS = tuple(s.name for s in bus.default_streams())


def ha_stack_config(workdir: Path, **overrides: Any) -> StackConfig:
    env = {"CLEARANCE_PUBLISH_RETRY_DEADLINE": "60s", **overrides.pop("env", {})}
    return dataclasses.replace(
        stack_config(workdir, nodes=overrides.pop("nodes", 2), env=env, **overrides),
        nats_nodes=3,
    )


def cluster_of(scenario: Scenario) -> NatsCluster:
    cluster = scenario.stack.cluster
    assert cluster is not None, "not an HA stack"
    return cluster


@dataclass
class SeedRun:
    node: str
    first_pod_uid: str
    released_at: float
    requeued_at: float
    cleared: events.CycleCleared
    redispatched: events.CycleRedispatched
    final_pod: dict[str, Any]
    final_status: dict[str, Any]
    took: float


AtRequeue = Callable[[], Awaitable[None]]


async def _pod_if(scenario: Scenario, state: str, *, not_uid: str = "") -> dict[str, Any] | None:
    pod = await scenario.pod(POD)
    if pod_state(pod) == state and pod is not None and pod["metadata"]["uid"] != not_uid:
        return pod
    return None


async def drive_seed(scenario: Scenario, *, at_requeue: AtRequeue, name: str = SEED) -> SeedRun:
    """The seed scenario; ``at_requeue`` runs as soon as the requeue event is seen."""
    started = time.monotonic()
    log = scenario.log
    pod_name = f"{name}-0"
    pod = pod_template(pod_name, grace=5, finalizers=[HOLD], cpu="1")
    await scenario.submit(
        appwrapper(
            name,
            [item(pod, pods=1, cpu="1")],
            min_available=1,
            requeue=requeuing(wait=2, pause=PAUSE, stuck_alert=STUCK_ALERT, force=FORCE),
        )
    )
    await log.wait_for(events.CycleDispatched, attempt=1, timeout=CYCLE_TIMEOUT)

    async def running(not_uid: str = "") -> dict[str, Any] | None:
        found = await scenario.pod(pod_name)
        if pod_state(found) == "Running" and found is not None:
            return found if found["metadata"]["uid"] != not_uid else None
        return None

    first = await eventually(running, timeout=CYCLE_TIMEOUT, what="the first pod to run")
    node = first["spec"]["nodeName"]
    scenario.lose_node(node)
    await log.wait_for(events.CycleRequeued, attempt=1, timeout=CYCLE_TIMEOUT)
    requeued_at = time.time()
    await at_requeue()
    teardown = await log.wait_for(events.CycleTeardownStarted, attempt=1, timeout=CYCLE_TIMEOUT)
    await log.wait_for(
        events.AlertDeletionStuck,
        attempt=1,
        timeout=CYCLE_TIMEOUT,
        where=lambda a: a.step == "stuck_alert",
    )
    hold_until = teardown.occurred_at.timestamp() + FORCE + HOLD_PAST_FORCE
    await asyncio.sleep(max(0.0, hold_until - time.time()))
    released_at = time.time()
    await scenario.strip_finalizers(pod_name)
    cleared = await log.wait_for(events.CycleCleared, attempt=1, timeout=CYCLE_TIMEOUT)
    redispatched = await log.wait_for(events.CycleRedispatched, attempt=2, timeout=CYCLE_TIMEOUT)
    first_uid = first["metadata"]["uid"]
    final = await eventually(
        lambda: running(first_uid), timeout=CYCLE_TIMEOUT, what="the new pod to run"
    )
    await asyncio.sleep(1.0)  # room for a late duplicate requeue or alert to show
    return SeedRun(
        node=node,
        first_pod_uid=first_uid,
        released_at=released_at,
        requeued_at=requeued_at,
        cleared=cleared,
        redispatched=redispatched,
        final_pod=final,
        final_status=await scenario.status(name),
        took=time.monotonic() - started,
    )


async def stored(nc: NatsClient, stream: str) -> list[tuple[int, str, str]]:
    """(stream sequence, Msg-Id, subject) of every message ``stream`` holds, in order."""
    js = nc.jetstream(timeout=10)
    info = await js.stream_info(stream)
    last = info.state.last_seq
    found: list[tuple[int, str, str]] = []
    if info.state.messages == 0:
        return found
    sub = await js.subscribe(
        ">",
        stream=stream,
        ordered_consumer=True,
        config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
    )
    try:
        async with asyncio.timeout(30):
            while not found or found[-1][0] < last:
                msg = await sub.next_msg(timeout=10)
                found.append(
                    (
                        msg.metadata.sequence.stream,
                        (msg.headers or {}).get(bus.MSG_ID, ""),
                        msg.subject,
                    )
                )
    finally:
        await sub.unsubscribe()
    return found


LATE_GRACE = 15.0
"""How long a failed check waits before reading the stream again, only to tell a late event
from a lost one in its report: the watcher gives up on a PubAck after 5 s (publish_timeout),
notices within 1.25 s more and retries after a 1 s pause (then behind its subject's chain)."""


async def missing_kube_events(scenario: Scenario) -> list[str]:
    """Pod writes of the scenario's objects (kubesim history) without their event on NATS.

    The verdict is the stream as read now. When something is missing, the stream is read
    again after :data:`LATE_GRACE` and each write is printed with its commit time and
    whether its event arrived since (late) or not (lost), with the stream's sequence gaps
    and each node's copy: what a failure report needs to tell the two apart.
    """
    uids = scenario.attempts()
    checked_at = time.time()
    ids = {msg_id for _, msg_id, _ in await stored(scenario.nc, subjects.KUBE_STREAM)}
    missing: list[tuple[str, Write]] = []
    for write in await scenario.history():
        if write.kind != "Pod" or write.uid not in uids:
            continue
        wanted = f"pod:{write.uid}:" + ("DELETED" if write.type == "DELETED" else str(write.rv))
        if wanted not in ids:
            missing.append((wanted, write))
    if missing:
        await _report_missing(scenario, missing, checked_at=checked_at)
    return [f"{w.type} {w.name} rv {w.rv}" for _, w in missing]


async def _report_missing(
    scenario: Scenario, missing: list[tuple[str, Write]], *, checked_at: float
) -> None:
    await asyncio.sleep(LATE_GRACE)
    held = await stored(scenario.nc, subjects.KUBE_STREAM)
    seq_of = {msg_id: seq for seq, msg_id, _ in held}
    seqs = {seq for seq, _, _ in held}
    gaps = [seq for seq in range(1, max(seqs, default=0) + 1) if seq not in seqs]
    print(f"----- {len(missing)} kube events missing at the check; CLEARANCE_KUBE gaps: {gaps}")
    for msg_id, write in missing:
        seq = seq_of.get(msg_id)
        verdict = f"late (seq {seq})" if seq else f"lost (absent {LATE_GRACE:.0f} s later)"
        print(
            f"{write.type} {write.name} rv {write.rv} uid {write.uid} committed "
            f"{checked_at - write.time:.1f} s before the check: {verdict}"
        )
    cluster = scenario.stack.cluster
    if cluster is not None:
        for node in cluster.live():
            print(f"node {cluster.names[node]}: {cluster.stream_state(node, subjects.KUBE_STREAM)}")


TRACKER_BUCKET_STREAM = "KV_clearance-teardowns"
"""The tracker's KV bucket (default ``CLEARANCE_KV_BUCKET``) as a stream."""


def _problems(what: str, cluster: api.ClusterInfo | None, lost: str | None) -> list[str]:
    peers = 1 + len(cluster.replicas or []) if cluster is not None else 1
    leader = cluster.leader if cluster is not None else None
    problems = [f"{what}: {peers} peers"] if peers != 3 else []
    if leader is None or leader == lost:
        problems.append(f"{what}: leader {leader}")
    return problems


async def replica_problems(nc: NatsClient, *, lost: str | None = None) -> list[str]:
    """Streams, the tracker's bucket and their durable consumers not on three peers with a
    leader (other than ``lost``)."""
    js = nc.jetstream(timeout=10)
    problems = []
    for name in (*STREAMS, TRACKER_BUCKET_STREAM):
        info = await js.stream_info(name)
        if (info.config.num_replicas or 1) != 3:
            problems.append(f"{name}: R{info.config.num_replicas}")
        problems += _problems(name, info.cluster, lost)
        for consumer in await js.consumers_info(name):
            if consumer.config.durable_name:
                problems += _problems(f"{name}/{consumer.name}", consumer.cluster, lost)
    return problems
