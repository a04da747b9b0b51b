"""Intake: every change of an AppWrapper, pod or node reaches the cache through here.

Sources: the consistent LIST at the start of a term and the periodic resync (:meth:`Intake.
relist`), the watcher's events on NATS (:meth:`Intake.handle_kube_event`) or the dispatcher's own
informers (the ``on_*`` callbacks). A change is applied to :class:`~clearance_dispatcher.state.
ClusterState` (older versions are ignored there), then the AppWrapper's key is queued for a
worker and a queue scan is requested. A deleted AppWrapper — or one whose name a new UID took —
ends its local state here, once: timers forgotten, cycle roots ended, its items deleted.
:meth:`Intake.relist_pods_of` is the quorum re-count rare decisions (requeue, fail, complete)
rely on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

import msgspec

from clearance import apimanners, labels
from clearance.bus import Delivery, Retry
from clearance.events import AppWrapperSpec as SnapshotSpec
from clearance.events import (
    Event,
    EventDecodeError,
    KubeAppWrapperEvent,
    KubeItemEvent,
    KubeNodeEvent,
    KubePodEvent,
    NodeObject,
    PodObject,
)
from clearance.kube import NODES, PODS, KubeError
from clearance_dispatcher.appwrapper import INVALID_FIELD, AppWrapperSpec, Problem
from clearance_dispatcher.cycles import CycleRoots
from clearance_dispatcher.deletion import delete_items
from clearance_dispatcher.runtime import Runtime
from clearance_dispatcher.state import Entry, Key, newer

log = logging.getLogger(__name__)

POD_DECODER: Final = msgspec.json.Decoder(PodObject)
NODE_DECODER: Final = msgspec.json.Decoder(NodeObject)


def spec_snapshot_problem(raw: dict[str, Any]) -> Problem | None:
    """The same judgement as the watcher's, made on the dispatcher's own read: a stored spec
    that does not decode into the event snapshot fails the AppWrapper (``InvalidField``), so
    the outcome does not depend on whether the watcher's flagged event or another read of
    the object (a resync, a re-queue after a CRD change) reaches the dispatcher first."""
    spec = raw.get("spec")
    if spec is None:
        return None
    try:
        msgspec.convert(spec, type=SnapshotSpec)
    except msgspec.ValidationError as exc:
        path = EventDecodeError.from_msgspec(exc).path or "$"  # relative to the spec
        detail = str(exc).split(" - at `", 1)[0]
        return Problem(INVALID_FIELD, f"spec{path[1:]}: {detail}")
    return None


def spec_problem_of(event: KubeAppWrapperEvent) -> Problem | None:
    """The watcher's word that this version's spec does not decode (``$.spec`` dropped), as
    the problem that fails the AppWrapper: ``InvalidField`` naming the field (DESIGN §3)."""
    problem = event.problem
    if problem is None or not any(
        p == "$.spec" or p.startswith("$.spec.") for p in problem.dropped
    ):
        return None
    path = problem.path or "$.spec"
    field = path[2:] if path.startswith("$.") else path
    return Problem(INVALID_FIELD, f"{field}: {problem.message}")


def pod_selector(spec: AppWrapperSpec) -> str:
    """The label selector of every pod of ``spec``'s AppWrapper (any attempt)."""
    return labels.selector_for(spec.name, namespace=spec.namespace)


def seen_after(cached: str, listed: str) -> bool:
    """Did the cache get this version by an event after the LIST was served? Only numeric
    resourceVersions can be ordered; anything else counts as covered by the LIST."""
    return bool(listed) and cached.isdigit() and listed.isdigit() and newer(cached, listed)


class Intake:
    """Feeds the cache of one dispatcher and wakes the workers and the queue scan."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        rt.on_gone = self.on_appwrapper_deleted

    # -- AppWrappers -----------------------------------------------------------------------

    def on_appwrapper(self, raw: dict[str, Any], *, spec_problem: Problem | None = None) -> None:
        meta = raw.get("metadata") or {}
        if not self.rt.serves(str(meta.get("namespace") or "")):
            return
        old = self.rt.state.replaced(raw)
        if old is not None:  # the name now belongs to a new incarnation
            self._end(old, reason="replaced by a new appwrapper of this name")
        if spec_problem is None:
            spec_problem = spec_snapshot_problem(raw)
        key = self.rt.state.apply_appwrapper(raw, spec_problem=spec_problem)
        if key is not None:
            self.rt.queue.add(key)
            self.rt.request_scan()

    def on_appwrapper_deleted(self, namespace: str, name: str, uid: str | None) -> None:
        entry = self.rt.state.appwrappers.get((namespace, name))
        if entry is None or (uid is not None and entry.uid != uid):
            return
        self._end(entry, reason="appwrapper deleted")
        self.rt.request_scan()

    def _end(self, entry: Entry, *, reason: str) -> None:
        """The one end of an AppWrapper's local lifecycle."""
        meta = entry.raw["metadata"]
        key: Key = (meta["namespace"], meta["name"])
        self.rt.state.remove_appwrapper(key, entry.uid)
        self.rt.queue.forget(key)
        CycleRoots.end_all(entry.local, outcome="appwrapper deleted")
        log.info(
            "appwrapper gone; removing its objects",
            extra={"aw": f"{key[0]}/{key[1]}", "why": reason},
        )
        if entry.last_valid is not None:
            self.rt.spawn(self._delete_all(entry.last_valid))

    async def _delete_all(self, spec: AppWrapperSpec) -> None:
        """Explicit teardown of a deleted AppWrapper (ownerReference GC does it too)."""
        for attempt in range(5):
            try:
                await delete_items(self.rt.kube, self.rt.discovery, spec, attempt=None)
                return
            except KubeError as exc:
                log.warning(
                    "deleting items of a deleted appwrapper failed",
                    extra={"aw": f"{spec.namespace}/{spec.name}", "error": str(exc)},
                )
                await asyncio.sleep(min(2**attempt, 10))

    # -- pods and nodes --------------------------------------------------------------------

    def on_pod(self, pod: PodObject) -> None:
        self._after_pod_change(self.rt.state.apply_pod(pod))

    def on_pod_deleted(self, uid: str) -> None:
        self._after_pod_change(self.rt.state.remove_pod(uid))

    def _after_pod_change(self, changed: Key | bool | None) -> None:
        if changed is None:
            return
        if isinstance(changed, tuple) and changed in self.rt.state.appwrappers:
            self.rt.queue.add(changed)
        self.rt.request_scan()

    def on_node(self, node: NodeObject) -> None:
        if self.rt.state.apply_node(node):
            self.rt.request_scan()

    def on_node_deleted(self, name: str, uid: str | None = None) -> None:
        if self.rt.state.remove_node(name, uid):
            self.rt.request_scan()

    # -- LISTs -----------------------------------------------------------------------------

    async def relist(self) -> None:
        """A consistent LIST of AppWrappers, pods and nodes; vanished objects are removed.

        An object missing from a LIST is gone only if the cache holds a version the LIST
        already covered: one whose resourceVersion is newer than the LIST's arrived by an
        event while the LISTs were in flight (an AppWrapper created a moment after its LIST
        was served) and stays; removing it would end a live AppWrapper and delete its items.
        """
        rt = self.rt
        aw_items: list[dict[str, Any]] = []
        aw_listed_at: dict[str | None, str] = {}
        for ns in rt.settings.namespaces or (None,):
            result = await rt.kube.list(rt.aw_resource, namespace=ns)
            aw_listed_at[ns] = result.resource_version
            aw_items.extend(msgspec.json.decode(raw) for raw in result.items)
        pod_list = await rt.kube.list(PODS)
        pods = [POD_DECODER.decode(raw) for raw in pod_list.items]
        node_list = await rt.kube.list(NODES)
        nodes = [NODE_DECODER.decode(raw) for raw in node_list.items]
        seen_aws = set()
        for raw in aw_items:
            meta = raw.get("metadata") or {}
            seen_aws.add((str(meta.get("namespace")), str(meta.get("name")), meta.get("uid")))
            self.on_appwrapper(raw)
        for key, entry in list(rt.state.appwrappers.items()):
            if (key[0], key[1], entry.uid) in seen_aws:
                continue
            listed_at = aw_listed_at.get(key[0], aw_listed_at.get(None, ""))
            if seen_after(entry.rv, listed_at):
                continue
            self.on_appwrapper_deleted(key[0], key[1], entry.uid)
        pod_uids = {p.metadata.uid for p in pods}
        for pod in pods:
            self.on_pod(pod)
        for uid, pod in list(rt.state.pods.items()):
            if uid in pod_uids:
                continue
            if seen_after(pod.metadata.resource_version, pod_list.resource_version):
                continue
            self.on_pod_deleted(uid)
        node_names = {n.metadata.name for n in nodes}
        for node in nodes:
            self.on_node(node)
        for name, node in list(rt.state.nodes.items()):
            if name in node_names:
                continue
            if seen_after(node.metadata.resource_version, node_list.resource_version):
                continue
            self.on_node_deleted(name)
        rt.synced.set()

    async def relist_pods_of(self, key: Key, spec: AppWrapperSpec) -> None:
        """Quorum LIST of the AppWrapper's pods into the cache; cached ones not listed (and
        not changed since the LIST) are dropped. Decisions that are rare and costly to get
        wrong (requeue, fail, complete) count pods from this, never from the cache alone."""
        result = await self.rt.kube.list(
            PODS, namespace=spec.namespace, label_selector=pod_selector(spec)
        )
        listed = set()
        for raw_pod in result.items:
            pod = POD_DECODER.decode(raw_pod)
            listed.add(pod.metadata.uid)
            self.on_pod(pod)
        for pod in list(self.rt.state.pods_of(key)):
            if pod.metadata.uid in listed or pod.metadata.namespace != spec.namespace:
                continue
            if seen_after(pod.metadata.resource_version, result.resource_version):
                continue  # an event newer than the LIST: keep it
            self.on_pod_deleted(pod.metadata.uid)

    # -- NATS ------------------------------------------------------------------------------

    async def handle_kube_event(self, event: Event, delivery: Delivery) -> None:
        """NATS intake: apply one watcher event (AppWrappers are re-read from the API)."""
        if isinstance(event, KubePodEvent):
            if event.action == "DELETED":
                self.on_pod_deleted(event.object.metadata.uid)
            else:
                self.on_pod(event.object)
        elif isinstance(event, KubeNodeEvent):
            if event.action == "DELETED":
                self.on_node_deleted(event.object.metadata.name, event.object.metadata.uid)
            else:
                self.on_node(event.object)
        elif isinstance(event, KubeItemEvent):
            await self.on_pod_item(event)
        elif isinstance(event, KubeAppWrapperEvent):
            await self._on_appwrapper_event(event)

    async def _on_appwrapper_event(self, event: KubeAppWrapperEvent) -> None:
        meta = event.object.metadata
        namespace = meta.namespace or ""
        if not self.rt.serves(namespace):
            return
        if event.action == "DELETED":
            self.on_appwrapper_deleted(namespace, meta.name, meta.uid)
            return
        current = self.rt.state.appwrappers.get((namespace, meta.name))
        flagged = spec_problem_of(event)
        if (
            current is not None
            and current.uid == meta.uid
            and not newer(meta.resource_version, current.rv)
            and (flagged is None or not isinstance(current.parsed, AppWrapperSpec))
        ):
            return  # our own write, or older
        # The snapshot is a subset; the dispatcher acts on the whole object. A new AppWrapper's
        # read is the start of its first look: it passes the rate limit's queue.
        urgent = apimanners.URGENT.set(current is None or current.uid != meta.uid)
        try:
            raw = msgspec.json.decode(
                await self.rt.kube.get(self.rt.aw_resource, meta.name, namespace=namespace)
            )
        except KubeError as exc:
            if exc.not_found:
                self.on_appwrapper_deleted(namespace, meta.name, meta.uid)
                return
            raise Retry(1.0, f"GET appwrapper failed: {exc}") from exc
        finally:
            apimanners.URGENT.reset(urgent)
        same_version = (raw.get("metadata") or {}).get("resourceVersion") == meta.resource_version
        self.on_appwrapper(raw, spec_problem=flagged if same_version else None)

    async def on_pod_item(self, event: KubeItemEvent) -> None:
        """A generic item that *is* a Pod (``kind: Pod`` in the AppWrapper).

        Today's watcher publishes a wrapped pod once, as a ``pod`` event (it runs no item
        informer for Pods); item events of Pods come from older watchers (during an upgrade)
        or other publishers. Of a pod that carries the AppWrapper label, such an event only
        applies a deletion early: its pod events bring the status. A pod without that label
        is outside the watcher's pod watch, so its item snapshot (no status) is all there is:
        it is re-read from the API when newer than the cache. Should a labelled pod's event
        ever be missing, the quorum LIST before every requeue decision and the periodic
        re-LIST correct the cache. (Re-reading at every item event cost a
        GET per pod change: 10-22 of the ~35-54 requests per gang in the rack-loss benchmark,
        and in a storm the pod event often lagged more than a second behind its item.)
        """
        obj = event.object
        if obj.kind != "Pod" or obj.api_version != "v1":
            return
        meta = obj.metadata
        if event.action == "DELETED":
            self.on_pod_deleted(meta.uid)
            return
        if labels.ANY_APPWRAPPER in meta.labels:
            return
        current = self.rt.state.pods.get(meta.uid)
        if current is None or newer(meta.resource_version, current.metadata.resource_version):
            await self._reread_pod(meta.uid, meta.name, meta.namespace or "")

    async def _reread_pod(self, uid: str, name: str, namespace: str) -> None:
        try:
            raw = await self.rt.kube.get(PODS, name, namespace=namespace)
        except KubeError as exc:
            if exc.not_found:
                self.on_pod_deleted(uid)
                return
            raise Retry(1.0, f"GET pod failed: {exc}") from exc
        pod = POD_DECODER.decode(raw)
        if pod.metadata.uid != uid:
            self.on_pod_deleted(uid)  # gone, and its name reused by a newer pod
        self.on_pod(pod)
