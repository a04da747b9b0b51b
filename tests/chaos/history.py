"""What happened, as the outside saw it: kubesim's write history, the cycle stream, the spans.

The checker judges nothing else. :class:`Observation` is plain data, read after a schedule:

* every committed write in the namespace (``GET /kubesim/v1/history``; AppWrapper and Pod
  bodies kept by ``kubesim serve --audit-objects``), with its commit time and writer;
* every message of ``CLEARANCE_CYCLE`` as stored (stream sequence, the server's timestamp,
  ``Nats-Msg-Id``, the decoded event) — what is in the stream *after* JetStream's dedup;
* the spans the OTLP receiver got (:class:`clearance.traces.TraceReceiver`);
* the driver's and the nemesis' own records (what the schedule did, and when faults ended).
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from nats.aio.client import Client as NatsClient
from tests.chaos.nemesis import Injection
from tests.chaos.plan import AppWrapperPlan

from clearance import bus, events, labels, subjects
from clearance.traces import ReceivedSpan

AUDITED_KINDS = "AppWrapper,Pod"
"""Kinds whose bodies the history keeps (status and phase at every commit)."""


@dataclass(frozen=True, slots=True)
class Write:
    rv: int
    type: str
    kind: str
    name: str
    uid: str
    time: float
    user_agent: str
    verb: str
    labels: Mapping[str, str]
    owners: tuple[str, ...]
    terminating: bool
    object: Mapping[str, Any] | None = None

    @property
    def appwrapper(self) -> str | None:
        return self.labels.get(labels.MCAD_APPWRAPPER) or self.labels.get(
            labels.CODEFLARE_APPWRAPPER
        )

    @property
    def attempt(self) -> int | None:
        return labels.attempt_of(dict(self.labels))

    @property
    def by_clearance(self) -> bool:
        return self.user_agent.startswith("clearance-")

    @property
    def clearance_status(self) -> Mapping[str, Any]:
        status = (self.object or {}).get("status") or {}
        return status.get("clearance") or {}

    @property
    def status(self) -> Mapping[str, Any]:
        return (self.object or {}).get("status") or {}


@dataclass(frozen=True, slots=True)
class Published:
    seq: int
    time: float
    subject: str
    msg_id: str
    event: events.Event


@dataclass
class Observation:
    plans: tuple[AppWrapperPlan, ...]
    writes: list[Write]
    cycle: list[Published]
    spans: list[ReceivedSpan]
    injections: list[Injection]
    healed_at: float
    settled_at: dict[str, float]
    induced: dict[str, float]
    deleted: dict[str, float]
    l1_bound: float
    undecodable: int = 0
    notes: list[str] = field(default_factory=list)


def write_of(entry: Mapping[str, Any]) -> Write:
    return Write(
        rv=int(entry["rv"]),
        type=str(entry["type"]),
        kind=str(entry["kind"]),
        name=str(entry["name"]),
        uid=str(entry["uid"]),
        time=float(entry["time"]),
        user_agent=str(entry.get("userAgent") or ""),
        verb=str(entry.get("verb") or ""),
        labels=dict(entry.get("labels") or {}),
        owners=tuple(entry.get("owners") or ()),
        terminating=bool(entry.get("terminating")),
        object=entry.get("object"),
    )


async def read_history(kubesim_url: str) -> list[Write]:
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http,
        http.get(f"{kubesim_url}/kubesim/v1/history", params={"namespace": "default"}) as answer,
    ):
        answer.raise_for_status()
        body = await answer.json()
    return sorted((write_of(e) for e in body["items"]), key=lambda w: w.rv)


async def read_cycle_stream(nc: NatsClient) -> tuple[list[Published], int]:
    """Every stored message of ``CLEARANCE_CYCLE`` (and how many did not decode)."""
    js = nc.jetstream()
    info = await js.stream_info(subjects.CYCLE_STREAM)
    found: list[Published] = []
    bad = 0
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        with contextlib.suppress(Exception):
            msg = await js.get_msg(subjects.CYCLE_STREAM, seq)
            try:
                event = events.decode(msg.data or b"")
            except events.EventDecodeError:
                bad += 1
                continue
            assert msg.time is not None
            found.append(
                Published(
                    seq=seq,
                    time=msg.time.timestamp(),
                    subject=msg.subject or "",
                    msg_id=str((msg.headers or {}).get(bus.MSG_ID, "")),
                    event=event,
                )
            )
    return found, bad
