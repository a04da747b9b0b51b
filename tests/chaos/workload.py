"""The owners' side of a schedule: the AppWrappers they submit and what they do to them later.

:func:`appwrapper_body` (pure) turns an :class:`~tests.chaos.plan.AppWrapperPlan` into the
AppWrapper to create. :class:`Driver` plays the users and the cluster's other controllers over
plain HTTP with its own User-Agent (``chaos-driver``, which the fault rules never match): it
submits the AppWrappers at their instants, releases the hold finalizer of a terminating pod some
seconds after it started terminating, deletes one running pod of a ``flaky`` AppWrapper's first
attempt (the one failure it induces), deletes an AppWrapper whose first teardown was decided
when the plan says so, and notes when each AppWrapper reaches the state L1 expects.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from tests.chaos.plan import AppWrapperPlan

from clearance import labels

NAMESPACE = "default"
HOLD = "chaos.clearance.dev/hold"
"""A finalizer only the driver removes (a volume that detaches late)."""
USER_AGENT = "chaos-driver/1 (owner)"
RUN_TIME = "kubesim.dev/run-time"
EXIT_CODE = "kubesim.dev/exit-code"
AW_PATH = "/apis/workload.codeflare.dev/v1beta1/namespaces/default/appwrappers"
POD_PATH = "/api/v1/namespaces/default/pods"
WAIT_SECONDS = 2
PAUSE_SECONDS = 1
STUCK_ALERT_SECONDS = 2
FORCE_SECONDS = 3


def _pod_spec(plan: AppWrapperPlan) -> dict[str, Any]:
    return {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": plan.grace,
        "containers": [
            {
                "name": "main",
                "image": "registry.example/trainer:1.0",
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
    }


def _pod_metadata(plan: AppWrapperPlan, name: str | None) -> dict[str, Any]:
    metadata: dict[str, Any] = {} if name is None else {"name": name}
    if plan.finalizer_release is not None:
        metadata["finalizers"] = [HOLD]
    if plan.behaviour in ("crashing", "completing"):
        code = "1" if plan.behaviour == "crashing" else "0"
        metadata["annotations"] = {RUN_TIME: f"{int(plan.run_time * 1000)}ms", EXIT_CODE: code}
    else:  # kubesim ends a Job's pods after --pod-run-time unless told otherwise
        metadata["annotations"] = {RUN_TIME: "3600s"}
    return metadata


def _item(template: Mapping[str, Any], *, pods: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"replicas": 1, "generictemplate": dict(template)}
    if pods:
        requests = {"cpu": "100m", "memory": "64Mi"}
        entry["custompodresources"] = [{"replicas": pods, "requests": requests}]
    return entry


def _pods(plan: AppWrapperPlan) -> list[dict[str, Any]]:
    return [
        _item(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": _pod_metadata(plan, f"{plan.name}-{i}"),
                "spec": _pod_spec(plan),
            },
            pods=1,
        )
        for i in range(plan.gang)
    ]


def _job(plan: AppWrapperPlan) -> dict[str, Any]:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{plan.name}-job"},
        "spec": {
            "parallelism": plan.gang,
            "completions": plan.gang,
            "backoffLimit": 0,
            "template": {"metadata": _pod_metadata(plan, None), "spec": _pod_spec(plan)},
        },
    }
    entry = _item(job, pods=plan.gang)
    if plan.behaviour == "completing":
        entry["completionstatus"] = "Complete"
    return entry


def _extras(plan: AppWrapperPlan) -> list[dict[str, Any]]:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{plan.name}-svc"},
        "spec": {"ports": [{"port": 80}], "selector": {"app": plan.name}},
    }
    config = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": f"{plan.name}-cfg"},
        "data": {"role": "trainer"},
    }
    return [_item(service, pods=0), _item(config, pods=0)]


def appwrapper_body(plan: AppWrapperPlan) -> dict[str, Any]:
    """The AppWrapper the owner of ``plan`` submits (MCAD v1beta1, Clearance's teardown fields)."""
    if plan.shape == "job":
        items = [_job(plan)]
    elif plan.shape == "multi":
        items = [*_pods(plan), *_extras(plan)]
    else:
        items = _pods(plan)
    requeuing = {
        "timeInSeconds": WAIT_SECONDS,
        "growthType": "none",
        "maxNumRequeuings": plan.max_requeuings,
        "pauseTimeInSeconds": PAUSE_SECONDS,
        "stuckAlertTimeInSeconds": STUCK_ALERT_SECONDS,
        "forceDeletionTimeInSeconds": FORCE_SECONDS,
        "finalizerRemoval": "Never",
    }
    return {
        "apiVersion": "workload.codeflare.dev/v1beta1",
        "kind": "AppWrapper",
        "metadata": {"name": plan.name, "namespace": NAMESPACE},
        "spec": {
            "priority": 5,
            "schedulingSpec": {"minAvailable": plan.gang, "requeuing": requeuing},
            "resources": {"GenericItems": items},
        },
    }


def settled(
    plan: AppWrapperPlan, aw: Mapping[str, Any] | None, pods: Sequence[Mapping[str, Any]]
) -> bool:
    """Is the AppWrapper in the state L1 expects (its own objects as the API shows them)?"""
    mine = [p for p in pods if _aw_of(p) == plan.name]
    if plan.expected == "Deleted":
        return aw is None and not mine
    if aw is None:
        return False
    status = aw.get("status") or {}
    state = status.get("state")
    clearance = status.get("clearance") or {}
    if plan.expected == "Running":
        attempt = clearance.get("attempt")
        current = [
            p
            for p in mine
            if labels.attempt_of(p["metadata"].get("labels") or {}) == attempt
            and not p["metadata"].get("deletionTimestamp")
            and (p.get("status") or {}).get("phase") == "Running"
        ]
        return (
            state == "Running"
            and clearance.get("phase") == "Dispatched"
            and len(current) >= plan.gang
            and len(current) == len(mine)
        )
    if plan.expected == "Failed":
        return state == "Failed" and not mine
    return bool(state == "Completed")


def _aw_of(obj: Mapping[str, Any]) -> str | None:
    found = (obj.get("metadata") or {}).get("labels") or {}
    return found.get(labels.MCAD_APPWRAPPER) or found.get(labels.CODEFLARE_APPWRAPPER)


@dataclass
class Driver:
    """Plays the AppWrappers' owners; :meth:`run` until cancelled."""

    url: str
    plans: tuple[AppWrapperPlan, ...]
    started: float = 0.0
    terminating_since: dict[str, float] = field(default_factory=dict)
    released: set[str] = field(default_factory=set)
    induced: dict[str, float] = field(default_factory=dict)
    """AppWrapper → when the driver deleted its pod (the induced failure)."""
    deleted: dict[str, float] = field(default_factory=dict)
    settled_at: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    _session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Driver:
        self._session = aiohttp.ClientSession(
            headers={"User-Agent": USER_AGENT}, timeout=aiohttp.ClientTimeout(total=10)
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def _call(
        self, method: str, path: str, *, body: Any = None, content_type: str | None = None
    ) -> tuple[int, Any]:
        assert self._session is not None
        headers = {"Content-Type": content_type} if content_type else {}
        for _ in range(20):
            try:
                async with self._session.request(
                    method, self.url + path, json=body, headers=headers
                ) as response:
                    return response.status, await response.json(content_type=None)
            except (aiohttp.ClientError, TimeoutError) as exc:
                last = exc
                await asyncio.sleep(0.1)
        raise RuntimeError(f"driver: {method} {path} failed: {last!r}")

    async def submit(self) -> None:
        self.started = time.time()
        for plan in sorted(self.plans, key=lambda p: p.submit_at):
            await asyncio.sleep(max(0.0, self.started + plan.submit_at - time.time()))
            code, answer = await self._call("POST", AW_PATH, body=appwrapper_body(plan))
            if code >= 300:
                self.errors.append(f"create {plan.name}: {code} {answer}")

    async def observe(self) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        _, aws = await self._call("GET", AW_PATH)
        _, pods = await self._call("GET", POD_PATH + f"?labelSelector={labels.MCAD_APPWRAPPER}")
        by_name = {a["metadata"]["name"]: a for a in aws.get("items") or ()}
        return by_name, list(pods.get("items") or ())

    async def step(self) -> None:
        """One round of the owners' actions (every 200 ms)."""
        aws, pods = await self.observe()
        now = time.time()
        plans = {p.name: p for p in self.plans}
        for pod in pods:
            await self._release(pod, plans, now)
        for plan in self.plans:
            aw = aws.get(plan.name)
            await self._induce(plan, aw, pods, now)
            await self._delete(plan, aw, now)
            if settled(plan, aw, pods):
                self.settled_at.setdefault(plan.name, now)
            else:
                self.settled_at.pop(plan.name, None)

    async def _release(
        self, pod: Mapping[str, Any], plans: Mapping[str, AppWrapperPlan], now: float
    ) -> None:
        meta = pod["metadata"]
        uid = meta["uid"]
        plan = plans.get(_aw_of(pod) or "")
        if (
            plan is None
            or plan.finalizer_release is None
            or HOLD not in (meta.get("finalizers") or ())
        ):
            return
        if not meta.get("deletionTimestamp") or uid in self.released:
            return
        since = self.terminating_since.setdefault(uid, now)
        if now - since < plan.finalizer_release:
            return
        ops = [
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "remove", "path": "/metadata/finalizers"},
        ]
        code, _ = await self._call(
            "PATCH",
            f"{POD_PATH}/{meta['name']}",
            body=ops,
            content_type="application/json-patch+json",
        )
        if code < 300 or code in (404, 409, 422):
            self.released.add(uid)

    async def _induce(
        self,
        plan: AppWrapperPlan,
        aw: Mapping[str, Any] | None,
        pods: list[dict[str, Any]],
        now: float,
    ) -> None:
        if plan.behaviour != "flaky" or plan.name in self.induced or aw is None:
            return
        first = [
            p
            for p in pods
            if _aw_of(p) == plan.name
            and labels.attempt_of(p["metadata"].get("labels") or {}) == 1
            and (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]
        if len(first) < plan.gang:
            return
        victim = first[0]["metadata"]
        code, _ = await self._call("DELETE", f"{POD_PATH}/{victim['name']}")
        if code < 300:
            self.induced[plan.name] = now

    async def _delete(self, plan: AppWrapperPlan, aw: Mapping[str, Any] | None, now: float) -> None:
        if not plan.delete_mid_teardown or plan.name in self.deleted or aw is None:
            return
        clearance = (aw.get("status") or {}).get("clearance") or {}
        # A teardown whose objects were already gone is decided and cleared within a few
        # milliseconds, between two of the driver's 200 ms rounds: `cycleAttempt`, written with
        # the decision and kept after the redispatch, says a teardown was decided all the same.
        if clearance.get("tearingDown") is None and clearance.get("cycleAttempt") is None:
            return
        code, _ = await self._call("DELETE", f"{AW_PATH}/{plan.name}")
        if code < 300 or code == 404:
            self.deleted[plan.name] = now

    async def run(self) -> None:
        while True:
            try:
                await self.step()
            except (RuntimeError, KeyError, ValueError) as exc:
                self.errors.append(repr(exc))
            await asyncio.sleep(0.2)

    async def wait_settled(self, *, hold: float, deadline: float) -> bool:
        """Poll :meth:`all_settled` (the driver's own rounds update it) until ``deadline``."""
        while not self.all_settled(hold=hold):
            if time.time() >= deadline:
                return False
            await asyncio.sleep(0.2)
        return True

    def all_settled(self, *, hold: float = 1.0) -> bool:
        """Every AppWrapper has stayed in its expected state for ``hold`` seconds."""
        now = time.time()
        return all(
            p.name in self.settled_at and now - self.settled_at[p.name] >= hold for p in self.plans
        )
