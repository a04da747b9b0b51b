"""Issue 19 Build 4: the workloads users wrap, end to end — a StatefulSet and a Deployment.

Both run at once on one stack (four nodes; each AppWrapper's pods are kept to their own two
nodes by node affinity, so losing a node touches one scenario only):

* **StatefulSet of 4** (``minAvailable: 4``, ``finalizerRemoval: AfterForceDeletion``): ``db-1``
  gets a finalizer, then its node is lost. The job is requeued and held — a stuck alert naming
  ``db-1``, the force deletion at its deadline, the finalizer removal — and only once ``db-1`` is
  gone does ``cleared`` come and the redispatch; the four ordinals run again in attempt 2 with
  the same names and new UIDs. No attempt-2 object is created while an attempt-1 object exists,
  judged from kubesim's write history (the StatefulSet controller would otherwise recreate
  ``db-1`` only after the old pod is gone, but a new StatefulSet would start at ``db-0``).
* **Deployment of 3** (``minAvailable: 3``): reaches Running with its counts, its pods owned by a
  ReplicaSet owned by the Deployment (Pod → ReplicaSet → Deployment).

The PyTorchJob case is the narrated demo (``tests/e2e/test_demo.py``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import pytest_asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import (
    HOLD,
    NAMESPACE,
    EventLog,
    Scenario,
    Write,
    appwrapper,
    attempts_from_history,
    coexistence_violations,
    condition,
    dump_logs,
    eventually,
    failed,
    pod_state,
    requeuing,
    stack_config,
)

from clearance import events, labels
from clearance.kube import PODS, Resource

REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
STS, STS_PODS, STUCK = "db", tuple(f"db-{i}" for i in range(4)), "db-1"
DEPLOY, DEPLOY_PODS = "web", 3
STUCK_ALERT, FORCE = 1, 3
# Nodes are declared lost 1 s after their kubelet stops and evicted 1 s later.
FAST_NODES = ("--node-monitor-grace", "1s", "--default-toleration", "1s")

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


def _template(app: str, nodes: Sequence[str]) -> dict[str, Any]:
    hosts = {"key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}
    required = {"nodeSelectorTerms": [{"matchExpressions": [hosts]}]}
    return {
        "metadata": {"labels": {"app": app}},
        "spec": {
            "terminationGracePeriodSeconds": 1,
            "affinity": {
                "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
            },
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/db:1.0",
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def _workload(kind: str, name: str, replicas: int, nodes: Sequence[str]) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": _template(name, nodes),
    }
    if kind == "StatefulSet":
        spec["serviceName"] = name
    template = {"apiVersion": "apps/v1", "kind": kind, "metadata": {"name": name}, "spec": spec}
    return {"replicas": 1, "generictemplate": template}


class _Meta(msgspec.Struct):
    name: str
    uid: str
    labels: dict[str, str] = {}
    ownerReferences: list[dict[str, Any]] = []
    deletionTimestamp: str | None = None


class _Pod(msgspec.Struct):
    metadata: _Meta
    spec: dict[str, Any] = {}
    status: dict[str, Any] = {}


async def _pods(scenario: Scenario, aw: str) -> dict[str, _Pod]:
    listed = await scenario.kube.list(
        PODS, namespace=NAMESPACE, label_selector=labels.selector_for(aw)
    )
    found = (msgspec.json.decode(raw, type=_Pod) for raw in listed.items)
    return {p.metadata.name: p for p in found}


def _state(pod: _Pod | None) -> str:
    if pod is None:
        return "absent"
    meta = {"deletionTimestamp": pod.metadata.deletionTimestamp}
    return pod_state({"metadata": meta, "status": pod.status})


async def _all_running(
    scenario: Scenario, aw: str, *, names: Sequence[str] = (), count: int = 0, attempt: int
) -> dict[str, _Pod] | None:
    pods = {
        n: p
        for n, p in (await _pods(scenario, aw)).items()
        if _state(p) == "Running" and labels.attempt_of(p.metadata.labels) == attempt
    }
    if names and set(pods) >= set(names):
        return pods
    if count and len(pods) == count:
        return pods
    return None


# ------------------------------------------------------------------------ StatefulSet


@dataclass
class StatefulSetRun:
    first: dict[str, _Pod]
    teardown: events.CycleTeardownStarted
    held: _Pod | None
    held_types: list[tuple[str, int]]
    cleared: events.CycleCleared
    second: dict[str, _Pod]
    status: dict[str, Any]


async def drive_statefulset(scenario: Scenario) -> StatefulSetRun:
    log = scenario.log
    policy = requeuing(
        wait=2, pause=1, stuck_alert=STUCK_ALERT, force=FORCE,
        finalizer_removal="AfterForceDeletion",
    )  # fmt: skip
    item = _workload("StatefulSet", STS, len(STS_PODS), ("node-1", "node-2"))
    await scenario.submit(
        appwrapper(STS, [item], min_available=len(STS_PODS), requeue=policy), ledger=False
    )
    first = await eventually(
        lambda: _all_running(scenario, STS, names=STS_PODS, attempt=1),
        timeout=30, what="the four ordinals to run",
    )  # fmt: skip
    await scenario.kube.patch(
        PODS, STUCK, {"metadata": {"finalizers": [HOLD]}}, namespace=NAMESPACE
    )
    scenario.lose_node(str(first[STUCK].spec["nodeName"]))
    teardown = await log.wait_for(events.CycleTeardownStarted, appwrapper=ref(log, STS), timeout=30)
    # Past the stuck alert, just before the force deletion: everything must still wait.
    hold_until = teardown.occurred_at.timestamp() + FORCE - 0.3
    await asyncio.sleep(max(0.0, hold_until - time.time()))
    held = (await _pods(scenario, STS)).get(STUCK)
    held_types = [
        (r.event.event_type, getattr(r.event, "attempt", 0))
        for r in log.received
        if getattr(r.event, "appwrapper", None) == teardown.appwrapper
    ]
    cleared = await log.wait_for(events.CycleCleared, appwrapper=teardown.appwrapper, timeout=30)
    try:
        second = await eventually(
            lambda: _all_running(scenario, STS, names=STS_PODS, attempt=2),
            timeout=20,
            what="the four ordinals to run again",
        )
    except AssertionError:
        second = {}  # the test reports it, after the Safety checks that explain it
    return StatefulSetRun(
        first=first,
        teardown=teardown,
        held=held,
        held_types=held_types,
        cleared=cleared,
        second=second,
        status=await scenario.status(STS),
    )


def ref(log: EventLog, name: str) -> events.AppWrapperRef:
    """An AppWrapper's reference, from its first dispatch (known by the time it is asked)."""
    return next(e.appwrapper for e in log.of(events.CycleDispatched) if e.appwrapper.name == name)


# ------------------------------------------------------------------------- Deployment


@dataclass
class DeploymentRun:
    pods: dict[str, _Pod]
    status: dict[str, Any]
    replicasets: list[dict[str, Any]]
    deployment_uid: str


async def drive_deployment(scenario: Scenario) -> DeploymentRun:
    item = _workload("Deployment", DEPLOY, DEPLOY_PODS, ("node-3", "node-4"))
    await scenario.submit(
        appwrapper(DEPLOY, [item], min_available=DEPLOY_PODS, requeue=requeuing(wait=30)),
        ledger=False,
    )

    async def counted() -> dict[str, Any] | None:
        status = await scenario.status(DEPLOY)
        running = condition(status, "Running")
        ok = running is not None and running.get("status") == "True"
        return status if ok and status.get("running") == DEPLOY_PODS else None

    status = await eventually(counted, timeout=30, what="the Deployment's gang to be counted")
    pods = await eventually(
        lambda: _all_running(scenario, DEPLOY, count=DEPLOY_PODS, attempt=1),
        timeout=10, what="three Running pods",
    )  # fmt: skip
    listed = await scenario.kube.list(
        REPLICASETS, namespace=NAMESPACE, label_selector=labels.selector_for(DEPLOY)
    )
    replicasets = [msgspec.json.decode(raw, type=dict[str, Any]) for raw in listed.items]
    [dispatched] = scenario.log.of(events.CycleDispatched, appwrapper=ref(scenario.log, DEPLOY))
    return DeploymentRun(
        pods=pods,
        status=status,
        replicasets=replicasets,
        deployment_uid=next(o.uid for o in dispatched.items if o.kind == "Deployment"),
    )


# ------------------------------------------------------------------------------ runs


@dataclass
class Runs:
    scenario: Scenario
    sts: StatefulSetRun
    deploy: DeploymentRun
    history: list[Write]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def runs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Runs]:
    from clearance.stack import LocalStack

    stack = LocalStack(
        stack_config(tmp_path_factory.mktemp("workloads"), nodes=4, kubesim_flags=FAST_NODES)
    )
    scenario: Scenario | None = None
    broken = False
    try:
        await stack.start()
        scenario = await Scenario.open(stack)
        try:
            sts, deploy = await asyncio.gather(
                drive_statefulset(scenario), drive_deployment(scenario)
            )
            # Leave the machinery time to misbehave (a late requeue, a duplicate alert).
            await asyncio.sleep(0.5)
            history = await scenario.history()
        except BaseException:
            broken = True
            raise
        yield Runs(scenario, sts, deploy, history)
    finally:
        if scenario is not None:
            await scenario.close()
        module_items = [
            i for i in request.session.items if getattr(i, "module", None) is request.module
        ]
        if broken or any(failed(i) for i in module_items):
            dump_logs(stack)
            if scenario is not None:
                print(scenario.log.timeline())
        await stack.stop()


async def test_a_statefulset_member_stuck_on_a_lost_node_holds_the_redispatch_until_gone(
    runs: Runs,
) -> None:
    run, log = runs.sts, runs.scenario.log
    aw = run.teardown.appwrapper
    # Held: db-1 is still the attempt-1 pod, nothing cleared or dispatched again.
    assert _state(run.held) == "Terminating"
    assert run.held is not None and run.held.metadata.uid == run.first[STUCK].metadata.uid
    assert ("cycle.cleared", 1) not in run.held_types
    assert ("cycle.dispatched", 2) not in run.held_types

    # Cleared only after db-1 was gone, never an attempt-2 object beside an attempt-1 one.
    history = runs.history
    attempts = attempts_from_history(history, STS)
    assert coexistence_violations(history, attempts) == []
    [gone] = [
        w.time for w in history if w.uid == run.first[STUCK].metadata.uid and w.type == "DELETED"
    ]
    assert run.cleared.cleared_at.timestamp() >= gone

    # One stuck alert naming db-1, the force deletion at its deadline, the finalizer removal.
    stuck = log.of(events.AlertDeletionStuck, appwrapper=aw)
    [alert] = [e for e in stuck if e.step == "stuck_alert"]
    assert STUCK in {s.object.name for s in alert.stuck}
    [forced] = log.of(events.CycleDeletionForced, appwrapper=aw)
    assert STUCK in {o.name for o in forced.objects}
    at_force = (forced.occurred_at - run.teardown.occurred_at).total_seconds()
    assert FORCE - 0.5 <= at_force <= FORCE + 3, at_force
    [removed] = log.of(events.CycleFinalizersRemoved, appwrapper=aw)
    assert [(r.object.name, r.finalizers) for r in removed.removed] == [(STUCK, (HOLD,))]

    # Then attempt 2: the same names, new UIDs.
    [redispatched] = log.of(events.CycleRedispatched, appwrapper=aw)
    assert redispatched.attempt == 2
    assert set(run.second) == set(STS_PODS)
    assert not {p.metadata.uid for p in run.first.values()} & {
        p.metadata.uid for p in run.second.values()
    }
    assert [e.attempt for e in log.of(events.CycleRequeued, appwrapper=aw)] == [1]
    assert set(attempts.values()) == {1, 2}


async def test_a_deployment_reaches_running_with_its_counts_through_its_replicaset(
    runs: Runs,
) -> None:
    run = runs.deploy
    assert run.status.get("running") == DEPLOY_PODS
    assert run.status.get("pending", 0) == 0
    [rs] = run.replicasets
    rs_owner = rs["metadata"]["ownerReferences"][0]
    assert (rs_owner["kind"], rs_owner["uid"]) == ("Deployment", run.deployment_uid)
    for pod in run.pods.values():
        [owner] = pod.metadata.ownerReferences
        assert (owner["kind"], owner["uid"]) == ("ReplicaSet", rs["metadata"]["uid"])
    log = runs.scenario.log
    assert not log.of(events.CycleRequeued, appwrapper=ref(log, DEPLOY))
