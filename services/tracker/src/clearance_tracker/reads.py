"""Fresh reads of the API server: quorum LISTs, GETs of tracked objects, and their nodes.

This module owns every read the tracker makes of Kubernetes and the decoding of what comes
back into the snapshots the pure rules take (:class:`~clearance.events.PodObject` for pods,
:class:`~clearance.events.ItemObject` for every other kind). A LIST has no resourceVersion
(a quorum read) and selects by the AppWrapper label, one per kind the record knows; a kind
the server does not serve lists as empty and GETs as 404 (its objects cannot exist). Reads
that fail for another reason raise: the caller retries later rather than conclude anything.
The LISTs of teardowns verified at once are shared, one per namespace and kind
(:mod:`.listing`); so are the escalation ladder's reads of open objects (a GET only for a
name the LIST does not show) and of nodes (one LIST of nodes for many diagnoses).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Final

import msgspec

from clearance import labels
from clearance.discovery import Discovery
from clearance.events import ItemObject, NodeObject, PodObject
from clearance.kube import NODES, PODS, Kube, KubeError
from clearance_tracker.confirmation import GetResult, Missing, Snapshot
from clearance_tracker.listing import CoalescedLists, SharedNodeList
from clearance_tracker.metrics import TrackerMetrics
from clearance_tracker.teardown import Teardown, TrackedObject

log = logging.getLogger(__name__)

_POD_DECODER: Final = msgspec.json.Decoder(PodObject)
_ITEM_DECODER: Final = msgspec.json.Decoder(ItemObject)
_NODE_DECODER: Final = msgspec.json.Decoder(NodeObject)

NODE_GETS: Final = 2
"""Up to this many nodes a diagnosis GETs one by one; more are read with one LIST of nodes."""

KindKey = tuple[str, str]
"""(apiVersion, kind)."""

Listing = tuple[frozenset[KindKey], list[Snapshot]]
"""The kinds a verification LIST covered, and the objects it found."""


def kinds(record: Teardown) -> frozenset[KindKey]:
    """(apiVersion, kind) pairs the final LIST must cover: pods, wrapped kinds, tracked kinds."""
    found = {("v1", "Pod")}
    found.update((k.api_version, k.kind) for k in record.wrapped_kinds)
    found.update((o.api_version, o.kind) for o in record.objects.values())
    return frozenset(found)


def decode_snapshot(raw: bytes | msgspec.Raw, *, api_version: str, kind: str) -> Snapshot:
    if kind == "Pod" and api_version == "v1":
        return _POD_DECODER.decode(raw)
    # LIST items carry no kind/apiVersion; ItemObject requires them.
    data = msgspec.json.decode(raw)
    data.setdefault("kind", kind)
    data.setdefault("apiVersion", api_version)
    return _ITEM_DECODER.decode(msgspec.json.encode(data))


UNSEEN_GETS: Final = 8
"""Most objects of one namespace and kind that :meth:`ApiReader.get_each` reads with a GET
each (a gang's pods after a force deletion); more are read with one namespace LIST."""


class ApiReader:
    """Reads of pods, items and nodes for one tracker replica."""

    def __init__(self, kube: Kube, *, metrics: TrackerMetrics) -> None:
        self.kube = kube
        # miss_retry=0: "not served" lets a teardown finish, so it is never an old answer.
        self.resolver = Discovery(kube, miss_retry=0.0, preload=(PODS,))
        self.metrics = metrics
        self.lists = CoalescedLists(self.list_kind)
        """Verification LISTs, one per namespace and kind for every teardown asking at once."""
        self.node_lists = SharedNodeList(self._list_nodes)
        """Node LISTs for the diagnoses of many teardowns at once (a rack loss)."""

    async def list_all(self, record: Teardown) -> Listing:
        """Quorum LIST by the AppWrapper label of pods and every kind the record knows
        (coalesced with other teardowns' LISTs of the same namespace and kind)."""
        aw = record.appwrapper
        value = labels.value_for(aw.name)
        covered = kinds(record)
        results = await asyncio.gather(
            *(self.lists.by_label(api, kind, aw.namespace, value) for api, kind in covered)
        )
        return covered, [snapshot for result in results for snapshot in result]

    async def list_kind(
        self, api_version: str, kind: str, namespace: str, selector: str
    ) -> list[Snapshot]:
        """Quorum LIST of one kind by the AppWrapper label ([] when the kind is not served)."""
        resource = await self.resolver.find(api_version, kind)
        if resource is None:
            return []
        try:
            result = await self.kube.list(resource, namespace=namespace, label_selector=selector)
        except KubeError as exc:
            if exc.not_found:
                return []
            self.metrics.kube_errors.labels("list").inc()
            raise
        snapshots: list[Snapshot] = []
        for raw in result.items:
            try:
                snapshots.append(decode_snapshot(raw, api_version=api_version, kind=kind))
            except msgspec.DecodeError as exc:
                log.warning("unreadable object in LIST", extra={"error": str(exc)})
        return snapshots

    async def get(self, obj: TrackedObject) -> GetResult:
        """GET of a tracked object by kind/namespace/name (the answer may be another UID)."""
        resource = await self.resolver.find(obj.api_version, obj.kind)
        if resource is None:
            return Missing(obj.uid)
        try:
            raw = await self.kube.get(resource, obj.name, namespace=obj.namespace)
        except KubeError as exc:
            if exc.not_found:
                return Missing(obj.uid)
            self.metrics.kube_errors.labels("get").inc()
            raise
        return decode_snapshot(raw, api_version=obj.api_version, kind=obj.kind)

    async def get_each(self, objs: Iterable[TrackedObject]) -> list[tuple[str, GetResult]]:
        """What a GET of each object would answer: concurrent GETs for up to
        :data:`UNSEEN_GETS` objects of one namespace and kind, one quorum LIST of the
        namespace and kind beyond.

        These are the objects the label LIST did not show: gone, or stripped of their labels.
        The LIST has no selector, so an object that lost its labels is still found by name and
        the answer per object is exactly a GET's (the object of that name, maybe another UID,
        or :class:`Missing`); but it carries every object of the namespace (4,000 pods in the
        rack-loss benchmark, ~4 MB each time), so a few GETs are far cheaper for the API
        server and for this process, as API Priority and Fairness also counts them."""
        groups: dict[tuple[str, str, str | None], list[TrackedObject]] = {}
        for obj in objs:
            groups.setdefault((obj.api_version, obj.kind, obj.namespace), []).append(obj)
        out: list[tuple[str, GetResult]] = []
        for (api_version, kind, namespace), members in groups.items():
            if len(members) <= UNSEEN_GETS:
                answers = await asyncio.gather(*(self.get(obj) for obj in members))
                out.extend((obj.uid, answer) for obj, answer in zip(members, answers, strict=True))
                continue
            resource = await self.resolver.find(api_version, kind)
            by_name = await self._by_name(api_version, kind, namespace) if resource else None
            for obj in members:
                if resource is None:
                    out.append((obj.uid, Missing(obj.uid)))
                elif by_name is None:
                    out.append((obj.uid, await self.get(obj)))
                else:
                    found = by_name.get(obj.name)
                    out.append((obj.uid, found if found is not None else Missing(obj.uid)))
        return out

    async def _by_name(
        self, api_version: str, kind: str, namespace: str | None
    ) -> dict[str, Snapshot | None] | None:
        """Every object of a kind in a namespace by name (None: not served, or an object of
        the LIST is unreadable)."""
        resource = await self.resolver.find(api_version, kind)
        if resource is None:
            return None
        try:
            result = await self.kube.list(resource, namespace=namespace)
        except KubeError as exc:
            if exc.not_found:
                return None
            self.metrics.kube_errors.labels("list").inc()
            raise
        found: dict[str, Snapshot | None] = {}
        for raw in result.items:
            try:
                snapshot = decode_snapshot(raw, api_version=api_version, kind=kind)
            except msgspec.DecodeError:
                # Unreadable: its name is unknown, so no object of this LIST may be taken
                # as gone from it; the caller GETs each one instead.
                return None
            found[snapshot.metadata.name] = snapshot
        return found

    async def get_open(self, record: Teardown) -> list[tuple[str, GetResult]]:
        """What a GET of every open object of `record` would answer, in the ladder's order
        (pods first): the objects under their names in a quorum LIST by the AppWrapper label
        (coalesced with other teardowns'), a GET for each name that LIST does not show (gone,
        or stripped of its labels). An object of another UID under the name is answered as a
        GET would answer it."""
        aw = record.appwrapper
        value = labels.value_for(aw.name)
        open_objects = record.open_objects
        groups = {(o.api_version, o.kind, o.namespace) for o in open_objects}
        listed: dict[tuple[str, str, str | None, str], Snapshot] = {}
        for api_version, kind, namespace in groups:
            if namespace is None or await self.resolver.find(api_version, kind) is None:
                continue  # cluster-scoped or not served: GET each (as before)
            for snapshot in await self.lists.by_label(api_version, kind, namespace, value):
                listed[(api_version, kind, namespace, snapshot.metadata.name)] = snapshot
        answers: dict[str, GetResult] = {}
        unlisted: list[TrackedObject] = []
        for obj in open_objects:
            found = listed.get((obj.api_version, obj.kind, obj.namespace, obj.name))
            if found is None:
                unlisted.append(obj)
            else:
                answers[obj.uid] = found
        got = await asyncio.gather(*(self.get(obj) for obj in unlisted))  # sent together
        answers.update(zip((obj.uid for obj in unlisted), got, strict=True))
        return [(obj.uid, answers[obj.uid]) for obj in open_objects]

    async def nodes(self, names: Iterable[str]) -> dict[str, NodeObject | None]:
        """The named nodes (None: the node does not exist); a failed read leaves them out.
        One or two names are a GET each; more, one LIST shared with other diagnoses."""
        wanted = sorted(set(names))
        found: dict[str, NodeObject | None] = {}
        if len(wanted) > NODE_GETS:
            try:
                every = await self.node_lists.nodes()
            except KubeError:
                self.metrics.kube_errors.labels("list_nodes").inc()
                return found
            return {name: every.get(name) for name in wanted}
        for name in wanted:
            try:
                found[name] = _NODE_DECODER.decode(await self.kube.get(NODES, name))
            except KubeError as exc:
                if exc.not_found:
                    found[name] = None
                else:
                    self.metrics.kube_errors.labels("get_node").inc()
        return found

    async def _list_nodes(self) -> dict[str, NodeObject]:
        result = await self.kube.list(NODES)
        every: dict[str, NodeObject] = {}
        for raw in result.items:
            try:
                node = _NODE_DECODER.decode(raw)
            except msgspec.DecodeError as exc:
                log.warning("unreadable node in LIST", extra={"error": str(exc)})
                continue
            every[node.metadata.name] = node
        return every
