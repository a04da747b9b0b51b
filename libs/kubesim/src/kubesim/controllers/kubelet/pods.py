"""The kubelet's pod loop: each reconcile applies `decide_pod_step` to the pods bound to
the node and carries the step out (start, run, complete, stop a deleted pod and remove
it with the final grace-0 DELETE), and :class:`Kubelet`, the whole kubelet.
"""

from __future__ import annotations

import logging

from kubesim.client import PODS, ApiError
from kubesim.controllers.kubelet.model import (
    EXIT_CODE_ANNOTATION,
    PodRecord,
    PodStep,
    _merge_conditions,
    decide_pod_step,
)
from kubesim.controllers.kubelet.pod_status import KubeletPodStatus
from kubesim.controllers.objects import (
    Obj,
    format_time,
)
from kubesim.controllers.writes import update_status

log = logging.getLogger(__package__)


class Kubelet(KubeletPodStatus):
    """One node's kubelet. `lose()` freezes it; `recover()` brings it back."""

    async def reconcile(self) -> float | None:
        if self.lost or not self.pods.synced.is_set():
            return None
        now = self.clock()
        next_at: float | None = None
        for pod in self.pods.by_index("node", self.shape.name):
            uid = str(pod["metadata"].get("uid"))
            record = self._records.get(uid)
            if record is None:
                record = self._records[uid] = PodRecord(seen_at=now)
            if pod["metadata"].get("deletionTimestamp") and record.deletion_seen_at is None:
                record.deletion_seen_at = now
            step = decide_pod_step(pod, record, now=now, timings=self.timings)
            if step.action is not None:
                try:
                    await self._act(step.action, pod, record)
                except ApiError as exc:
                    log.debug("%s %s %s: %s", self.name, step.action, uid, exc)
                    if exc.status >= 500 or exc.status == 429:
                        raise
                if step.action in ("initialize",):
                    step = PodStep(None, step.next_at)
            if step.next_at is not None:
                next_at = step.next_at if next_at is None else min(next_at, step.next_at)
        return next_at

    async def _act(self, action: str, pod: Obj, record: PodRecord) -> None:
        now = self.clock()
        if action == "initialize":
            await self._write_status(pod, self._pending_status(pod, now))
        elif action == "start":
            record.started_at = now
            result = await self._write_status(pod, self._running_status(pod, now))
            if result is not None:
                for c in (pod.get("spec") or {}).get("containers") or []:
                    path = f"spec.containers{{{c.get('name')}}}"
                    image = c.get("image", "")
                    for reason, message in (
                        ("Pulled", f'Container image "{image}" already present on machine'),
                        ("Created", f"Created container {c.get('name')}"),
                        ("Started", f"Started container {c.get('name')}"),
                    ):
                        self._record(pod, reason, message, field_path=path)
        elif action == "complete":
            await self._complete(pod, record, now)
        elif action == "stop":
            if not record.killing_reported:
                record.killing_reported = True
                for c in (pod.get("spec") or {}).get("containers") or []:
                    self._record(
                        pod,
                        "Killing",
                        f"Stopping container {c.get('name')}",
                        field_path=f"spec.containers{{{c.get('name')}}}",
                    )
            result = await self._write_status(pod, self._killed_status(pod, now))
            if result is not None:
                await self._final_delete(result)
        elif action == "delete":
            await self._final_delete(pod)

    async def _final_delete(self, pod: Obj) -> None:
        try:
            await self.client.delete(
                PODS.path_of(pod), grace_period_seconds=0, uid=str(pod["metadata"].get("uid"))
            )
        except ApiError as exc:
            if exc.status not in (404, 409):
                raise

    async def _write_status(self, pod: Obj, new_status: Obj) -> Obj | None:
        def mutate(current: Obj) -> bool:
            if current["metadata"].get("uid") != pod["metadata"].get("uid"):
                return False
            merged = {**(current.get("status") or {}), **new_status}
            merged["conditions"] = _merge_conditions(
                (current.get("status") or {}).get("conditions") or [],
                new_status.get("conditions") or [],
            )
            if merged == current.get("status"):
                return False
            current["status"] = merged
            return True

        return await update_status(self.client, PODS, pod, mutate, informer=self.pods)

    async def _complete(self, pod: Obj, record: PodRecord, now: float) -> None:
        annotations = (pod.get("metadata") or {}).get("annotations") or {}
        try:
            exit_code = int(annotations.get(EXIT_CODE_ANNOTATION, 0))
        except (TypeError, ValueError):
            exit_code = 1
        if exit_code != 0 and (pod.get("spec") or {}).get("restartPolicy") == "OnFailure":
            # The container is restarted in place: restartCount goes up, the pod stays Running.
            record.started_at = now
            status = self._running_status(pod, now)
            previous = {
                cs.get("name"): cs
                for cs in (pod.get("status") or {}).get("containerStatuses") or []
            }
            stamp = format_time(now)
            for cs in status["containerStatuses"]:
                old = previous.get(cs["name"]) or {}
                cs["restartCount"] = int(old.get("restartCount") or 0) + 1
                cs["lastState"] = {
                    "terminated": {
                        "exitCode": exit_code,
                        "reason": "Error",
                        "startedAt": ((old.get("state") or {}).get("running") or {}).get(
                            "startedAt"
                        )
                        or stamp,
                        "finishedAt": stamp,
                        "containerID": cs.get("containerID", ""),
                    }
                }
            await self._write_status(pod, status)
            return
        reason = "Completed" if exit_code == 0 else "Error"
        await self._write_status(
            pod, self._terminated_status(pod, now, exit_code=exit_code, reason=reason)
        )
        if exit_code != 0:
            message = f"Error: container exited with code {exit_code}"
            self._record(pod, "Failed", message, event_type="Warning")
