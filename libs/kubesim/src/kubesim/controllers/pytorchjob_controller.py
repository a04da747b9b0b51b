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

from kubesim.client import PODS, ApiError, Informer, KubeClient, Resource, cancel_tasks
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import Obj
from kubesim.controllers.owner import CONTROLLER_UID_INDEX, OwnerController
from kubesim.controllers.pytorchjob import (
    API_VERSION,
    GROUP,
    KIND,
    job_pod,
    job_service,
    plan_pytorchjob,
)
from kubesim.controllers.writes import replace_status

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


class PyTorchJobController(OwnerController):
    """Idle until a PyTorchJob CRD appears; then one pass per relevant change."""

    name = COMPONENT
    kind = KIND
    api_version = API_VERSION

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
        super().__init__(
            client, owners=None, owned=[pods, services], recorder=recorder, clock=clock
        )
        self.pods = pods
        self.services = services
        self.jobs: Informer | None = None
        self.resource: Resource | None = None
        self._tasks: list[asyncio.Task[None]] = []
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

    async def stop(self) -> None:
        await cancel_tasks(list(self._tasks))

    def _owners(self) -> Informer | None:
        return self.jobs if self.resource is not None else None

    async def _sync(self, owners: Informer, job: Obj, now: float) -> None:
        uid = str(job["metadata"].get("uid"))
        pods = self.pods.by_index(CONTROLLER_UID_INDEX, uid)
        services = self.services.by_index(CONTROLLER_UID_INDEX, uid)
        plan = plan_pytorchjob(job, pods, services, now=now)
        subject = self.subject(job)
        namespace = job["metadata"].get("namespace")
        for pod in plan.delete_pods:
            await self.delete_owned(subject, pod, informer=self.pods, reason="SuccessfulDeletePod")
        for service in plan.delete_services:
            await self.delete_owned(
                subject,
                service,
                informer=self.services,
                reason="SuccessfulDeleteService",
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
                self.record(
                    subject,
                    "FailedCreatePod",
                    f"Error creating: {exc.message}",
                    event_type="Warning",
                )
                continue
            self.observe_created(subject, created, informer=self.pods, reason="SuccessfulCreatePod")
        for rtype, index in plan.create_services:
            try:
                created = await self.client.create(
                    SERVICES.path(namespace=namespace), job_service(job, rtype, index)
                )
            except ApiError as exc:
                if exc.status != 409:
                    raise
                continue
            self.observe_created(
                subject,
                created,
                informer=self.services,
                reason="SuccessfulCreateService",
            )
        for event_type, reason, message in plan.events:
            self.record(subject, reason, message, event_type=event_type)
        if plan.status_changed:
            await replace_status(self.client, owners.resource, job, plan.status, informer=owners)
