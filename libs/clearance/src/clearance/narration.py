"""What the demos share: a narrator, views of pods, the followed NATS streams and the epilogue.

``clearance demo`` (:mod:`clearance.demo`) and its PyTorchJob variant
(:mod:`clearance.trainingdemo`) are clients of a :class:`~clearance.stack.LocalStack` like any
user: they read pods from the API, cycle events and alerts from NATS, spans from the stack's
trace receiver and metrics from the services' ``/metrics``, and narrate them with timestamps.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import msgspec

from clearance import events
from clearance.kube import PODS, Kube
from clearance.stack import LocalStack
from clearance.tailing import FOLLOW_HEARTBEAT, describe
from clearance.tasks import raise_if_cancelling

NAMESPACE = "default"


class PodView(msgspec.Struct):
    metadata: dict[str, Any]
    spec: dict[str, Any] = msgspec.field(default_factory=dict)
    status: dict[str, Any] = msgspec.field(default_factory=dict)


class Narrator:
    """Timestamped lines relative to the demo's start."""

    def __init__(self, out: Callable[[str], None]) -> None:
        self.started = time.monotonic()
        self.out = out

    def say(self, text: str) -> None:
        self.out(f"[{time.monotonic() - self.started:6.1f}s] {text}")

    def step(self, text: str) -> None:
        self.say(f">>> {text}")


def pod_state(pod: PodView | None) -> str:
    if pod is None:
        return "absent"
    if pod.metadata.get("deletionTimestamp"):
        return "Terminating"
    return str(pod.status.get("phase", "Pending"))


async def follow(
    nc: Any,
    stream: str,
    subject: str,
    sink: asyncio.Queue[events.Event],
    keep: IO[bytes] | None = None,
) -> None:
    from nats.js import api

    js = nc.jetstream()
    sub = await js.subscribe(
        subject,
        stream=stream,
        ordered_consumer=True,
        idle_heartbeat=FOLLOW_HEARTBEAT,
        config=api.ConsumerConfig(deliver_policy=api.DeliverPolicy.ALL),
    )
    try:
        while True:
            raise_if_cancelling()  # next_msg may have swallowed the demo's stop (Ctrl-C)
            try:
                msg = await sub.next_msg(timeout=1.0)
            except TimeoutError:
                continue
            if keep is not None:
                keep.write(bytes(msg.data) + b"\n")
                keep.flush()
            with contextlib.suppress(events.EventDecodeError):
                await sink.put(events.decode(msg.data))
    finally:
        with contextlib.suppress(Exception):
            await sub.unsubscribe()


async def await_event(
    queue: asyncio.Queue[events.Event],
    narrator: Narrator,
    predicate: Callable[[events.Event], bool],
    *,
    timeout: float,
    what: str,
) -> events.Event:
    """Narrate every cycle event and alert until one matches ``predicate``."""
    async with asyncio.timeout(timeout):
        while True:
            event = await queue.get()
            if isinstance(event, events.AlertEvent):
                narrator.say(f"ALERT {describe(event)}")
            elif isinstance(event, events.CycleEvent):
                narrator.say(f"cycle {describe(event)}")
            if predicate(event):
                return event
    raise TimeoutError(what)  # pragma: no cover - asyncio.timeout raises first


async def remove_finalizers(kube: Kube, pod: str, *, namespace: str) -> None:
    """The step both demos end their stall with: the pod's finalizers go (a JSON patch)."""
    await kube.patch(
        PODS,
        pod,
        [{"op": "remove", "path": "/metadata/finalizers"}],
        namespace=namespace,
        content_type="application/json-patch+json",
    )


def metrics_summary(stack: LocalStack) -> list[str]:
    wanted = (
        "clearance_dispatcher_requeues_total",
        "clearance_dispatcher_dispatches_total",
        "clearance_dispatcher_redispatch_latency_seconds_sum",
        "clearance_tracker_teardowns_started_total",
        "clearance_cleared_total",
        "clearance_escalations_total",
        "clearance_objects_stuck ",
        "clearance_teardown_duration_seconds_sum",
        "clearance_tracker_confirmations_total",
        "clearance_watcher_tombstones_total",
        "clearance_watcher_relists_total",
    )
    lines: list[str] = []
    for name, process in stack.services.items():
        with contextlib.suppress(OSError):
            status, body = process.http_get("/metrics")
            if status != 200:
                continue
            for line in body.splitlines():
                if line.startswith(wanted):
                    lines.append(f"  {name:<11} {line}")
    return lines


async def keep_history(stack: LocalStack, path: Path) -> None:
    """kubesim's write history of the demo's namespace, as ``GET /kubesim/v1/history`` says."""
    import aiohttp

    url = f"{stack.kubesim_url}/kubesim/v1/history"
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, params={"namespace": NAMESPACE}) as response,
    ):
        response.raise_for_status()
        body = await response.json()
    await asyncio.to_thread(path.write_text, json.dumps(body["items"]))


async def print_trace(stack: LocalStack, narrator: Narrator) -> None:
    receiver = stack.receiver
    if receiver is None:
        return
    from clearance.traces import waterfall

    with contextlib.suppress(TimeoutError):
        await receiver.wait_for("redispatch", timeout=10)
    roots = [s for s in receiver.spans if s.name == "requeue.cycle"]
    if not roots:
        narrator.say("no requeue.cycle trace received (is tracing enabled in the services?)")
        return
    spans = receiver.trace(roots[0].trace_id)
    services = sorted({s.service for s in spans})
    narrator.say(
        f"trace {roots[0].trace_id}: {len(spans)} spans from {len(services)} services "
        f"({', '.join(services)})"
    )
    narrator.out(waterfall(spans))
