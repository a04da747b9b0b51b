"""The PyTorchJob controller loop: a stand-in for the Kubeflow training operator.

It starts watching `pytorchjobs.kubeflow.org` as soon as a CRD serving that kind is registered
(kubesim's bundled one, `kubesim serve --builtin-crd pytorchjob`, or the real Kubeflow CRD
passed with `--crd`), and then reconciles every PyTorchJob on each change of a job or of a pod
or Service it controls. Decisions are `plan_pytorchjob` (pytorchjob.py); this module only does
the writes: pods and Services created with the job as controller owner, deletions with UID
preconditions, status through `/status` with the resourceVersion, events like the operator's.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from kubesim.client import PODS, ApiError, Informer, KubeClient, Resource, cancel_tasks
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import Obj, controller_ref
from kubesim.controllers.pytorchjob import (
    API_VERSION,
    GROUP,
    KIND,
    job_pod,
    job_service,
    plan_pytorchjob,
)
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.replicaset import controller_uid
from kubesim.controllers.writes import update_status

__all__ = ["SERVICES", "PyTorchJobController"]

log = logging.getLogger(__name__)
SERVICES = Resource("", "v1", "services", True, "Service")
COMPONENT = "pytorchjob-controller"


def crd_resource(crd: Obj) -> Resource | None:
    """The storage-version Resource of a CRD serving kubeflow.org/PyTorchJob, or None."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    if spec.get("group") != GROUP or names.get("kind") != KIND:
        return None
    versions = [v for v in spec.get("versions") or [] if v.get("served", True)]
    chosen = next((v for v in versions if v.get("name") == "v1"), None)
    if chosen is None:
        chosen = next((v for v in versions if v.get("storage")), versions[0] if versions else None)
    if chosen is None:
        return None
    return Resource(GROUP, str(chosen.get("name")), str(names.get("plural")), True, KIND)


class PyTorchJobController(Reconciler):
    """Idle until a PyTorchJob CRD appears; then one pass per relevant change."""

    name = COMPONENT

    def __init__(
        self,
        client: KubeClient,
        *,
        crds: Informer,
        pods: Informer,
        services: Informer,
        recorder: EventRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(period=None, clock=clock)
        self.client = client
        self.pods = pods
        self.services = services
        self.recorder = recorder
        self.jobs: Informer | None = None
        self.resource: Resource | None = None
        self._tasks: list[asyncio.Task[None]] = []
        pods.add_indexer("controller-uid", controller_uid)
        services.add_indexer("controller-uid", controller_uid)
        pods.add_handler(self._on_owned)
        services.add_handler(self._on_owned)
        crds.add_handler(self._on_crd)

    def _on_crd(self, kind: str, crd: Obj) -> None:
        resource = crd_resource(crd)
        if resource is None:
            return
        if kind == "DELETED":
            if self.jobs is not None and self.resource == resource:
                for task in self._tasks:
                    task.cancel()
                self._tasks, self.jobs, self.resource = [], None, None
            return
        if self.jobs is not None:
            return
        self.resource = resource
        self.jobs = Informer(self.client, resource)
        self.jobs.add_handler(self.trigger)
        self._tasks.append(asyncio.get_running_loop().create_task(self.jobs.run()))

    def _on_owned(self, kind: str, obj: Obj) -> None:
        ref = controller_ref(obj)
        if ref is not None and ref.get("kind") == KIND:
            self.trigger()

    async def stop(self) -> None:
        await cancel_tasks(list(self._tasks))

    async def reconcile(self) -> float | None:
        jobs, resource = self.jobs, self.resource
        if jobs is None or resource is None or not jobs.synced.is_set():
            return None
        if not (self.pods.synced.is_set() and self.services.synced.is_set()):
            return None
        now = self.clock()
        for job in jobs.items():
            try:
                await self._sync(jobs, resource, job, now)
            except ApiError as exc:
                if exc.conflict:
                    self.trigger()
                    continue
                raise
        return None

    async def _sync(self, jobs: Informer, resource: Resource, job: Obj, now: float) -> None:
        uid = str(job["metadata"].get("uid"))
        pods = self.pods.by_index("controller-uid", uid)
        services = self.services.by_index("controller-uid", uid)
        plan = plan_pytorchjob(job, pods, services, now=now)
        subject: dict[str, Any] = {**job, "kind": KIND, "apiVersion": API_VERSION}
        namespace = job["metadata"].get("namespace")
        for pod in plan.delete_pods:
            await self._delete(PODS, pod, self.pods, subject, "SuccessfulDeletePod", "pod")
        for service in plan.delete_services:
            await self._delete(
                SERVICES, service, self.services, subject, "SuccessfulDeleteService", "service"
            )
        for rtype, index in plan.create_pods:
            body = job_pod(job, rtype, index)
            try:
                created = await self.client.create(PODS.path(namespace=namespace), body)
            except ApiError as exc:
                if exc.status != 409:
                    raise
                # The name belongs to a pod this job does not own (a Terminating pod of a
                # deleted same-name job): retried when that pod goes away.
                self.recorder.record(
                    subject,
                    reason="FailedCreatePod",
                    message=f"Error creating: {exc.message}",
                    component=COMPONENT,
                    event_type="Warning",
                )
                continue
            self.pods.observe(created)
            self.recorder.record(
                subject,
                reason="SuccessfulCreatePod",
                message=f"Created pod: {created['metadata']['name']}",
                component=COMPONENT,
            )
        for rtype, index in plan.create_services:
            try:
                created = await self.client.create(
                    SERVICES.path(namespace=namespace), job_service(job, rtype, index)
                )
            except ApiError as exc:
                if exc.status != 409:
                    raise
                continue
            self.services.observe(created)
            self.recorder.record(
                subject,
                reason="SuccessfulCreateService",
                message=f"Created service: {created['metadata']['name']}",
                component=COMPONENT,
            )
        for event_type, reason, message in plan.events:
            self.recorder.record(
                subject, reason=reason, message=message, component=COMPONENT, event_type=event_type
            )
        if plan.status_changed:
            new_status = plan.status

            def mutate(current: Obj) -> bool:
                current["status"] = new_status
                return True

            await update_status(self.client, resource, job, mutate, informer=jobs, attempts=1)

    async def _delete(
        self,
        resource: Resource,
        obj: Obj,
        informer: Informer,
        subject: Obj,
        reason: str,
        what: str,
    ) -> None:
        try:
            deleted = await self.client.delete(
                resource.path_of(obj), uid=str(obj["metadata"]["uid"])
            )
        except ApiError as exc:
            if exc.status in (404, 409):
                return
            raise
        if deleted.get("kind") == resource.kind:
            informer.observe(deleted)
        self.recorder.record(
            subject,
            reason=reason,
            message=f"Deleted {what}: {obj['metadata']['name']}",
            component=COMPONENT,
        )
