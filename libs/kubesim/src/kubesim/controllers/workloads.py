"""The workload controllers of the fake cluster, built and wired in one place.

ReplicaSet, Deployment, StatefulSet and the PyTorchJob stand-in for the Kubeflow training
operator share the cluster's pod/Service/apps informers (the garbage collector watches the same
ones), so `Cluster` only has to start what `workload_controllers` returns.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kubesim.client import Informer, KubeClient, Resource
from kubesim.controllers.deployment_controller import DeploymentController
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.pytorchjob_controller import PyTorchJobController
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.replicaset import ReplicaSetController
from kubesim.controllers.statefulset import StatefulSetController

__all__ = ["WorkloadControllers", "workload_controllers"]


@dataclass(frozen=True, slots=True)
class WorkloadControllers:
    replicasets: ReplicaSetController
    deployments: DeploymentController
    statefulsets: StatefulSetController
    pytorchjobs: PyTorchJobController

    def all(self) -> tuple[Reconciler, ...]:
        return (self.replicasets, self.deployments, self.statefulsets, self.pytorchjobs)

    async def stop(self) -> None:
        await self.pytorchjobs.stop()


def _informer(informers: Mapping[Resource, Informer], group: str, plural: str) -> Informer:
    for resource, informer in informers.items():
        if resource.group == group and resource.plural == plural:
            return informer
    raise KeyError(f"no informer for {plural}.{group or 'core'}")


def workload_controllers(
    client: KubeClient,
    *,
    informers: Mapping[Resource, Informer],
    crds: Informer,
    recorder: EventRecorder,
) -> WorkloadControllers:
    """Controllers over the cluster's shared informers (pods, services, apps kinds)."""
    pods = _informer(informers, "", "pods")
    replicasets = _informer(informers, "apps", "replicasets")
    return WorkloadControllers(
        replicasets=ReplicaSetController(
            client, replicasets=replicasets, pods=pods, recorder=recorder
        ),
        deployments=DeploymentController(
            client,
            deployments=_informer(informers, "apps", "deployments"),
            replicasets=replicasets,
            recorder=recorder,
        ),
        statefulsets=StatefulSetController(
            client,
            statefulsets=_informer(informers, "apps", "statefulsets"),
            pods=pods,
            recorder=recorder,
        ),
        pytorchjobs=PyTorchJobController(
            client,
            crds=crds,
            pods=pods,
            services=_informer(informers, "", "services"),
            recorder=recorder,
        ),
    )
