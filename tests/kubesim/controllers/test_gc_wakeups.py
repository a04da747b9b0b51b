"""The garbage collector wakes up for the changes that can alter its plan, and only those."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from kubesim.client import PODS, Informer, KubeClient
from kubesim.controllers.garbagecollector import GarbageCollector, GcPlan, Owned, plan_collection
from kubesim.controllers.gcgraph import GraphView

OWNER = {"metadata": {"name": "o", "namespace": "default", "uid": "o1", "resourceVersion": "1"}}


def _pod(**meta: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "default", "uid": "u1", **meta},
        "status": {"phase": "Pending"},
    }


async def _collector() -> tuple[GarbageCollector, Informer]:
    pods = Informer(cast(KubeClient, None), PODS)
    return GarbageCollector(cast(KubeClient, None), informers={PODS: pods}), pods


def _woken(collector: GarbageCollector) -> bool:
    woken = collector._wake.is_set()
    collector._wake.clear()
    return woken


def test_pods_of_a_live_owner_come_and_go_without_waking_the_garbage_collector() -> None:
    collector, pods = asyncio.run(_collector())
    pods._apply("ADDED", OWNER)
    owned = _pod(resourceVersion="2", ownerReferences=[{"uid": "o1", "kind": "Pod"}])
    pods._apply("ADDED", owned)
    assert not _woken(collector)
    pods._apply("MODIFIED", {**owned, "status": {"phase": "Running"}})
    pods._apply("DELETED", owned)
    assert not _woken(collector)


def test_an_owner_being_deleted_wakes_the_garbage_collector() -> None:
    collector, pods = asyncio.run(_collector())
    pods._apply("ADDED", OWNER)
    pods._apply("ADDED", _pod(resourceVersion="2", ownerReferences=[{"uid": "o1"}]))
    _woken(collector)
    deleting = {"metadata": {**OWNER["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    pods._apply(
        "MODIFIED", {**deleting, "metadata": {**deleting["metadata"], "resourceVersion": "3"}}
    )
    assert _woken(collector)


def test_a_pod_whose_owner_is_not_cached_wakes_the_garbage_collector() -> None:
    collector, pods = asyncio.run(_collector())
    pods._apply("ADDED", _pod(resourceVersion="2", ownerReferences=[{"uid": "elsewhere"}]))
    assert _woken(collector)


UIDS = ("a", "b", "c", "d")
object_st = st.fixed_dictionaries(
    {
        "owners": st.lists(st.sampled_from(UIDS), max_size=2, unique=True),
        "block": st.booleans(),
        "deleting": st.booleans(),
        "finalizers": st.lists(st.sampled_from(("orphan", "foregroundDeletion", "x")), max_size=2),
    }
)


def _obj(uid: str, shape: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": uid,
        "uid": uid,
        "ownerReferences": [
            {"uid": o, "blockOwnerDeletion": shape["block"]} for o in shape["owners"]
        ],
        "finalizers": shape["finalizers"],
    }
    if shape["deleting"]:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return {"metadata": meta}


def _plan(objects: dict[str, dict[str, Any]]) -> Any:
    plan: GcPlan = plan_collection(
        [Owned(PODS, obj) for obj in objects.values()], dangling=set(), existing=set()
    )
    return (
        sorted((d.uid, policy) for d, policy in plan.delete),
        sorted((d.uid, sorted(uids)) for d, uids in plan.strip_refs),
        sorted((o.uid, f) for o, f in plan.remove_finalizer),
        sorted((d.uid, str(ref.get("uid"))) for d, ref in plan.unresolved),
    )


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(UIDS), st.none() | object_st), max_size=25))
def test_a_change_that_does_not_wake_the_collector_leaves_its_plan_unchanged(
    steps: list[tuple[str, dict[str, Any] | None]],
) -> None:
    view = GraphView()
    objects: dict[str, dict[str, Any]] = {}
    for uid, shape in steps:
        before = _plan(objects)
        if shape is None:
            objects.pop(uid, None)
        else:
            objects[uid] = _obj(uid, shape)
        if not view.change(uid, objects.get(uid)):
            assert _plan(objects) == before


def test_a_new_dependent_of_a_dependent_of_a_foreground_deletion_wakes_the_collector() -> None:
    # Found by the property above: `a` (owned by `b`, being deleted in the foreground) is
    # deleted by the collector with a policy that depends on whether `a` has dependents.
    view = GraphView()
    objects = {
        "a": _obj("a", {"owners": ["b"], "block": False, "deleting": False, "finalizers": []}),
        "b": _obj(
            "b",
            {"owners": [], "block": False, "deleting": True, "finalizers": ["foregroundDeletion"]},
        ),
    }
    for uid, obj in objects.items():
        view.change(uid, obj)
    before = _plan(objects)
    objects["c"] = _obj("c", {"owners": ["a"], "block": False, "deleting": False, "finalizers": []})
    assert _plan(objects) != before
    assert view.change("c", objects["c"])
