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
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.replicaset import REPLICASETS, controller_uid
from kubesim.controllers.writes import update_object, update_status

__all__ = ["DeploymentController"]

COMPONENT = "deployment-controller"


class DeploymentController(Reconciler):
    """Syncs every Deployment on each change of a Deployment or of a ReplicaSet it owns."""

    name = COMPONENT

    def __init__(
        self,
        client: KubeClient,
        *,
        deployments: Informer,
        replicasets: Informer,
        recorder: EventRecorder,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__(period=None, clock=clock)
        self.client = client
        self.deployments = deployments
        self.replicasets = replicasets
        self.recorder = recorder
        replicasets.add_indexer("controller-uid", controller_uid)
        deployments.add_handler(self.trigger)
        replicasets.add_handler(self._on_replicaset)

    def _on_replicaset(self, kind: str, rs: Obj) -> None:
        ref = controller_ref(rs)
        if ref is not None and ref.get("kind") == "Deployment":
            self.trigger()

    async def reconcile(self) -> float | None:
        if not (self.deployments.synced.is_set() and self.replicasets.synced.is_set()):
            return None
        now = self.clock()
        for deploy in self.deployments.items():
            try:
                await self._sync(deploy, now)
            except ApiError as exc:
                if exc.conflict:
                    self.trigger()
                    continue
                raise
        return None

    async def _sync(self, deploy: Obj, now: float) -> None:
        uid = str(deploy["metadata"].get("uid"))
        owned = self.replicasets.by_index("controller-uid", uid)
        plan = plan_deployment(deploy, owned, now=now)
        subject = {"kind": "Deployment", "apiVersion": "apps/v1", **deploy}
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
            self.recorder.record(
                subject, reason="ScalingReplicaSet", message=message, component=COMPONENT
            )
        if plan.status_changed:
            new_status = plan.status

            def set_status(current: Obj) -> bool:
                current["status"] = new_status
                return True

            await update_status(
                self.client, DEPLOYMENTS, deploy, set_status, informer=self.deployments, attempts=1
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
