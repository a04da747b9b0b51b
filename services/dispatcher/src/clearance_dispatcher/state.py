"""The dispatcher's in-memory view of the cluster: AppWrappers, pods, nodes.

Fed by a consistent LIST at start and then by kube events (NATS or a direct watch) — from any
source, changes are applied through :meth:`ClusterState.apply_*`, which ignore anything older
than what is cached (resourceVersions compared numerically: etcd's and kubesim's are integers;
an opaque one is treated as newer when different). Pods are indexed by the AppWrapper they
belong to (labels ``appwrapper.mcad.ibm.com`` + ``clearance.dev/namespace``), so monitoring an
AppWrapper never scans every pod.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from clearance import labels
from clearance.events import NodeObject, PodObject
from clearance_dispatcher.appwrapper import AppWrapperSpec, InvalidAppWrapper, parse_appwrapper
from clearance_dispatcher.capacity import Resources, add, pod_requests
from clearance_dispatcher.requeueing import Counts
from clearance_dispatcher.status import Observed, observe

Key = tuple[str, str]


def newer(candidate: str, cached: str) -> bool:
    """Is ``candidate`` a later resourceVersion than ``cached``?"""
    if candidate.isdigit() and cached.isdigit():
        return int(candidate) > int(cached)
    return candidate != cached


def _rv(raw: dict[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("resourceVersion") or "")


@dataclass
class Entry:
    """One AppWrapper: its latest raw object and its parsed spec."""

    raw: dict[str, Any]
    parsed: AppWrapperSpec | InvalidAppWrapper
    last_valid: AppWrapperSpec | None
    _observed: tuple[str, Observed] | None = None

    @property
    def observed(self) -> Observed:
        """The parsed status, cached per resourceVersion (scans read it for every AW)."""
        rv = self.rv
        if self._observed is None or self._observed[0] != rv:
            self._observed = (rv, observe(self.raw))
        return self._observed[1]

    @property
    def uid(self) -> str:
        return str((self.raw.get("metadata") or {}).get("uid") or "")

    @property
    def rv(self) -> str:
        return _rv(self.raw)

    @property
    def generation(self) -> int:
        gen = (self.raw.get("metadata") or {}).get("generation")
        return gen if isinstance(gen, int) else 0


@dataclass
class ClusterState:
    appwrappers: dict[Key, Entry] = field(default_factory=dict)
    pods: dict[str, PodObject] = field(default_factory=dict)
    nodes: dict[str, NodeObject] = field(default_factory=dict)
    pods_by_aw: dict[Key, set[str]] = field(default_factory=dict)
    pod_requests: dict[str, Resources] = field(default_factory=dict)
    """Requests per pod uid, computed once per pod version (scans read them many times)."""

    # -- AppWrappers ---------------------------------------------------------------------

    def apply_appwrapper(self, raw: dict[str, Any]) -> Key | None:
        """Store ``raw`` if it is new or newer; returns its key when something changed."""
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        current = self.appwrappers.get(key)
        if current is not None and current.uid == meta.get("uid"):
            if not newer(_rv(raw), current.rv):
                return None
            if current.generation == meta.get("generation"):
                current.raw = raw  # status/metadata change only: keep the parsed spec
                return key
        parsed = parse_appwrapper(raw)
        last_valid = parsed if isinstance(parsed, AppWrapperSpec) else None
        if last_valid is None and current is not None and current.uid == meta.get("uid"):
            last_valid = current.last_valid
        self.appwrappers[key] = Entry(raw, parsed, last_valid)
        return key

    def remove_appwrapper(self, key: Key, uid: str | None = None) -> Entry | None:
        current = self.appwrappers.get(key)
        if current is None or (uid is not None and current.uid != uid):
            return None
        return self.appwrappers.pop(key)

    # -- pods ----------------------------------------------------------------------------

    @staticmethod
    def aw_key_of(pod: PodObject) -> Key | None:
        pod_labels = pod.metadata.labels
        name = pod_labels.get(labels.MCAD_APPWRAPPER)
        if not name:
            return None
        return (pod_labels.get(labels.NAMESPACE) or pod.metadata.namespace or "", name)

    def apply_pod(self, pod: PodObject) -> Key | bool | None:
        """Store a pod; returns its AppWrapper key, True if unlabelled but changed, else None."""
        uid = pod.metadata.uid
        current = self.pods.get(uid)
        if current is not None and not newer(
            pod.metadata.resource_version, current.metadata.resource_version
        ):
            return None
        self.pods[uid] = pod
        self.pod_requests[uid] = pod_requests(pod)
        key = self.aw_key_of(pod)
        if key is None:
            return True
        self.pods_by_aw.setdefault(key, set()).add(uid)
        return key

    def remove_pod(self, uid: str) -> Key | bool | None:
        pod = self.pods.pop(uid, None)
        self.pod_requests.pop(uid, None)
        if pod is None:
            return None
        key = self.aw_key_of(pod)
        if key is None:
            return True
        members = self.pods_by_aw.get(key)
        if members is not None:
            members.discard(uid)
            if not members:
                del self.pods_by_aw[key]
        return key

    def pods_of(self, key: Key) -> Iterator[PodObject]:
        for uid in self.pods_by_aw.get(key, ()):
            pod = self.pods.get(uid)
            if pod is not None:
                yield pod

    def counts(self, key: Key, attempt: int) -> Counts:
        pending = running = succeeded = failed = terminating = 0
        for pod in self.pods_of(key):
            if labels.attempt_of(pod.metadata.labels) != attempt:
                continue
            phase = pod.status.phase
            deleting = pod.metadata.deletion_timestamp is not None
            if phase == "Succeeded":
                succeeded += 1
            elif phase == "Failed":
                failed += 1
            elif deleting:
                terminating += 1
            elif phase == "Running":
                running += 1
            else:
                pending += 1
        return Counts(pending, running, succeeded, failed, terminating)

    def created_requests(self, key: Key, attempt: int) -> Resources:
        """Requests of every pod of ``attempt`` that exists, whatever its phase."""
        total: Resources = {}
        for pod in self.pods_of(key):
            if labels.attempt_of(pod.metadata.labels) == attempt:
                add(total, self.requests_of(pod))
        return total

    def requests_of(self, pod: PodObject) -> Resources:
        cached = self.pod_requests.get(pod.metadata.uid)
        return cached if cached is not None else pod_requests(pod)

    # -- nodes ---------------------------------------------------------------------------

    def apply_node(self, node: NodeObject) -> bool:
        current = self.nodes.get(node.metadata.name)
        if (
            current is not None
            and current.metadata.uid == node.metadata.uid
            and not newer(node.metadata.resource_version, current.metadata.resource_version)
        ):
            return False
        self.nodes[node.metadata.name] = node
        return True

    def remove_node(self, name: str, uid: str | None = None) -> bool:
        current = self.nodes.get(name)
        if current is None or (uid is not None and current.metadata.uid != uid):
            return False
        del self.nodes[name]
        return True
