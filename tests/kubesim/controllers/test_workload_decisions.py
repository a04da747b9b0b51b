"""Workload controller decisions as pure functions (no server): ReplicaSet, Deployment,
StatefulSet, PyTorchJob. The rules are the ones in reference cluster-faults-and-workloads.md §3
(StatefulSet, "ReplicaSet contrast") and §4 (PyTorchJob), each test naming one."""

from __future__ import annotations

import copy
from typing import Any

from kubesim.controllers.deployment import HASH_LABEL, plan_deployment
from kubesim.controllers.podtemplates import hash_template, selector_matches
from kubesim.controllers.pytorchjob import job_pod, job_service, plan_pytorchjob
from kubesim.controllers.replicaset import plan_replicaset, rs_pod
from kubesim.controllers.statefulset import plan_statefulset, statefulset_pod, update_revision

NOW = 1_700_000_000.0
UID = "11111111-1111-1111-1111-111111111111"
TEMPLATE = {
    "metadata": {"labels": {"app": "a"}},
    "spec": {"containers": [{"name": "pytorch", "image": "busybox"}]},
}


def owner(kind: str, name: str = "w", **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": UID, "generation": 1},
        "spec": {
            "template": copy.deepcopy(TEMPLATE),
            "selector": {"matchLabels": {"app": "a"}},
            **spec,
        },
        "status": {},
    }


def pod(
    name: str,
    *,
    phase: str = "Running",
    ready: bool = True,
    terminating: bool = False,
    labels: dict[str, str] | None = None,
    created: str = "2024-01-01T00:00:00Z",
    exit_code: int | None = None,
    node: str | None = "node-1",
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "creationTimestamp": created,
        "labels": labels or {"app": "a"},
    }
    if terminating:
        meta["deletionTimestamp"] = "2024-01-01T00:10:00Z"
    status: dict[str, Any] = {
        "phase": phase,
        "conditions": [
            {"type": "Ready", "status": "True" if ready else "False", "lastTransitionTime": created}
        ],
    }
    if exit_code is not None:
        status["containerStatuses"] = [
            {"name": "pytorch", "state": {"terminated": {"exitCode": exit_code}}}
        ]
    return {"metadata": meta, "spec": {"nodeName": node} if node else {}, "status": status}


# ---- ReplicaSet --------------------------------------------------------------------------------


def test_replicaset_replaces_a_terminating_pod_at_once() -> None:
    rs = owner("ReplicaSet", replicas=2)
    plan = plan_replicaset(rs, [pod("w-aaaaa"), pod("w-bbbbb", terminating=True)], now=NOW)
    assert plan.create == 1 and plan.delete == []
    assert plan.status["replicas"] == 1  # Terminating pods are not active


def test_replicaset_pods_get_generated_names_and_a_controller_reference() -> None:
    created = rs_pod(owner("ReplicaSet"))
    assert created["metadata"]["generateName"] == "w-"
    assert created["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "w",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert created["metadata"]["labels"] == {"app": "a"}


def test_replicaset_scales_down_unscheduled_and_not_ready_pods_first() -> None:
    rs = owner("ReplicaSet", replicas=1)
    pods = [
        pod("w-ready"),
        pod("w-notready", ready=False),
        pod("w-pending", phase="Pending", node=None),
    ]
    plan = plan_replicaset(rs, pods, now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["w-pending", "w-notready"]


def test_replicaset_being_deleted_creates_nothing() -> None:
    rs = owner("ReplicaSet", replicas=3)
    rs["metadata"]["deletionTimestamp"] = "2024-01-01T00:00:00Z"
    assert plan_replicaset(rs, [], now=NOW).create == 0


# ---- Deployment --------------------------------------------------------------------------------


def replicaset_of(
    deploy: dict[str, Any], *, replicas: int, available: int, revision: str = "1"
) -> dict[str, Any]:
    plan = plan_deployment(deploy, [], now=NOW)
    assert plan.create is not None
    rs = copy.deepcopy(plan.create)
    rs["metadata"]["uid"] = f"uid-{rs['metadata']['name']}"
    rs["metadata"]["creationTimestamp"] = "2024-01-01T00:00:00Z"
    rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = revision
    rs["spec"]["replicas"] = replicas
    rs["status"] = {
        "replicas": replicas,
        "readyReplicas": available,
        "availableReplicas": available,
    }
    return rs


def test_deployment_creates_a_replicaset_named_by_the_template_hash() -> None:
    deploy = owner("Deployment", replicas=3)
    plan = plan_deployment(deploy, [], now=NOW)
    assert plan.create is not None
    pod_hash = hash_template(deploy["spec"]["template"])
    rs = plan.create
    assert rs["metadata"]["name"] == f"w-{pod_hash}"
    assert rs["spec"]["replicas"] == 3
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "a", HASH_LABEL: pod_hash}
    assert rs["spec"]["template"]["metadata"]["labels"][HASH_LABEL] == pod_hash
    assert rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    assert rs["metadata"]["ownerReferences"][0]["kind"] == "Deployment"
    progressing = [c for c in plan.status["conditions"] if c["type"] == "Progressing"]
    assert progressing[0]["reason"] == "NewReplicaSetCreated"


def test_deployment_scaling_event_resizes_its_replicaset() -> None:
    deploy = owner("Deployment", replicas=5)
    rs = replicaset_of(owner("Deployment", replicas=3), replicas=3, available=3)
    plan = plan_deployment(deploy, [rs], now=NOW)
    assert plan.create is None
    assert [(r["metadata"]["name"], n) for r, n in plan.scale] == [(rs["metadata"]["name"], 5)]


def test_deployment_template_change_surges_a_new_replicaset() -> None:
    old_deploy = owner("Deployment", replicas=4)
    old = replicaset_of(old_deploy, replicas=4, available=4)
    deploy = owner("Deployment", replicas=4)
    deploy["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    plan = plan_deployment(deploy, [old], now=NOW)
    assert plan.create is not None
    assert plan.create["spec"]["replicas"] == 1  # maxSurge 25 % of 4, rounded up
    assert plan.create["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"


def test_rolling_update_scales_old_down_only_within_max_unavailable() -> None:
    old = replicaset_of(owner("Deployment", replicas=4), replicas=4, available=4)
    deploy = owner("Deployment", replicas=4)
    deploy["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    new = replicaset_of(deploy, replicas=1, available=0, revision="2")
    plan = plan_deployment(deploy, [old, new], now=NOW)
    # 5 pods, minAvailable 3 (maxUnavailable 1), new one unavailable: one old may go.
    assert [(r["metadata"]["name"], n) for r, n in plan.scale] == [(old["metadata"]["name"], 3)]


def test_recreate_waits_for_old_pods_before_starting_new_ones() -> None:
    old = replicaset_of(owner("Deployment", replicas=2), replicas=2, available=2)
    deploy = owner("Deployment", replicas=2, strategy={"type": "Recreate"})
    deploy["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox:2"
    plan = plan_deployment(deploy, [old], now=NOW)
    assert plan.create is not None and plan.create["spec"]["replicas"] == 0
    assert [(r["metadata"]["name"], n) for r, n in plan.scale] == [(old["metadata"]["name"], 0)]


def test_deployment_status_counts_and_availability() -> None:
    deploy = owner("Deployment", replicas=3)
    rs = replicaset_of(deploy, replicas=3, available=2)
    rs["status"]["readyReplicas"] = 2
    status = plan_deployment(deploy, [rs], now=NOW).status
    assert status["replicas"] == 3 and status["updatedReplicas"] == 3
    assert status["readyReplicas"] == 2 and status["availableReplicas"] == 2
    assert status["unavailableReplicas"] == 1
    # maxUnavailable 25 % of 3 rounds down to 0: all 3 must be available.
    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert (available["status"], available["reason"]) == ("False", "MinimumReplicasUnavailable")
    deploy["spec"]["strategy"] = {"rollingUpdate": {"maxUnavailable": 1}}
    status = plan_deployment(deploy, [rs], now=NOW).status
    available = next(c for c in status["conditions"] if c["type"] == "Available")
    assert (available["status"], available["reason"]) == ("True", "MinimumReplicasAvailable")


def test_old_replicasets_beyond_the_history_limit_are_deleted() -> None:
    deploy = owner("Deployment", replicas=1, revisionHistoryLimit=0)
    current = replicaset_of(deploy, replicas=1, available=1, revision="2")
    idle_deploy = owner("Deployment")
    idle_deploy["spec"]["template"]["spec"]["containers"][0]["image"] = "old"
    idle = replicaset_of(idle_deploy, replicas=0, available=0)
    plan = plan_deployment(deploy, [current, idle], now=NOW)
    assert [r["metadata"]["name"] for r in plan.delete] == [idle["metadata"]["name"]]


# ---- StatefulSet -------------------------------------------------------------------------------


def sts_pod(sts: dict[str, Any], ordinal: int, **kw: Any) -> dict[str, Any]:
    p = pod(f"w-{ordinal}", **kw)
    p["metadata"]["labels"]["controller-revision-hash"] = update_revision(sts)
    return p


def test_ordered_ready_creates_one_pod_at_a_time() -> None:
    sts = owner("StatefulSet", replicas=3)
    assert plan_statefulset(sts, [], now=NOW).create == [0]
    assert (
        plan_statefulset(sts, [sts_pod(sts, 0, phase="Pending", ready=False)], now=NOW).create == []
    )
    assert plan_statefulset(sts, [sts_pod(sts, 0)], now=NOW).create == [1]


def test_parallel_creates_every_missing_ordinal() -> None:
    sts = owner("StatefulSet", replicas=3, podManagementPolicy="Parallel")
    assert plan_statefulset(sts, [sts_pod(sts, 1, phase="Pending")], now=NOW).create == [0, 2]


def test_a_terminating_pod_keeps_its_slot_and_is_not_recreated() -> None:
    sts = owner("StatefulSet", replicas=2, podManagementPolicy="Parallel")
    plan = plan_statefulset(sts, [sts_pod(sts, 0), sts_pod(sts, 1, terminating=True)], now=NOW)
    assert plan.create == [] and plan.delete == []
    assert plan.status["replicas"] == 2  # still counted: it exists


def test_a_terminating_pod_blocks_higher_ordinals_under_ordered_ready() -> None:
    sts = owner("StatefulSet", replicas=3)
    plan = plan_statefulset(sts, [sts_pod(sts, 0, terminating=True)], now=NOW)
    assert plan.create == []


def test_failed_pods_are_deleted_and_recreated_only_once_gone() -> None:
    sts = owner("StatefulSet", replicas=1)
    failed = sts_pod(sts, 0, phase="Failed", ready=False)
    plan = plan_statefulset(sts, [failed], now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["w-0"] and plan.create == []
    assert plan_statefulset(sts, [], now=NOW).create == [0]


def test_scale_down_removes_the_highest_ordinal_first() -> None:
    sts = owner("StatefulSet", replicas=1)
    plan = plan_statefulset(sts, [sts_pod(sts, i) for i in range(3)], now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["w-2"]


def test_rolling_update_replaces_the_highest_outdated_ordinal() -> None:
    sts = owner("StatefulSet", replicas=2)
    pods = [sts_pod(sts, 0), sts_pod(sts, 1)]
    for p in pods:
        p["metadata"]["labels"]["controller-revision-hash"] = "w-old"
    plan = plan_statefulset(sts, pods, now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete] == ["w-1"]


def test_statefulset_pods_carry_identity_labels() -> None:
    sts = owner("StatefulSet", replicas=1, serviceName="svc")
    created = statefulset_pod(sts, 4)
    labels = created["metadata"]["labels"]
    assert created["metadata"]["name"] == "w-4"
    assert labels["statefulset.kubernetes.io/pod-name"] == "w-4"
    assert labels["apps.kubernetes.io/pod-index"] == "4"
    assert labels["controller-revision-hash"] == update_revision(sts)
    assert created["spec"]["hostname"] == "w-4" and created["spec"]["subdomain"] == "svc"


# ---- PyTorchJob --------------------------------------------------------------------------------


def pytorchjob(masters: int = 1, workers: int = 3, *, policy: str = "OnFailure") -> dict[str, Any]:
    specs: dict[str, Any] = {}
    if masters:
        specs["Master"] = {"replicas": masters, "restartPolicy": policy, "template": TEMPLATE}
    if workers:
        specs["Worker"] = {"replicas": workers, "restartPolicy": policy, "template": TEMPLATE}
    return {
        "metadata": {"name": "pj", "namespace": "ns", "uid": UID},
        "spec": {"pytorchReplicaSpecs": specs},
    }


def pj_pod(rtype: str, index: int, **kw: Any) -> dict[str, Any]:
    labels = {
        "training.kubeflow.org/job-name": "pj",
        "training.kubeflow.org/replica-type": rtype,
        "training.kubeflow.org/replica-index": str(index),
    }
    return pod(f"pj-{rtype}-{index}", labels=labels, **kw)


def test_pytorchjob_creates_master_and_workers_with_operator_names() -> None:
    plan = plan_pytorchjob(pytorchjob(), [], [], now=NOW)
    assert plan.create_pods == [("Master", 0), ("Worker", 0), ("Worker", 1), ("Worker", 2)]
    assert plan.create_services == [("Master", 0)]  # the Master only
    assert plan.status["conditions"][0]["type"] == "Created"


def test_pytorchjob_pods_carry_labels_env_and_restart_policy() -> None:
    job = pytorchjob(policy="ExitCode")
    worker = job_pod(job, "Worker", 1)
    assert worker["metadata"]["name"] == "pj-worker-1"
    labels = worker["metadata"]["labels"]
    assert labels["training.kubeflow.org/replica-type"] == "worker"
    assert labels["training.kubeflow.org/replica-index"] == "1"
    assert labels["training.kubeflow.org/job-name"] == "pj"
    assert "training.kubeflow.org/job-role" not in labels
    assert (
        job_pod(job, "Master", 0)["metadata"]["labels"]["training.kubeflow.org/job-role"]
        == "master"
    )
    env = {e["name"]: e["value"] for e in worker["spec"]["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "pj-master-0" and env["MASTER_PORT"] == "23456"
    assert env["WORLD_SIZE"] == "4" and env["RANK"] == "2"
    assert worker["spec"]["restartPolicy"] == "Never"  # ExitCode runs pods with Never
    service = job_service(job, "Master", 0)
    assert service["metadata"]["name"] == "pj-master-0" and service["spec"]["clusterIP"] == "None"


def test_a_terminating_worker_blocks_its_own_recreation() -> None:
    pods = [
        pj_pod("master", 0),
        pj_pod("worker", 0),
        pj_pod("worker", 1, terminating=True),
        pj_pod("worker", 2),
    ]
    plan = plan_pytorchjob(pytorchjob(), pods, [], now=NOW)
    assert plan.create_pods == [] and plan.delete_pods == []
    assert plan.status["replicaStatuses"]["Worker"]["failed"] == 1  # kubeflow/common#214
    assert plan.status["replicaStatuses"]["Worker"]["active"] == 2


def test_a_failed_worker_under_on_failure_is_deleted_and_the_job_restarts() -> None:
    pods = [pj_pod("master", 0), pj_pod("worker", 0, phase="Failed", ready=False)]
    plan = plan_pytorchjob(pytorchjob(workers=1), pods, [], now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete_pods] == ["pj-worker-0"]
    types = {c["type"]: c["status"] for c in plan.status["conditions"]}
    assert types.get("Restarting") == "True"


def test_a_permanent_exit_code_fails_the_job() -> None:
    pods = [pj_pod("master", 0, phase="Failed", ready=False, exit_code=1)]
    plan = plan_pytorchjob(pytorchjob(workers=0, policy="ExitCode"), pods, [], now=NOW)
    assert plan.delete_pods == []
    assert any(c["type"] == "Failed" and c["status"] == "True" for c in plan.status["conditions"])


def test_a_retryable_exit_code_restarts_the_replica() -> None:
    pods = [pj_pod("master", 0, phase="Failed", ready=False, exit_code=137)]
    plan = plan_pytorchjob(pytorchjob(workers=0, policy="ExitCode"), pods, [], now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete_pods] == ["pj-master-0"]


def test_the_job_succeeds_when_the_master_succeeds() -> None:
    pods = [pj_pod("master", 0, phase="Succeeded", ready=False), pj_pod("worker", 0)]
    plan = plan_pytorchjob(pytorchjob(workers=1), pods, [], now=NOW)
    conditions = {c["type"]: c["status"] for c in plan.status["conditions"]}
    assert conditions["Succeeded"] == "True"
    assert "completionTime" in plan.status


def test_without_a_master_the_job_succeeds_when_all_workers_do() -> None:
    job = pytorchjob(masters=0, workers=2)
    one = [pj_pod("worker", 0, phase="Succeeded", ready=False), pj_pod("worker", 1)]
    assert not any(
        c["type"] == "Succeeded"
        for c in plan_pytorchjob(job, one, [], now=NOW).status["conditions"]
    )
    both = [pj_pod("worker", i, phase="Succeeded", ready=False) for i in range(2)]
    conditions = {
        c["type"]: c["status"] for c in plan_pytorchjob(job, both, [], now=NOW).status["conditions"]
    }
    assert conditions["Succeeded"] == "True"


def test_an_index_beyond_replicas_is_deleted() -> None:
    pods = [pj_pod("master", 0), pj_pod("worker", 0), pj_pod("worker", 1)]
    plan = plan_pytorchjob(pytorchjob(workers=1), pods, [], now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete_pods] == ["pj-worker-1"]


def test_clean_pod_policy_all_deletes_pods_of_a_finished_job() -> None:
    job = pytorchjob(workers=0)
    job["spec"]["runPolicy"] = {"cleanPodPolicy": "All"}
    job["status"] = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "x"}]}
    plan = plan_pytorchjob(job, [pj_pod("master", 0, phase="Succeeded")], [], now=NOW)
    assert [p["metadata"]["name"] for p in plan.delete_pods] == ["pj-master-0"]
    assert plan.create_pods == []


# ---- shared helpers ----------------------------------------------------------------------------


def test_label_selectors_match_labels_and_expressions() -> None:
    selector = {
        "matchLabels": {"app": "a"},
        "matchExpressions": [{"key": "tier", "operator": "In", "values": ["web", "db"]}],
    }
    assert selector_matches(selector, {"app": "a", "tier": "db"})
    assert not selector_matches(selector, {"app": "a"})
    assert not selector_matches({}, {"app": "a"})  # an empty selector selects nothing here


def test_template_hashes_change_with_the_template_and_the_collision_count() -> None:
    changed = copy.deepcopy(TEMPLATE)
    changed["spec"]["containers"][0]["image"] = "other"
    hashes = {
        hash_template(TEMPLATE),
        hash_template(changed),
        hash_template(TEMPLATE, collision_count=1),
    }
    assert len(hashes) == 3
    assert hash_template(TEMPLATE) == hash_template(copy.deepcopy(TEMPLATE))
    assert set(hash_template(TEMPLATE)) <= set("bcdfghjklmnpqrstvwxz2456789")
