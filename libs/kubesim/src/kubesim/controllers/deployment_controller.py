"""The Deployment controller loop: ReplicaSet creation, scaling and cleanup as planned by
`plan_deployment` (deployment.py), status through `/status`, `ScalingReplicaSet` events.

A pod-template-hash name already taken by a ReplicaSet this Deployment does not own is a hash
collision: `status.collisionCount` goes up and the next pass hashes again, as in Kubernetes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubesim.client import ApiError, Informer, KubeClient
from kubesim.controllers.deployment import DEPLOYMENTS, DESIRED, plan_deployment
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import Obj, controller_ref
from kubesim.controllers.owner import CONTROLLER_UID_INDEX, OwnerController
from kubesim.controllers.replicaset import REPLICASETS
from kubesim.controllers.writes import replace_status, update_object, update_status

__all__ = ["DeploymentController"]

COMPONENT = "deployment-controller"


class DeploymentController(OwnerController):
    """Syncs every Deployment on each change of a Deployment or of a ReplicaSet it owns."""

    name = COMPONENT
    kind = "Deployment"
    api_version = "apps/v1"

    def __init__(
        self,
        client: KubeClient,
        *,
        deployments: Informer,
        replicasets: Informer,
        recorder: EventRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(
            client, owners=deployments, owned=[replicasets], recorder=recorder, clock=clock
        )
        self.deployments = deployments
        self.replicasets = replicasets

    async def _sync(self, owners: Informer, deploy: Obj, now: float) -> None:
        uid = str(deploy["metadata"].get("uid"))
        owned = self.replicasets.by_index(CONTROLLER_UID_INDEX, uid)
        plan = plan_deployment(deploy, owned, now=now)
        subject = self.subject(deploy)
        namespace = deploy["metadata"].get("namespace")
        if plan.create is not None:
            try:
                created = await self.client.create(
                    REPLICASETS.path(namespace=namespace), plan.create
                )
            except ApiError as exc:
                if exc.status != 409:
                    raise
                await self._on_name_collision(deploy, plan.create)
                return
            self.replicasets.observe(created)
        for rs, target in plan.scale:
            raw = (deploy.get("spec") or {}).get("replicas")
            desired = "1" if raw is None else str(raw)

            def mutate(current: Obj, target: int = target, desired: str = desired) -> bool:
                current["spec"]["replicas"] = target
                current["metadata"].setdefault("annotations", {})[DESIRED] = desired
                return True

            await update_object(self.client, REPLICASETS, rs, mutate, informer=self.replicasets)
        for rs in plan.delete:
            try:
                await self.client.delete(
                    REPLICASETS.path_of(rs),
                    uid=str(rs["metadata"]["uid"]),
                    propagation_policy="Background",
                )
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
        for message in plan.events:
            self.record(subject, "ScalingReplicaSet", message)
        if plan.status_changed:
            await replace_status(
                self.client, DEPLOYMENTS, deploy, plan.status, informer=self.deployments
            )

    async def _on_name_collision(self, deploy: Obj, wanted: Obj) -> None:
        """A ReplicaSet with the hashed name exists: ours (cache lag) or a hash collision."""
        try:
            existing = await self.client.get(REPLICASETS.path_of(wanted))
        except ApiError as exc:
            if exc.not_found:
                self.trigger()
                return
            raise
        ref = controller_ref(existing) or {}
        if ref.get("uid") == deploy["metadata"].get("uid"):
            self.replicasets.observe(existing)
            self.trigger()
            return

        def bump(current: Obj) -> bool:
            status = current.setdefault("status", {})
            status["collisionCount"] = int(status.get("collisionCount") or 0) + 1
            return True

        await update_status(self.client, DEPLOYMENTS, deploy, bump, informer=self.deployments)
