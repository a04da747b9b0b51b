"""Reference §2.8 / §0.3: the deletion decision table (pure port of store.go / delete.go)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubesim.deletion import DeleteOptions, plan_delete, should_delete_during_update

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def _pod(
    *,
    node: str | None = "n1",
    phase: str = "Running",
    finalizers: list[str] | None = None,
    **meta: Any,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"terminationGracePeriodSeconds": 30}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": "p", "finalizers": finalizers or [], **meta},
        "spec": spec,
        "status": {"phase": phase},
    }


def _plan(obj: dict[str, Any], **opts: Any) -> Any:
    return plan_delete(obj, DeleteOptions(**opts), graceful_type=True, gc_policy="delete", now=NOW)


def test_scheduled_pod_gets_grace_from_spec_and_stays() -> None:
    plan = _plan(_pod())
    assert not plan.remove
    assert plan.update is not None
    assert plan.update["metadata"]["deletionTimestamp"] == "2026-01-02T03:04:35Z"
    assert plan.update["metadata"]["deletionGracePeriodSeconds"] == 30


def test_unscheduled_pod_is_removed_at_once() -> None:
    plan = _plan(_pod(node=None))
    assert plan.remove


def test_terminal_pod_is_removed_at_once() -> None:
    assert _plan(_pod(phase="Succeeded")).remove
    assert _plan(_pod(phase="Failed")).remove


def test_grace_zero_with_finalizer_marks_but_keeps() -> None:
    plan = _plan(_pod(finalizers=["f"]), grace_period_seconds=0)
    assert not plan.remove
    assert plan.update is not None
    assert plan.update["metadata"]["deletionGracePeriodSeconds"] == 0


def test_second_delete_may_only_shorten_grace() -> None:
    first = _plan(_pod())
    assert first.update is not None
    longer = _plan(first.update, grace_period_seconds=60)
    assert longer.pending and longer.update is None
    shorter = _plan(first.update, grace_period_seconds=10)
    assert shorter.update is not None
    assert shorter.update["metadata"]["deletionTimestamp"] == "2026-01-02T03:04:15Z"
    assert not shorter.remove


def test_second_delete_with_grace_zero_removes_pod() -> None:
    first = _plan(_pod())
    assert first.update is not None
    assert _plan(first.update, grace_period_seconds=0).remove


def test_first_graceful_delete_bumps_generation() -> None:
    plan = _plan(_pod(generation=3))
    assert plan.update is not None and plan.update["metadata"]["generation"] == 4


def test_job_default_policy_adds_orphan_finalizer() -> None:
    job = {"metadata": {"name": "j", "generation": 1}}
    plan = plan_delete(job, DeleteOptions(), graceful_type=False, gc_policy="orphan", now=NOW)
    assert plan.update is not None and not plan.remove
    assert plan.update["metadata"]["finalizers"] == ["orphan"]
    assert plan.update["metadata"]["generation"] == 2


def test_background_policy_removes_job_at_once() -> None:
    job = {"metadata": {"name": "j"}}
    plan = plan_delete(
        job,
        DeleteOptions(propagation_policy="Background"),
        graceful_type=False,
        gc_policy="orphan",
        now=NOW,
    )
    assert plan.remove and plan.update is None


def test_foreground_policy_adds_foreground_finalizer() -> None:
    obj = {"metadata": {"name": "x"}}
    plan = plan_delete(
        obj,
        DeleteOptions(propagation_policy="Foreground"),
        graceful_type=False,
        gc_policy="delete",
        now=NOW,
    )
    assert plan.update is not None
    assert plan.update["metadata"]["finalizers"] == ["foregroundDeletion"]


def test_update_emptying_finalizers_deletes_only_with_zero_grace() -> None:
    old = {
        "metadata": {
            "name": "p",
            "deletionTimestamp": "x",
            "deletionGracePeriodSeconds": 0,
            "finalizers": ["f"],
        }
    }
    new = {"metadata": {"name": "p"}}
    assert should_delete_during_update(new, old)
    old["metadata"]["deletionGracePeriodSeconds"] = 30
    assert not should_delete_during_update(new, old)
