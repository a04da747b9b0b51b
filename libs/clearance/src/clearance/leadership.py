"""Leader election over a coordination.k8s.io/v1 Lease, as client-go does it.

Two replicas of the watcher (or dispatcher) may run; exactly one must act. The holder renews
the Lease every ``retry_period``; a candidate takes the Lease over only once the holder's
``renewTime + leaseDurationSeconds`` lies in the past. Every write is a PUT carrying the
resourceVersion read just before, so two candidates racing for an expired Lease cannot both
win: the loser gets 409 Conflict and reads again.

Clocks: like client-go, expiry is judged on the candidate's clock against the renewTime the
holder wrote, so lease durations must comfortably exceed the cluster's clock skew.

:func:`decide` is the pure rule; :class:`LeaderElector` is the loop around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

import msgspec

from clearance import testfaults
from clearance.fencing import Term
from clearance.kube import LEASES, Kube, KubeError
from clearance.timestamps import micro_time

log = logging.getLogger(__name__)


class Step(Enum):
    CREATE = "create"
    RENEW = "renew"
    TAKE_OVER = "take_over"
    FOLLOW = "follow"


class LeaseSpec(msgspec.Struct, frozen=True):
    holderIdentity: str | None = None  # Kubernetes wire names
    leaseDurationSeconds: int | None = None
    renewTime: datetime | None = None
    acquireTime: datetime | None = None
    leaseTransitions: int | None = None


def decide(spec: LeaseSpec | None, *, identity: str, now: datetime) -> Step:
    """What a candidate should do with the Lease as read (``None``: no Lease yet)."""
    if spec is None:
        return Step.CREATE
    if spec.holderIdentity == identity:
        return Step.RENEW
    if not spec.holderIdentity or spec.renewTime is None:
        return Step.TAKE_OVER
    expires = spec.renewTime + timedelta(seconds=spec.leaseDurationSeconds or 0)
    return Step.TAKE_OVER if now >= expires else Step.FOLLOW


class _Lease(msgspec.Struct):
    metadata: dict[str, Any]
    spec: LeaseSpec = msgspec.field(default_factory=LeaseSpec)


@dataclass
class LeaderElector:
    """Keeps ``is_leader`` true while this process holds the Lease."""

    kube: Kube
    namespace: str
    name: str
    identity: str
    lease_duration: float = 15.0
    """Seconds a holder's claim stays valid without renewal (client-go default 15 s)."""
    retry_period: float = 2.0
    """Seconds between attempts to acquire or renew (client-go default 2 s)."""
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    is_leader: asyncio.Event = field(default_factory=asyncio.Event)
    lost: asyncio.Event = field(default_factory=asyncio.Event)
    """Set when leadership, once held, could not be renewed in time; the owner must stop."""
    _last_renew: datetime | None = None
    term: Term = field(init=False)
    """The window in which this replica may act; guard every effect with ``term.check()``."""
    monotonic: Callable[[], float] = field(default=time.monotonic)

    def __post_init__(self) -> None:
        # A tenth of the lease absorbs the clock skew with the standby judging expiry.
        self.term = Term(
            name=f"lease {self.name}",
            duration=self.lease_duration,
            margin=self.lease_duration / 10,
            clock=self.monotonic,
        )

    async def run(self) -> None:
        """Campaign and renew forever (until cancelled); on cancel, release the Lease."""
        try:
            while True:
                await self._attempt()
                await asyncio.sleep(self.retry_period)
        finally:
            if self.is_leader.is_set():
                with contextlib.suppress(Exception):
                    await asyncio.shield(self._release())

    async def _attempt(self) -> None:
        now = self.clock()
        sent_at = self.monotonic()
        if self.is_leader.is_set() and not self.term.valid():
            if testfaults.active("unfenced"):
                # The broken build acts like a naive leader that finishes what it was doing
                # before its next renewal tick notices the loss (the window fencing closes).
                await asyncio.sleep(self.lease_duration / 2)
            # Woken after a freeze longer than the lease: whatever happens next, the old term
            # is over (a standby may have acted); a renewal below starts a new one.
            self._demote("the term expired before it could be renewed (process paused?)")
        try:
            current = await self._read()
            spec = current.spec if current else None
            step = decide(spec, identity=self.identity, now=now)
            if step is Step.FOLLOW:
                self._demote("another holder is active")
                return
            await self._write(step, current, now)
            self._last_renew = now
            self.term.began(sent_at=sent_at)
            if not self.is_leader.is_set():
                log.info("acquired leadership", extra={"lease": self.name, "step": step.value})
                self.is_leader.set()
        except KubeError as exc:
            if exc.conflict:
                return  # somebody else wrote first; read again next round
            log.warning("lease update failed", extra={"lease": self.name, "error": str(exc)})
            if (
                self.is_leader.is_set()
                and self._last_renew is not None
                and (now - self._last_renew).total_seconds() >= self.lease_duration
            ):
                self._demote("could not renew within the lease duration")

    def _demote(self, why: str) -> None:
        self.term.ended()
        if self.is_leader.is_set():
            log.warning("lost leadership", extra={"lease": self.name, "reason": why})
            self.is_leader.clear()
            self.lost.set()

    async def _read(self) -> _Lease | None:
        try:
            data = await self.kube.get(LEASES, self.name, namespace=self.namespace)
        except KubeError as exc:
            if exc.not_found:
                return None
            raise
        return msgspec.json.decode(data, type=_Lease)

    async def _write(self, step: Step, current: _Lease | None, now: datetime) -> None:
        previous = current.spec if current else LeaseSpec()
        transitions = previous.leaseTransitions or 0
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": max(1, round(self.lease_duration)),
            "renewTime": micro_time(now),
            "acquireTime": micro_time(now)
            if step is not Step.RENEW or previous.acquireTime is None
            else micro_time(previous.acquireTime),
            "leaseTransitions": transitions + (1 if step is Step.TAKE_OVER else 0),
        }
        body: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": spec,
        }
        if current is None:
            await self.kube.create(LEASES, body, namespace=self.namespace)
            return
        body["metadata"]["resourceVersion"] = current.metadata.get("resourceVersion")
        await self.kube.replace(LEASES, self.name, body, namespace=self.namespace)

    async def _release(self) -> None:
        """Give the Lease up on clean shutdown so the standby need not wait for expiry."""
        current = await self._read()
        if current is None or current.spec.holderIdentity != self.identity:
            return
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "resourceVersion": current.metadata.get("resourceVersion"),
            },
            "spec": msgspec.to_builtins(msgspec.structs.replace(current.spec, holderIdentity=None)),
        }
        self.term.ended()
        await self.kube.replace(LEASES, self.name, body, namespace=self.namespace)
        self.is_leader.clear()
