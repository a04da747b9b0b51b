"""Pure controller decisions: taint eviction, node health, PodGC, kubelet steps, GC, Job plans."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubesim.client import Resource
from kubesim.controllers.garbagecollector import Owned, plan_collection
from kubesim.controllers.job import TRACKING_FINALIZER, job_pod, plan_job
from kubesim.controllers.kubelet import KubeletTimings, PodRecord, decide_pod_step, run_time_of
from kubesim.controllers.nodelifecycle import desired_taints, observe_health, unknown_conditions
from kubesim.controllers.objects import format_micro_time, format_time
from kubesim.controllers.podgc import decide_podgc
from kubesim.controllers.tainteviction import decide_evictions, min_toleration_seconds

NOW = 1_800_000_000.0
UNREACHABLE = "node.kubernetes.io/unreachable"


def tainted_node(*taints: dict[str, Any], ready: str = "Unknown") -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "creationTimestamp": format_time(NOW - 1000)},
        "spec": {"taints": list(taints)},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


def a_pod(name: str = "p", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}], **spec},
        "status": {"phase": "Running"},
    }


UNREACHABLE_TAINT = {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": format_time(NOW - 10)}


# ---- taint eviction ------------------------------------------------------------------------


def test_pod_not_tolerating_a_noexecute_taint_is_evicted_now() -> None:
    [eviction] = decide_evictions(tainted_node(UNREACHABLE_TAINT), [a_pod()], now=NOW)
    assert eviction.due == NOW


def test_toleration_seconds_delay_eviction_from_the_taint() -> None:
    tolerant = a_pod(
        tolerations=[{"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 300}]
    )
    [eviction] = decide_evictions(tainted_node(UNREACHABLE_TAINT), [tolerant], now=NOW)
    assert eviction.due == NOW - 10 + 300


def test_eviction_clock_starts_when_the_controller_scheduled_the_pod() -> None:
    tolerant = a_pod(
        tolerations=[{"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 5}]
    )
    [eviction] = decide_evictions(
        tainted_node(UNREACHABLE_TAINT), [tolerant], now=NOW, started={"uid-p": NOW - 2}
    )
    assert eviction.due == NOW + 3


def test_smallest_toleration_of_several_taints_wins() -> None:
    custom = {"key": "maintenance", "effect": "NoExecute"}
    tolerant = a_pod(
        tolerations=[
            {"key": "maintenance", "operator": "Exists"},  # forever
            {"key": UNREACHABLE, "operator": "Exists", "tolerationSeconds": 60},
        ]
    )
    assert decide_evictions(tainted_node(custom), [tolerant], now=NOW) == []
    [eviction] = decide_evictions(
        tainted_node(custom, UNREACHABLE_TAINT), [tolerant], now=NOW, started={"uid-p": NOW}
    )
    assert eviction.due == NOW + 60


def test_toleration_without_seconds_tolerates_forever() -> None:
    forever = a_pod(tolerations=[{"key": UNREACHABLE, "operator": "Exists"}])
    assert decide_evictions(tainted_node(UNREACHABLE_TAINT), [forever], now=NOW) == []


def test_negative_toleration_seconds_mean_evict_now() -> None:
    assert min_toleration_seconds([{"tolerationSeconds": -5}, {"tolerationSeconds": 10}]) == 0


def test_noschedule_taints_never_evict() -> None:
    taint = {"key": UNREACHABLE, "effect": "NoSchedule"}
    assert decide_evictions(tainted_node(taint), [a_pod()], now=NOW) == []


def test_pods_already_terminating_are_not_evicted_again() -> None:
    deleting = a_pod()
    deleting["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert decide_evictions(tainted_node(UNREACHABLE_TAINT), [deleting], now=NOW) == []


# ---- node lifecycle ------------------------------------------------------------------------


def healthy_node(beat: float) -> dict[str, Any]:
    return {
        "metadata": {"name": "n1", "creationTimestamp": format_time(NOW - 1000)},
        "spec": {},
        "status": {
            "conditions": [
                {
                    "type": t,
                    "status": s,
                    "lastHeartbeatTime": format_time(beat),
                    "reason": "Kubelet",
                }
                for t, s in (
                    ("Ready", "True"),
                    ("MemoryPressure", "False"),
                    ("DiskPressure", "False"),
                    ("PIDPressure", "False"),
                )
            ]
        },
    }


def lease(renew: float) -> dict[str, Any]:
    return {"spec": {"renewTime": format_micro_time(renew)}}


def test_probe_time_moves_only_when_a_heartbeat_changes() -> None:
    first = observe_health(None, healthy_node(NOW - 100), lease(NOW - 10), now=NOW)
    assert first.probe_time == NOW  # first sight counts as a sign of life
    same = observe_health(first, healthy_node(NOW - 100), lease(NOW - 10), now=NOW + 5)
    assert same.probe_time == NOW
    renewed = observe_health(same, healthy_node(NOW - 100), lease(NOW + 4), now=NOW + 6)
    assert renewed.probe_time == NOW + 6


def test_node_seen_recently_stays_ready_and_is_rechecked_at_the_deadline() -> None:
    conditions, check_at = unknown_conditions(
        healthy_node(NOW - 100), last_probe=NOW - 10, now=NOW, grace=40
    )
    assert conditions is None and check_at == pytest.approx(NOW + 30)


def test_silent_node_gets_unknown_conditions_after_the_grace_period() -> None:
    conditions, _ = unknown_conditions(
        healthy_node(NOW - 100), last_probe=NOW - 41, now=NOW, grace=40
    )
    assert conditions is not None
    by_type = {c["type"]: c for c in conditions}
    for kind in ("Ready", "MemoryPressure", "DiskPressure", "PIDPressure"):
        assert by_type[kind]["status"] == "Unknown"
        assert by_type[kind]["reason"] == "NodeStatusUnknown"
        assert by_type[kind]["message"] == "Kubelet stopped posting node status."
    assert by_type["Ready"]["lastHeartbeatTime"] == format_time(NOW - 100)


def test_unknown_ready_gives_unreachable_taints_with_time_added_on_noexecute() -> None:
    node = tainted_node(ready="Unknown")
    taints = desired_taints(node, now=NOW)
    assert {"key": UNREACHABLE, "effect": "NoSchedule"} in taints
    assert {"key": UNREACHABLE, "effect": "NoExecute", "timeAdded": format_time(NOW)} in taints


def test_false_ready_gives_not_ready_taints() -> None:
    keys = {(t["key"], t["effect"]) for t in desired_taints(tainted_node(ready="False"), now=NOW)}
    assert keys == {
        ("node.kubernetes.io/not-ready", "NoSchedule"),
        ("node.kubernetes.io/not-ready", "NoExecute"),
    }


def test_ready_node_loses_managed_taints_but_keeps_others() -> None:
    custom = {
        "key": "node.kubernetes.io/out-of-service",
        "value": "nodeshutdown",
        "effect": "NoExecute",
    }
    node = tainted_node(
        UNREACHABLE_TAINT, {"key": UNREACHABLE, "effect": "NoSchedule"}, custom, ready="True"
    )
    assert desired_taints(node, now=NOW) == [custom]


def test_existing_taint_keeps_its_time_added() -> None:
    node = tainted_node(UNREACHABLE_TAINT, ready="Unknown")
    [kept] = [t for t in desired_taints(node, now=NOW) if t["effect"] == "NoExecute"]
    assert kept["timeAdded"] == UNREACHABLE_TAINT["timeAdded"]


def test_full_disruption_removes_noexecute_taints() -> None:
    node = tainted_node(UNREACHABLE_TAINT, ready="Unknown")
    effects = {t["effect"] for t in desired_taints(node, now=NOW, full_disruption=True)}
    assert effects == {"NoSchedule"}


def test_cordoned_node_gets_the_unschedulable_taint() -> None:
    node = tainted_node(ready="True")
    node["spec"]["unschedulable"] = True
    assert desired_taints(node, now=NOW) == [
        {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}
    ]


# ---- PodGC ---------------------------------------------------------------------------------


def terminating(pod: dict[str, Any]) -> dict[str, Any]:
    pod = copy.deepcopy(pod)
    pod["metadata"]["deletionTimestamp"] = format_time(NOW)
    pod["metadata"]["deletionGracePeriodSeconds"] = 30
    return pod


def test_pods_on_a_missing_node_wait_for_the_quarantine() -> None:
    missing: dict[str, float] = {}
    plan = decide_podgc(
        [a_pod()], {}, now=NOW, missing_since=missing, quarantine=40, terminated_threshold=0
    )
    assert plan.confirm_orphans == [] and plan.next_at == NOW + 40
    plan = decide_podgc(
        [a_pod()], {}, now=NOW + 41, missing_since=missing, quarantine=40, terminated_threshold=0
    )
    assert [p["metadata"]["name"] for p in plan.confirm_orphans] == ["p"]


def test_terminating_pod_on_out_of_service_not_ready_node_is_force_deleted() -> None:
    node = tainted_node(
        {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}, ready="Unknown"
    )
    plan = decide_podgc(
        [terminating(a_pod())],
        {"n1": node},
        now=NOW,
        missing_since={},
        quarantine=40,
        terminated_threshold=0,
    )
    assert [(a.pod["metadata"]["name"], a.reason) for a in plan.actions] == [
        ("p", "terminating-out-of-service")
    ]


def test_out_of_service_taint_on_a_ready_node_does_nothing() -> None:
    node = tainted_node(
        {"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}, ready="True"
    )
    plan = decide_podgc(
        [terminating(a_pod())],
        {"n1": node},
        now=NOW,
        missing_since={},
        quarantine=40,
        terminated_threshold=0,
    )
    assert plan.actions == []


def test_terminating_pod_on_unreachable_node_without_out_of_service_stays() -> None:
    node = tainted_node(UNREACHABLE_TAINT, ready="Unknown")
    plan = decide_podgc(
        [terminating(a_pod())],
        {"n1": node},
        now=NOW,
        missing_since={},
        quarantine=40,
        terminated_threshold=0,
    )
    assert plan.actions == []


def test_unscheduled_terminating_pod_is_force_deleted() -> None:
    pod = terminating(a_pod())
    del pod["spec"]["nodeName"]
    plan = decide_podgc([pod], {}, now=NOW, missing_since={}, quarantine=40, terminated_threshold=0)
    assert [a.reason for a in plan.actions] == ["unscheduled-terminating"]


def test_terminated_pods_beyond_the_threshold_are_deleted_oldest_first() -> None:
    pods = []
    for i in range(3):
        p = a_pod(f"p{i}")
        p["status"]["phase"] = "Succeeded"
        p["metadata"]["creationTimestamp"] = format_time(NOW - 100 + i)
        pods.append(p)
    node = tainted_node(ready="True")
    plan = decide_podgc(
        pods, {"n1": node}, now=NOW, missing_since={}, quarantine=40, terminated_threshold=2
    )
    assert [(a.pod["metadata"]["name"], a.reason) for a in plan.actions] == [("p0", "terminated")]


# ---- kubelet -------------------------------------------------------------------------------

TIMINGS = KubeletTimings(pod_start_delay=1.0, pod_run_time=5.0, termination_delay=2.0)


def test_new_pod_is_initialized_then_started_after_the_start_delay() -> None:
    record = PodRecord(seen_at=NOW)
    pod = a_pod()
    pod["status"] = {"phase": "Pending"}
    assert decide_pod_step(pod, record, now=NOW, timings=TIMINGS).action == "initialize"
    pod["status"]["startTime"] = format_time(NOW)
    assert decide_pod_step(pod, record, now=NOW + 0.5, timings=TIMINGS).next_at == NOW + 1
    assert decide_pod_step(pod, record, now=NOW + 1, timings=TIMINGS).action == "start"


def test_job_owned_pod_completes_after_the_run_time() -> None:
    pod = a_pod(restartPolicy="Never")
    pod["metadata"]["ownerReferences"] = [
        {"kind": "Job", "controller": True, "uid": "j", "name": "j", "apiVersion": "batch/v1"}
    ]
    record = PodRecord(seen_at=NOW, started_at=NOW)
    assert decide_pod_step(pod, record, now=NOW + 4, timings=TIMINGS).next_at == NOW + 5
    assert decide_pod_step(pod, record, now=NOW + 5, timings=TIMINGS).action == "complete"


def test_run_time_annotation_makes_a_plain_pod_complete() -> None:
    pod = a_pod(restartPolicy="OnFailure")
    pod["metadata"]["annotations"] = {"kubesim.dev/run-time": "1500ms"}
    assert run_time_of(pod, default=5.0) == 1.5
    always = a_pod()
    always["metadata"]["annotations"] = {"kubesim.dev/run-time": "1s"}
    assert run_time_of(always, default=5.0) is None


def test_deleted_pod_stops_after_min_of_grace_and_termination_delay() -> None:
    pod = terminating(a_pod())  # grace 30, termination delay 2
    record = PodRecord(seen_at=NOW - 10, deletion_seen_at=NOW)
    assert decide_pod_step(pod, record, now=NOW + 1, timings=TIMINGS).next_at == NOW + 2
    assert decide_pod_step(pod, record, now=NOW + 2, timings=TIMINGS).action == "stop"
    pod["metadata"]["deletionGracePeriodSeconds"] = 1
    assert decide_pod_step(pod, record, now=NOW + 1, timings=TIMINGS).action == "stop"


def test_terminal_deleted_pod_gets_the_final_delete_at_once() -> None:
    pod = terminating(a_pod())
    pod["status"]["phase"] = "Failed"
    assert decide_pod_step(pod, PodRecord(seen_at=NOW), now=NOW, timings=TIMINGS).action == "delete"


# ---- garbage collector ---------------------------------------------------------------------

JOBS = Resource("batch", "v1", "jobs", True, "Job")
PODS = Resource("", "v1", "pods", True, "Pod")


def owned_pod(name: str, owner_uid: str, *, block: bool = True) -> Owned:
    pod = a_pod(name)
    pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "j",
            "uid": owner_uid,
            "controller": True,
            "blockOwnerDeletion": block,
        }
    ]
    return Owned(PODS, pod)


def job(
    uid: str = "job-uid", *, finalizers: list[str] | None = None, deleting: bool = False
) -> Owned:
    meta: dict[str, Any] = {
        "name": "j",
        "namespace": "default",
        "uid": uid,
        "finalizers": finalizers or [],
    }
    if deleting:
        meta["deletionTimestamp"] = format_time(NOW)
    return Owned(JOBS, {"metadata": meta, "spec": {}})


def test_dependent_of_a_confirmed_missing_owner_is_deleted_in_background() -> None:
    plan = plan_collection([owned_pod("p", "gone")], dangling={"gone"}, existing=set())
    assert [(d.obj["metadata"]["name"], policy) for d, policy in plan.delete] == [
        ("p", "Background")
    ]


def test_owner_missing_from_cache_is_looked_up_before_anything_is_deleted() -> None:
    plan = plan_collection([owned_pod("p", "unknown")], dangling=set(), existing=set())
    assert plan.delete == [] and len(plan.unresolved) == 1


def test_foreground_owner_deletes_dependents_and_keeps_its_finalizer_while_they_exist() -> None:
    owner = job(finalizers=["foregroundDeletion"], deleting=True)
    plan = plan_collection([owner, owned_pod("p", "job-uid")], dangling=set(), existing=set())
    assert [d.obj["metadata"]["name"] for d, _ in plan.delete] == ["p"]
    assert plan.remove_finalizer == []


def test_terminating_dependent_still_blocks_foreground_deletion() -> None:
    owner = job(finalizers=["foregroundDeletion"], deleting=True)
    dependent = owned_pod("p", "job-uid")
    dependent.obj["metadata"]["deletionTimestamp"] = format_time(NOW)
    plan = plan_collection([owner, dependent], dangling=set(), existing=set())
    assert plan.delete == [] and plan.remove_finalizer == []


def test_foreground_finalizer_goes_when_only_non_blocking_dependents_remain() -> None:
    owner = job(finalizers=["foregroundDeletion"], deleting=True)
    plan = plan_collection(
        [owner, owned_pod("p", "job-uid", block=False)], dangling=set(), existing=set()
    )
    assert [(o.uid, f) for o, f in plan.remove_finalizer] == [("job-uid", "foregroundDeletion")]


def test_orphan_finalizer_strips_owner_references_first() -> None:
    owner = job(finalizers=["orphan"], deleting=True)
    plan = plan_collection([owner, owned_pod("p", "job-uid")], dangling=set(), existing=set())
    assert [(d.obj["metadata"]["name"], uids) for d, uids in plan.strip_refs] == [
        ("p", {"job-uid"})
    ]
    assert plan.delete == [] and plan.remove_finalizer == []
    plan = plan_collection([owner], dangling=set(), existing=set())
    assert [(o.uid, f) for o, f in plan.remove_finalizer] == [("job-uid", "orphan")]


def test_dangling_reference_next_to_a_solid_owner_is_only_removed() -> None:
    dependent = owned_pod("p", "job-uid")
    dependent.obj["metadata"]["ownerReferences"].append(
        {"apiVersion": "batch/v1", "kind": "Job", "name": "old", "uid": "gone"}
    )
    plan = plan_collection([job(), dependent], dangling={"gone"}, existing=set())
    assert plan.delete == [] and [uids for _, uids in plan.strip_refs] == [{"gone"}]


# ---- Job controller ------------------------------------------------------------------------


def a_job(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": "default", "uid": "job-uid"},
        "spec": {
            "template": {
                "metadata": {"labels": {"app": "x"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox"}],
                },
            },
            **spec,
        },
        "status": {},
    }


def job_pod_in(
    phase: str, name: str, *, deleting: bool = False, tracked: bool = True
) -> dict[str, Any]:
    pod = job_pod(a_job())
    pod["metadata"].update(name=name, uid=f"uid-{name}")
    if not tracked:
        pod["metadata"]["finalizers"] = []
    if deleting:
        pod["metadata"]["deletionTimestamp"] = format_time(NOW)
    pod["status"] = {"phase": phase}
    return pod


def test_job_pod_carries_labels_owner_reference_and_tracking_finalizer() -> None:
    pod = job_pod(a_job())
    meta = pod["metadata"]
    assert meta["generateName"] == "j-"
    assert meta["labels"]["app"] == "x"
    assert meta["labels"]["batch.kubernetes.io/controller-uid"] == "job-uid"
    assert meta["labels"]["batch.kubernetes.io/job-name"] == "j"
    assert meta["ownerReferences"][0]["controller"] is True
    assert meta["ownerReferences"][0]["blockOwnerDeletion"] is True
    assert meta["finalizers"] == [TRACKING_FINALIZER]


def test_new_job_creates_parallelism_pods_and_sets_start_time() -> None:
    plan = plan_job(a_job(parallelism=3, completions=5), [], now=NOW)
    assert plan.create == 3
    assert plan.status["startTime"] == format_time(NOW)


def test_finished_pods_go_through_uncounted_before_being_counted() -> None:
    job_obj = a_job(parallelism=1, completions=2)
    done = job_pod_in("Succeeded", "a")
    plan = plan_job(job_obj, [done], now=NOW)
    assert plan.status["uncountedTerminatedPods"] == {"succeeded": ["uid-a"]}
    assert "succeeded" not in plan.status
    assert [p["metadata"]["name"] for p in plan.remove_finalizers] == ["a"]
    job_obj["status"] = plan.status
    released = job_pod_in("Succeeded", "a", tracked=False)
    plan = plan_job(job_obj, [released], now=NOW)
    assert plan.status["succeeded"] == 1 and plan.status["uncountedTerminatedPods"] == {}


def test_terminating_pod_is_replaced_at_once_under_terminating_or_failed() -> None:
    job_obj = a_job(parallelism=1, completions=1)
    plan = plan_job(job_obj, [job_pod_in("Running", "a", deleting=True)], now=NOW)
    assert plan.create == 1
    assert plan.status["terminating"] == 1
    assert plan.status["uncountedTerminatedPods"] == {"failed": ["uid-a"]}


def test_terminating_pod_blocks_replacement_under_failed_policy() -> None:
    job_obj = a_job(parallelism=1, completions=1, podReplacementPolicy="Failed")
    plan = plan_job(job_obj, [job_pod_in("Running", "a", deleting=True)], now=NOW)
    assert plan.create == 0
    assert plan.status["terminating"] == 1
    assert plan.status["uncountedTerminatedPods"] == {}


def test_failed_policy_replaces_once_the_old_pod_is_failed() -> None:
    job_obj = a_job(parallelism=1, completions=1, podReplacementPolicy="Failed")
    plan = plan_job(job_obj, [job_pod_in("Failed", "a", deleting=True)], now=NOW)
    assert plan.create == 1


def test_backoff_limit_exceeded_fails_the_job_once_pods_are_gone() -> None:
    job_obj = a_job(parallelism=1, completions=1, backoffLimit=0)
    plan = plan_job(job_obj, [job_pod_in("Failed", "a")], now=NOW)
    assert plan.create == 0
    assert {c["type"] for c in plan.status["conditions"]} == {"FailureTarget"}
    job_obj["status"] = plan.status
    plan = plan_job(job_obj, [job_pod_in("Failed", "a", tracked=False)], now=NOW)
    assert {c["type"] for c in plan.status["conditions"]} == {"FailureTarget", "Failed"}
    assert plan.status["failed"] == 1
    assert (
        "Warning",
        "BackoffLimitExceeded",
        "Job has reached the specified backoff limit",
    ) in plan.events


def test_completion_waits_for_terminating_pods() -> None:
    job_obj = a_job(parallelism=2, completions=1)
    job_obj["status"] = {"succeeded": 1}
    plan = plan_job(job_obj, [job_pod_in("Running", "b", deleting=True, tracked=False)], now=NOW)
    types = {c["type"] for c in plan.status["conditions"]}
    assert types == {"SuccessCriteriaMet"}
    job_obj["status"] = plan.status
    job_obj["status"]["conditions"] = plan.status["conditions"]
    plan = plan_job(job_obj, [], now=NOW + 1)
    assert {c["type"] for c in plan.status["conditions"]} == {"SuccessCriteriaMet", "Complete"}
    assert plan.status["completionTime"] == format_time(NOW + 1)


def test_job_being_deleted_creates_no_pods() -> None:
    job_obj = a_job(parallelism=2, completions=2)
    job_obj["metadata"]["deletionTimestamp"] = format_time(NOW)
    assert plan_job(job_obj, [], now=NOW).create == 0


def test_suspended_job_deletes_active_pods_and_creates_none() -> None:
    plan = plan_job(a_job(parallelism=1, suspend=True), [job_pod_in("Running", "a")], now=NOW)
    assert plan.create == 0 and [p["metadata"]["name"] for p in plan.delete] == ["a"]
