"""The loop of the controllers that own other objects: ReplicaSet, StatefulSet, Job, Deployment
and PyTorchJob.

Each owns objects (pods, ReplicaSets, Services) that carry a controller ownerReference to one
of its own kind. A pass runs on any change of an owner, or of an owned object whose controller
reference names that kind. Once every informer has synced, the pass hands each owner to the
controller's `_sync` (its own decisions and writes, in its own module). A 409 Conflict from
one of those writes means the cache was stale: that owner is skipped and one more pass is asked
for at once, on fresh state. The pass asks to be woken at the earliest time a `_sync` returned.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import ClassVar

from kubesim.client import ApiError, Informer, KubeClient
from kubesim.controllers.events import EventRecorder
from kubesim.controllers.objects import Obj, controller_ref
from kubesim.controllers.reconciler import Reconciler
from kubesim.controllers.writes import delete_pinned

__all__ = ["CONTROLLER_UID_INDEX", "OwnerController", "controller_uid"]

CONTROLLER_UID_INDEX = "controller-uid"
"""The index of owned objects by the UID of their controller reference."""


def controller_uid(obj: Obj) -> list[str]:
    """The UID of `obj`'s controller reference, the key of `CONTROLLER_UID_INDEX`."""
    ref = controller_ref(obj)
    return [str(ref.get("uid"))] if ref is not None else []


class OwnerController(Reconciler):
    """Syncs every owner on each change of an owner or of an object one of its kind controls.

    Subclasses set `kind` and `api_version` (the owner's), implement `_sync`, and may
    override `_owners` (the owners' informer, None while there is none) and `_after_pass`.
    Events are recorded with the controller's `name` as their component.
    """

    kind: ClassVar[str]
    api_version: ClassVar[str]

    def __init__(
        self,
        client: KubeClient,
        *,
        owners: Informer | None,
        owned: Sequence[Informer],
        recorder: EventRecorder,
        clock: Callable[[], float] = time.time,
        index: tuple[str, Callable[[Obj], list[str]]] = (CONTROLLER_UID_INDEX, controller_uid),
    ) -> None:
        super().__init__(period=None, clock=clock)
        self.client = client
        self.recorder = recorder
        self.owners = owners
        self.owned = tuple(owned)
        for informer in self.owned:
            informer.add_indexer(*index)
        if owners is not None:
            owners.add_handler(self.trigger)
        for informer in self.owned:
            informer.add_handler(self._on_owned)

    def _on_owned(self, kind: str, obj: Obj) -> None:
        ref = controller_ref(obj)
        if ref is not None and ref.get("kind") == self.kind:
            self.trigger()

    def subject(self, owner: Obj) -> Obj:
        """`owner` with its kind and apiVersion, as the Events about it name it."""
        return {**owner, "kind": self.kind, "apiVersion": self.api_version}

    def record(
        self, subject: Obj, reason: str, message: str, *, event_type: str = "Normal"
    ) -> None:
        """An Event about `subject` from this controller."""
        self.recorder.record(
            subject, reason=reason, message=message, component=self.name, event_type=event_type
        )

    def observe_created(
        self,
        subject: Obj,
        obj: Obj,
        *,
        informer: Informer,
        reason: str = "SuccessfulCreate",
        message: str = "",
    ) -> None:
        """Show the just-created `obj` to its `informer`; record `Created <kind>: <name>`."""
        informer.observe(obj)
        kind, name = informer.resource.kind.lower(), obj["metadata"]["name"]
        self.record(subject, reason, message or f"Created {kind}: {name}")

    async def delete_owned(
        self,
        subject: Obj,
        obj: Obj,
        *,
        informer: Informer,
        reason: str = "SuccessfulDelete",
        message: str = "",
    ) -> None:
        """Delete `obj` pinned by its UID; if it was deleted, record `Deleted <kind>: <name>`."""
        if await delete_pinned(self.client, informer.resource, obj, informer=informer):
            kind, name = informer.resource.kind.lower(), obj["metadata"]["name"]
            self.record(subject, reason, message or f"Deleted {kind}: {name}")

    def _owners(self) -> Informer | None:
        return self.owners

    async def _sync(self, owners: Informer, owner: Obj, now: float) -> float | None:
        """Carry out the plan for `owner`; the wall time of the next pass it needs, if any."""
        raise NotImplementedError

    async def _after_pass(self, owners: list[Obj]) -> None:
        """Work over every owner of the pass once each was synced (nothing by default)."""

    async def reconcile(self) -> float | None:
        owners = self._owners()
        if owners is None or not all(i.synced.is_set() for i in (owners, *self.owned)):
            return None
        now = self.clock()
        wake: float | None = None
        items = owners.items()
        for owner in items:
            try:
                at = await self._sync(owners, owner, now)
            except ApiError as exc:
                if exc.conflict:
                    self.trigger()  # stale cache: recompute from fresh state
                    continue
                raise
            if at is not None:
                wake = at if wake is None else min(wake, at)
        await self._after_pass(items)
        return wake
