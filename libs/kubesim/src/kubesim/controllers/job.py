"""Job controller (batch/v1): parallelism/completions, podReplacementPolicy, tracking finalizer.

Mirrors `job-controller` (pkg/controller/job) for NonIndexed jobs:

* creates pods `<job>-<5 random chars>` (generateName) from the template, with the template
  labels plus `batch.kubernetes.io/controller-uid`, `batch.kubernetes.io/job-name` (and the
  legacy `controller-uid`/`job-name`), a controller ownerReference (blockOwnerDeletion) and the
  `batch.kubernetes.io/job-tracking` finalizer;
* counts finished pods through `status.uncountedTerminatedPods`: a terminal pod is first
  recorded there, then its tracking finalizer is removed, then it moves into
  `succeeded`/`failed` — so a pod is never counted twice and never vanishes uncounted;
* `podReplacementPolicy`: `TerminatingOrFailed` (default without podFailurePolicy) counts a
  Terminating pod as failed and replaces it at once; `Failed` waits until the old pod is
  terminal (or gone) and counts it into `status.terminating` meanwhile (KEP-3939);
* `backoffLimit` (default 6) → `FailureTarget` then `Failed`/BackoffLimitExceeded,
  `activeDeadlineSeconds` → DeadlineExceeded, completions reached → `SuccessCriteriaMet` then
  `Complete` + `completionTime`; since 1.31 the final conditions wait until no pod is
  terminating;
* a Job being deleted gets no new pods; pods whose Job is gone lose the tracking finalizer.

Out of scope: Indexed completion mode, podFailurePolicy rules, successPolicy, pod-failure
backoff delays (replacements are immediate), `ttlSecondsAfterFinished`. Pure logic: `plan_job`.
"""

from __future__ import annotations

import copy
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kubesim.client import JOBS, PODS, ApiError, Informer, KubeClient
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import (
    Obj,
    condition,
    controller_ref,
    format_time,
    is_terminal,
    parse_time,
)
from kubesim.controllers.owner import OwnerController
from kubesim.controllers.podtemplates import controller_reference, pod_from_template
from kubesim.controllers.writes import remove_finalizer, replace_status

__all__ = ["TRACKING_FINALIZER", "JobController", "JobPlan", "job_pod", "plan_job"]

log = logging.getLogger(__name__)
TRACKING_FINALIZER = "batch.kubernetes.io/job-tracking"
COMPONENT = "job-controller"
JOB_UID_INDEX = "job-uid"


@dataclass(slots=True)
class JobPlan:
    status: Obj
    status_changed: bool
    create: int = 0
    delete: list[Obj] = field(default_factory=list)
    remove_finalizers: list[Obj] = field(default_factory=list)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)


def replacement_policy(job: Mapping[str, Any]) -> str:
    spec = job.get("spec") or {}
    default = "Failed" if spec.get("podFailurePolicy") else "TerminatingOrFailed"
    return str(spec.get("podReplacementPolicy") or default)


def _is_failed(pod: Mapping[str, Any], *, only_failed: bool) -> bool:
    """`isPodFailed`: Failed phase, or Terminating-not-Succeeded unless policy is `Failed`."""
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Failed":
        return True
    if only_failed:
        return False
    return bool((pod.get("metadata") or {}).get("deletionTimestamp")) and phase != "Succeeded"


def _is_finished(job: Mapping[str, Any]) -> bool:
    for kind in ("Complete", "Failed"):
        cond = condition(job, kind)
        if cond is not None and cond.get("status") == "True":
            return True
    return False


def _add_condition(status: Obj, kind: str, reason: str, message: str, now: float) -> bool:
    conditions: list[Obj] = status.setdefault("conditions", [])
    for cond in conditions:
        if cond.get("type") == kind:
            if cond.get("status") == "True":
                return False
            cond.update(status="True", reason=reason, message=message)
            cond["lastProbeTime"] = cond["lastTransitionTime"] = format_time(now)
            return True
    stamp = format_time(now)
    conditions.append(
        {
            "type": kind,
            "status": "True",
            "lastProbeTime": stamp,
            "lastTransitionTime": stamp,
            "reason": reason,
            "message": message,
        }
    )
    return True


def _removal_rank(pod: Mapping[str, Any]) -> tuple[int, int, int, float]:
    """Delete unscheduled, then pending, then not-ready, then newest pods first."""
    spec, status = pod.get("spec") or {}, pod.get("status") or {}
    ready = (condition(pod, "Ready") or {}).get("status") == "True"
    created = parse_time((pod.get("metadata") or {}).get("creationTimestamp")) or 0.0
    return (
        1 if spec.get("nodeName") else 0,
        0 if status.get("phase") in (None, "Pending") else 1,
        1 if ready else 0,
        -created,
    )


def plan_job(job: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], *, now: float) -> JobPlan:
    """Everything the controller should do for one Job given its pods, as data."""
    spec = job.get("spec") or {}
    meta = job.get("metadata") or {}
    old_status: Obj = copy.deepcopy(dict(job.get("status") or {}))
    status: Obj = copy.deepcopy(old_status)
    only_failed = replacement_policy(job) == "Failed"
    parallelism = int(spec.get("parallelism", 1) if spec.get("parallelism") is not None else 1)
    completions = spec.get("completions")
    backoff_limit = int(spec.get("backoffLimit", 6) if spec.get("backoffLimit") is not None else 6)
    suspended = bool(spec.get("suspend"))
    deleting = bool(meta.get("deletionTimestamp"))
    finished = _is_finished(job)
    plan = JobPlan(status=status, status_changed=False)

    uncounted = status.get("uncountedTerminatedPods") or {}
    unc_succeeded: list[str] = list(uncounted.get("succeeded") or [])
    unc_failed: list[str] = list(uncounted.get("failed") or [])
    succeeded = int(status.get("succeeded") or 0)
    failed = int(status.get("failed") or 0)
    by_uid = {str(p["metadata"].get("uid")): p for p in pods}

    def tracked(pod: Mapping[str, Any]) -> bool:
        return TRACKING_FINALIZER in ((pod.get("metadata") or {}).get("finalizers") or [])

    # 1. Uncounted pods whose finalizer is gone (or that are gone) are now counted for good.
    for uid in list(unc_succeeded):
        pod = by_uid.get(uid)
        if pod is None or not tracked(pod):
            unc_succeeded.remove(uid)
            succeeded += 1
    for uid in list(unc_failed):
        pod = by_uid.get(uid)
        if pod is None or not tracked(pod):
            unc_failed.remove(uid)
            failed += 1

    # 2. Classify the pods.
    active: list[Mapping[str, Any]] = []
    terminating = 0
    for pod in pods:
        pmeta = pod.get("metadata") or {}
        uid = str(pmeta.get("uid"))
        phase = (pod.get("status") or {}).get("phase")
        if pmeta.get("deletionTimestamp") and not is_terminal(pod):
            terminating += 1
        if tracked(pod) and uid not in unc_succeeded and uid not in unc_failed:
            if phase == "Succeeded":
                unc_succeeded.append(uid)
                continue
            if _is_failed(pod, only_failed=only_failed):
                unc_failed.append(uid)
                continue
        if not is_terminal(pod) and not pmeta.get("deletionTimestamp"):
            active.append(pod)
    plan.remove_finalizers = [
        dict(by_uid[u]) for u in unc_succeeded + unc_failed if u in by_uid and tracked(by_uid[u])
    ]
    total_succeeded = succeeded + len(unc_succeeded)
    total_failed = failed + len(unc_failed)
    ready = sum(1 for p in active if (condition(p, "Ready") or {}).get("status") == "True")

    # 3. Success / failure criteria (interim conditions first, final ones once pods are gone).
    if not finished and not suspended and not status.get("startTime"):
        status["startTime"] = format_time(now)
    failure = condition(job, "FailureTarget")
    success = condition(job, "SuccessCriteriaMet")
    failing = failure is not None and failure.get("status") == "True"
    succeeding = success is not None and success.get("status") == "True"
    if not finished and not failing and not succeeding:
        start = parse_time(status.get("startTime"))
        deadline = spec.get("activeDeadlineSeconds")
        if total_failed > backoff_limit:
            _add_condition(
                status,
                "FailureTarget",
                "BackoffLimitExceeded",
                "Job has reached the specified backoff limit",
                now,
            )
            failing = True
        elif deadline is not None and start is not None and now - start >= float(deadline):
            _add_condition(
                status,
                "FailureTarget",
                "DeadlineExceeded",
                "Job was active longer than specified deadline",
                now,
            )
            failing = True
        elif (completions is not None and total_succeeded >= int(completions)) or (
            completions is None and total_succeeded >= 1 and not active
        ):
            _add_condition(
                status,
                "SuccessCriteriaMet",
                "CompletionsReached",
                "Reached expected number of succeeded pods",
                now,
            )
            succeeding = True

    # 4. Pods to create or delete.
    if finished or failing or suspended:
        plan.delete = [dict(p) for p in active]
    elif not deleting:
        if completions is None:
            want = len(active) if total_succeeded > 0 else parallelism
        else:
            want = max(0, min(int(completions) - total_succeeded, parallelism))
        busy = len(active) + (terminating if only_failed else 0)
        if len(active) > want:
            excess = sorted(active, key=_removal_rank)[: len(active) - want]
            plan.delete = [dict(p) for p in excess]
        elif busy < want:
            plan.create = want - busy
    if suspended:
        cond = condition(job, "Suspended")
        if cond is None or cond.get("status") != "True":
            _add_condition(status, "Suspended", "JobSuspended", "Job suspended", now)
            plan.events.append(("Normal", "Suspended", "Job suspended"))
    elif (condition(job, "Suspended") or {}).get("status") == "True":
        for cond in status.get("conditions") or []:
            if cond.get("type") == "Suspended":
                cond.update(status="False", reason="JobResumed", message="Job resumed")
                cond["lastTransitionTime"] = format_time(now)
        plan.events.append(("Normal", "Resumed", "Job resumed"))

    remaining = len(active) - len(plan.delete)
    all_done = remaining == 0 and terminating == 0 and not unc_succeeded and not unc_failed
    if not finished and failing and all_done:
        target = condition({"status": status}, "FailureTarget") or {}
        reason = str(target.get("reason") or "BackoffLimitExceeded")
        message = str(target.get("message") or "Job has reached the specified backoff limit")
        _add_condition(status, "Failed", reason, message, now)
        plan.events.append(("Warning", reason, message))
    elif not finished and succeeding and all_done:
        _add_condition(
            status,
            "Complete",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
            now,
        )
        status["completionTime"] = format_time(now)
        plan.events.append(("Normal", "Completed", "Job completed"))

    # 5. Counters.
    status["active"] = remaining + plan.create if not (finished or failing) else remaining
    status["ready"] = ready
    status["terminating"] = terminating
    status["succeeded"] = succeeded
    status["failed"] = failed
    status["uncountedTerminatedPods"] = {
        k: v for k, v in (("succeeded", unc_succeeded), ("failed", unc_failed)) if v
    }
    for key in ("active", "succeeded", "failed"):
        if status[key] == 0 and key not in old_status:
            del status[key]
    plan.status_changed = status != old_status
    return plan


def job_pod(job: Mapping[str, Any]) -> Obj:
    """The pod the controller creates for `job` (before the server fills in the name)."""
    meta = job.get("metadata") or {}
    template = (job.get("spec") or {}).get("template") or {}
    name, uid = str(meta.get("name")), str(meta.get("uid"))
    pod = pod_from_template(
        template,
        owner=job,
        owner_ref=controller_reference(job, api_version="batch/v1", kind="Job"),
        generate_name=f"{name}-",
        extra_labels={
            "batch.kubernetes.io/controller-uid": uid,
            "batch.kubernetes.io/job-name": name,
            "controller-uid": uid,
            "job-name": name,
        },
    )
    pod_meta = pod["metadata"]
    pod_meta["finalizers"] = [*(pod_meta.get("finalizers") or []), TRACKING_FINALIZER]
    return pod


def job_uid_of_pod(pod: Obj) -> list[str]:
    ref = controller_ref(pod)
    if ref is not None and ref.get("kind") == "Job":
        return [str(ref.get("uid"))]
    return []


class JobController(OwnerController):
    """Syncs every Job on each change of a Job or of a pod it controls."""

    name = COMPONENT
    kind = "Job"
    api_version = "batch/v1"

    def __init__(
        self,
        client: KubeClient,
        *,
        jobs: Informer,
        pods: Informer,
        recorder: EventRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            client,
            owners=jobs,
            owned=[pods],
            recorder=recorder,
            clock=clock,
            index=(JOB_UID_INDEX, job_uid_of_pod),
        )
        self.jobs = jobs
        self.pods = pods
        self._missing_jobs: set[str] = set()

    def _on_owned(self, kind: str, pod: Obj) -> None:
        finalizers = (pod.get("metadata") or {}).get("finalizers") or []
        if TRACKING_FINALIZER in finalizers:
            self.trigger()  # an orphan to release, whoever its owner is
        else:
            super()._on_owned(kind, pod)

    async def _after_pass(self, owners: list[Obj]) -> None:
        await self._release_orphans({str(job["metadata"].get("uid")) for job in owners})

    async def _sync(self, owners: Informer, job: Obj, now: float) -> float | None:
        uid = str(job["metadata"].get("uid"))
        pods = self.pods.by_index(JOB_UID_INDEX, uid)
        plan = plan_job(job, pods, now=now)
        if plan.status_changed:
            # One attempt only: on a conflict the whole plan is recomputed from fresh state.
            result = await replace_status(self.client, JOBS, job, plan.status, informer=self.jobs)
            if result is None:
                return None
        for pod in plan.remove_finalizers:
            await remove_finalizer(self.client, PODS, pod, TRACKING_FINALIZER, informer=self.pods)
        for pod in plan.delete:
            await self.delete_owned(job, pod, informer=self.pods)
        for _ in range(plan.create):
            created = await self.client.create(
                PODS.path(namespace=job["metadata"].get("namespace")), job_pod(job)
            )
            self.observe_created(job, created, informer=self.pods)
        for event_type, reason, message in plan.events:
            self.record(job, reason, message, event_type=event_type)
        deadline = (job.get("spec") or {}).get("activeDeadlineSeconds")
        start = parse_time((plan.status or {}).get("startTime"))
        if deadline is not None and start is not None and not _is_finished(job):
            return start + float(deadline)
        return None

    async def _release_orphans(self, job_uids: set[str]) -> None:
        """Remove the tracking finalizer from pods whose Job is gone (or who lost their owner)."""
        for pod in self.pods.items():
            finalizers = (pod.get("metadata") or {}).get("finalizers") or []
            if TRACKING_FINALIZER not in finalizers:
                continue
            owners = job_uid_of_pod(pod)
            if owners and owners[0] in job_uids:
                continue
            if owners and owners[0] not in self._missing_jobs:
                ref = controller_ref(pod) or {}
                try:
                    found = await self.client.get(
                        JOBS.path(
                            namespace=pod["metadata"].get("namespace"), name=str(ref.get("name"))
                        )
                    )
                except ApiError as exc:
                    if not exc.not_found:
                        raise
                    found = None
                if found is not None and str(found["metadata"].get("uid")) == owners[0]:
                    self.jobs.observe(found)
                    continue
                self._missing_jobs.add(owners[0])
            await remove_finalizer(self.client, PODS, pod, TRACKING_FINALIZER, informer=self.pods)
