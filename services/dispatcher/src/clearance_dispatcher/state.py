"""The dispatcher's in-memory view of the cluster: AppWrappers, pods, nodes.

Fed by a consistent LIST at start and then by kube events (NATS or a direct watch) — from any
source, changes are applied through :meth:`ClusterState.apply_*`, which ignore anything older
than what is cached (resourceVersions compared numerically: etcd's and kubesim's are integers;
an opaque one is treated as newer when different). Pods are indexed by the AppWrapper they
belong to (labels ``appwrapper.mcad.ibm.com`` + ``clearance.dev/namespace``), so monitoring an
AppWrapper never scans every pod. The index is keyed by the label values, which for a name past
63 characters are a hash (:func:`clearance.labels.value_for`); :meth:`ClusterState.aw_key_of`
maps them back to the AppWrapper's key through the cached AppWrappers.

Each AppWrapper's :class:`Entry` also holds its :class:`Local` state — what this replica knows
about it beyond the API object (admission, retries, open cycle roots). It lives exactly as long
as the entry of that UID: carried over when the spec changes, dropped (and its spans ended by
the caller) when the AppWrapper goes or its name is taken by a new UID.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.trace import Span

from clearance import labels
from clearance.events import NodeObject, PodObject
from clearance_dispatcher.appwrapper import (
    AppWrapperSpec,
    InvalidAppWrapper,
    Problem,
    parse_appwrapper,
)
from clearance_dispatcher.capacity import Resources, add, pod_requests
from clearance_dispatcher.policy_annotations import ANNOTATION_OF_FIELD
from clearance_dispatcher.queueing import Candidate
from clearance_dispatcher.requeueing import Counts
from clearance_dispatcher.status import Observed, observe
from clearance_dispatcher.storage import STATUS_STORAGE, Storage

Key = tuple[str, str]
POLICY_KEYS = frozenset(ANNOTATION_OF_FIELD.values())
"""(namespace, name) of an AppWrapper."""


def label_key(key: Key) -> Key:
    """The label values (namespace, AppWrapper) that objects of AppWrapper ``key`` carry."""
    return (labels.value_for(key[0]), labels.value_for(key[1]))


def newer(candidate: str, cached: str) -> bool:
    """Is ``candidate`` a later resourceVersion than ``cached``?"""
    if candidate.isdigit() and cached.isdigit():
        return int(candidate) > int(cached)
    return candidate != cached


def policy_annotations(raw: dict[str, Any]) -> dict[str, Any]:
    """The annotations that are part of the spec (teardown policy): a change re-parses it,
    although it bumps no ``metadata.generation``."""
    annotations = (raw.get("metadata") or {}).get("annotations") or {}
    return {k: v for k, v in annotations.items() if k in POLICY_KEYS}


def _rv(raw: dict[str, Any]) -> str:
    return str((raw.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(slots=True)
class Local:
    """What this replica keeps about one AppWrapper besides its API object (lost on restart;
    everything here is rebuilt from the status or is only an optimisation)."""

    admitted: bool = False
    """The queue scan admitted it (capacity reserved) and a worker is to dispatch it."""
    waiting: str | None = None
    """Why the queue scan holds it (the Queueing condition message), when it does."""
    retries: int = 0
    """Consecutive failed reconciles (exponential backoff)."""
    last_poll: float = 0.0
    """Monotonic time of the last completionstatus poll."""
    counts_written: float = float("-inf")
    """Monotonic time of the last counts-only status write (``counts_write_interval``)."""
    roots: dict[str, Span] = field(default_factory=dict)
    """Open ``requeue.cycle`` root spans started here, by traceparent."""
    belt_checked: int | None = None
    """Attempt whose safety-belt LIST (no pod of another attempt) ran right before its
    Dispatching was written on ``cleared``; the worker's dispatch of it skips a second LIST."""

    announced: set[tuple[str, int]] = field(default_factory=set)
    """(AppWrapper UID, attempt) of earlier incarnations whose leftovers were handed to the
    tracker (``teardown.started``) by this replica."""


@dataclass(slots=True)
class Entry:
    """One AppWrapper: its latest raw object, its parsed spec and its local state."""

    raw: dict[str, Any]
    parsed: AppWrapperSpec | InvalidAppWrapper
    last_valid: AppWrapperSpec | None
    local: Local = field(default_factory=Local)
    storage: Storage = STATUS_STORAGE
    _observed: tuple[dict[str, Any], object, int, Observed] | None = None
    _candidate: tuple[AppWrapperSpec, Candidate] | None = None

    def candidate(self, key: Key, spec: AppWrapperSpec) -> Candidate:
        """This AppWrapper (under ``key``, its fixed key) as a queue candidate, built once per
        parsed spec (a new spec object is a new parse)."""
        cached = self._candidate
        if cached is not None and cached[0] is spec:
            return cached[1]
        made = Candidate(key, spec.priority, spec.creation, spec.requests)
        self._candidate = (spec, made)
        return made

    @property
    def observed(self) -> Observed:
        """The parsed status, cached per raw object, resourceVersion and storage switch (a
        queue scan reads it for every AppWrapper, so a hit costs two identity checks and one
        lookup: the raw object is replaced on every change, the resourceVersion is compared
        as well for a caller that edits it in place)."""
        raw = self.raw
        switches: int = getattr(self.storage, "switches", 0)  # a storage switch re-reads
        cached = self._observed
        if (
            cached is not None
            and cached[0] is raw
            and cached[2] == switches
            and cached[1] == (raw.get("metadata") or {}).get("resourceVersion")
        ):
            return cached[3]
        observed = observe(raw, self.storage)
        rv = (raw.get("metadata") or {}).get("resourceVersion")
        self._observed = (raw, rv, switches, observed)
        return observed

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
    storage: Storage = STATUS_STORAGE
    """Where the AppWrappers' bookkeeping is read from."""
    appwrappers: dict[Key, Entry] = field(default_factory=dict)
    pods: dict[str, PodObject] = field(default_factory=dict)
    nodes: dict[str, NodeObject] = field(default_factory=dict)
    pods_by_aw: dict[Key, set[str]] = field(default_factory=dict)
    """Pod uids by :func:`label_key` of their AppWrapper."""
    by_label: dict[Key, Key] = field(default_factory=dict)
    """:func:`label_key` → key of every cached AppWrapper (hashed label values map back)."""
    pod_requests: dict[str, Resources] = field(default_factory=dict)
    """Requests per pod uid, computed once per pod version (scans read them many times)."""

    # -- AppWrappers ---------------------------------------------------------------------

    def apply_appwrapper(
        self, raw: dict[str, Any], *, spec_problem: Problem | None = None
    ) -> Key | None:
        """Store ``raw`` if it is new or newer; returns its key when something changed.

        ``spec_problem``: the watcher could not decode this version's spec (DESIGN §3); the
        spec is then refused with it unless the dispatcher's own validation names a more
        specific problem. The caller removes an entry of another UID under the same name
        first (see :meth:`replaced`), so its local state ends with it."""
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        current = self.appwrappers.get(key)
        same = current is not None and current.uid == meta.get("uid")
        if current is not None and same:
            flagged = spec_problem is not None and isinstance(current.parsed, AppWrapperSpec)
            if not flagged and not newer(_rv(raw), current.rv):
                return None
            if (
                not flagged
                and current.generation == meta.get("generation")
                and policy_annotations(current.raw) == policy_annotations(raw)
            ):
                current.raw = raw  # status/metadata change only: keep the parsed spec
                return key
        parsed = parse_appwrapper(raw)
        if spec_problem is not None and isinstance(parsed, AppWrapperSpec):
            parsed = InvalidAppWrapper(
                parsed.namespace, parsed.name, parsed.uid, parsed.generation, (spec_problem,)
            )
        last_valid = parsed if isinstance(parsed, AppWrapperSpec) else None
        local = Local()
        if current is not None and same:
            local = current.local
            if last_valid is None:
                last_valid = current.last_valid
        self.appwrappers[key] = Entry(raw, parsed, last_valid, local, self.storage)
        self.by_label[label_key(key)] = key
        return key

    def replaced(self, raw: dict[str, Any]) -> Entry | None:
        """The cached entry that ``raw`` (same name, another UID) supersedes, if any."""
        meta = raw.get("metadata") or {}
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        current = self.appwrappers.get(key)
        return current if current is not None and current.uid != meta.get("uid") else None

    def remove_appwrapper(self, key: Key, uid: str | None = None) -> Entry | None:
        current = self.appwrappers.get(key)
        if current is None or (uid is not None and current.uid != uid):
            return None
        self.by_label.pop(label_key(key), None)
        return self.appwrappers.pop(key)

    # -- pods ----------------------------------------------------------------------------

    @staticmethod
    def label_key_of(pod: PodObject) -> Key | None:
        """The AppWrapper label values of ``pod`` (namespace, name), None if unlabelled."""
        pod_labels = pod.metadata.labels
        name = pod_labels.get(labels.MCAD_APPWRAPPER)
        if not name:
            return None
        return (pod_labels.get(labels.NAMESPACE) or pod.metadata.namespace or "", name)

    def aw_key_of(self, pod: PodObject) -> Key | None:
        """The key of the AppWrapper ``pod`` belongs to (its label values when not cached)."""
        found = self.label_key_of(pod)
        return None if found is None else self.by_label.get(found, found)

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
        found = self.label_key_of(pod)
        if found is None:
            return True
        self.pods_by_aw.setdefault(found, set()).add(uid)
        return self.by_label.get(found, found)

    def remove_pod(self, uid: str) -> Key | bool | None:
        pod = self.pods.pop(uid, None)
        self.pod_requests.pop(uid, None)
        if pod is None:
            return None
        found = self.label_key_of(pod)
        if found is None:
            return True
        members = self.pods_by_aw.get(found)
        if members is not None:
            members.discard(uid)
            if not members:
                del self.pods_by_aw[found]
        return self.by_label.get(found, found)

    def pods_of(self, key: Key) -> Iterator[PodObject]:
        for uid in self.pods_by_aw.get(label_key(key), ()):
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
