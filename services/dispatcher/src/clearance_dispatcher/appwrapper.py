"""Parsing and validation of an MCAD v1 AppWrapper into a typed, dispatchable spec.

Pure: raw JSON dict in, :class:`AppWrapperSpec` or :class:`InvalidAppWrapper` out. Every
malformed case gets its own condition reason and a message that names the field, because the
user reads it in ``kubectl describe`` — "spec.resources.GenericItems[1].generictemplate: kind
is missing" is actionable, a traceback is not. Validation never raises for bad input.

Whether the API serves a kind is not decidable here (it needs discovery); the service checks
that separately and reports it with reason ``UnknownKind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, Literal

from clearance import bounds, testfaults
from clearance.bounds import Range
from clearance.timestamps import parse_time
from clearance_dispatcher.capacity import QuantityError, Resources, add, resources_from_mapping
from clearance_dispatcher.policy_annotations import policy_fields

GrowthType = Literal["exponential", "linear", "none"]
FinalizerRemoval = Literal["Never", "AfterForceDeletion"]

# Condition reasons, one per malformed case (stable: tests and alerts match on them).
NO_GENERIC_ITEMS: Final = "NoGenericItems"
MISSING_TEMPLATE: Final = "MissingTemplate"
MISSING_KIND: Final = "MissingKind"
MISSING_API_VERSION: Final = "MissingApiVersion"
MISSING_NAME: Final = "MissingName"
NEGATIVE_MIN_AVAILABLE: Final = "NegativeMinAvailable"
INVALID_QUANTITY: Final = "InvalidQuantity"
INVALID_FIELD: Final = "InvalidField"
UNKNOWN_KIND: Final = "UnknownKind"
DUPLICATE_ITEM: Final = "DuplicateItem"
OUT_OF_RANGE: Final = "OutOfRange"
NAMESPACE_MISMATCH: Final = "NamespaceMismatch"

_REQUEUING: Final = "spec.schedulingSpec.requeuing"
SPEC_BOUNDS: Final[Mapping[str, Range]] = {
    "spec.priority": bounds.counts(-(2**31), 2**31 - 1),
    "spec.schedulingSpec.minAvailable": bounds.counts(),
    f"{_REQUEUING}.timeInSeconds": bounds.durations(),
    f"{_REQUEUING}.initialTimeInSeconds": bounds.durations(),
    f"{_REQUEUING}.maxTimeInSeconds": bounds.durations(),
    f"{_REQUEUING}.maxNumRequeuings": bounds.counts(),
    f"{_REQUEUING}.pauseTimeInSeconds": bounds.durations(),
    f"{_REQUEUING}.forceDeletionTimeInSeconds": bounds.durations(-bounds.MAX_DURATION),
    f"{_REQUEUING}.stuckAlertTimeInSeconds": bounds.durations(),
    "spec.schedulingSpec.dispatchDuration.limit": bounds.durations(1),
    "replicas": bounds.counts(),
}
"""The range of every duration and count of the spec Clearance reads (issue 13): the one
table the parser checks them against. A value outside is refused with :data:`OUT_OF_RANGE`
and a message naming the field and the range, so no later arithmetic sees it. ``replicas``
covers every replica count (Job ``parallelism``, ``replicas``, ``custompodresources``)."""
_ANNOTATION_BOUNDS: Final = {
    f: SPEC_BOUNDS[f"{_REQUEUING}.{f}"]
    for f in ("pauseTimeInSeconds", "forceDeletionTimeInSeconds", "stuckAlertTimeInSeconds")
}
"""Policy annotations are bounded like the spec fields they stand in for."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with an AppWrapper: a condition reason and a message naming the field."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class PodSet:
    """``replicas`` pods, each requesting ``requests``."""

    replicas: int
    requests: Resources


@dataclass(frozen=True, slots=True)
class GenericItem:
    index: int
    api_version: str
    kind: str
    name: str
    template: dict[str, Any]
    pod_sets: tuple[PodSet, ...]
    completion_status: tuple[str, ...] = ()

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]


@dataclass(frozen=True, slots=True)
class Requeuing:
    """``spec.schedulingSpec.requeuing`` as given; ``None`` means "operator default"."""

    time_in_seconds: int | None = None
    initial_time_in_seconds: int | None = None
    max_time_in_seconds: int = 0
    growth_type: GrowthType = "exponential"
    max_num_requeuings: int = 0
    pause_time_in_seconds: int | None = None
    force_deletion_time_in_seconds: int | None = None
    stuck_alert_time_in_seconds: int | None = None
    finalizer_removal: FinalizerRemoval | None = None


@dataclass(frozen=True, slots=True)
class AppWrapperSpec:
    """Everything the dispatcher decides on, validated."""

    namespace: str
    name: str
    uid: str
    generation: int
    creation: datetime | None
    priority: int
    min_available: int
    requeuing: Requeuing
    dispatch_limit_seconds: int | None
    items: tuple[GenericItem, ...]
    requests: Resources = field(default_factory=dict)
    """Aggregate requests of every pod the AppWrapper will create."""

    @property
    def expected_pods(self) -> int:
        return sum(ps.replicas for item in self.items for ps in item.pod_sets)

    @property
    def completion_items(self) -> tuple[GenericItem, ...]:
        return tuple(i for i in self.items if i.completion_status)


@dataclass(frozen=True, slots=True)
class InvalidAppWrapper:
    namespace: str
    name: str
    uid: str
    generation: int
    problems: tuple[Problem, ...]

    @property
    def reason(self) -> str:
        return self.problems[0].reason

    @property
    def message(self) -> str:
        return "; ".join(p.message for p in self.problems)


def _meta(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = raw.get("metadata")
    return meta if isinstance(meta, Mapping) else {}


class _Collector:
    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, reason: str, message: str) -> None:
        self.problems.append(Problem(reason, message))

    def int_field(self, obj: Mapping[str, Any], key: str, path: str) -> int | None:
        """``obj[key]`` as an int within ``SPEC_BOUNDS[path.key]``; None (and a problem) if not."""
        value = obj.get(key)
        if value is None:
            return None
        return self.bounded(value, f"{path}.{key}", bounds=SPEC_BOUNDS[f"{path}.{key}"])

    def bounded(self, value: object, path: str, *, bounds: Range) -> int | None:
        """``value`` if it is an int in ``bounds``, else None with a problem naming ``path``."""
        if isinstance(value, bool) or not isinstance(value, int):
            self.add(INVALID_FIELD, f"{path}: expected an integer, got {_short(value)}")
            return None
        if (problem := bounds.problem(value)) is not None and not testfaults.active(
            "unbounded-spec"
        ):
            self.add(OUT_OF_RANGE, f"{path}: {problem}")
            return None
        return value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _container_requests(pod_spec: Mapping[str, Any], path: str, c: _Collector) -> Resources:
    """sum of  requests of the containers of a pod spec (limits stand in for missing requests)."""
    total: Resources = {}
    containers = pod_spec.get("containers")
    if not isinstance(containers, list):
        return total
    for i, container in enumerate(containers):
        resources = _mapping(_mapping(container).get("resources"))
        requests = dict(_mapping(resources.get("limits")))
        requests.update(_mapping(resources.get("requests")))  # requests win over limits
        try:
            add(total, resources_from_mapping(requests))
        except QuantityError as exc:
            c.add(INVALID_QUANTITY, f"{path}.containers[{i}].resources: {exc}")
    return total


def _template_pod_sets(
    template: Mapping[str, Any], kind: str, path: str, c: _Collector
) -> tuple[PodSet, ...]:
    """Pods a generic item will create, read from its template (when no custompodresources)."""
    spec = _mapping(template.get("spec"))
    if kind == "Pod":
        return (PodSet(1, _container_requests(spec, f"{path}.spec", c)),)
    sets: list[PodSet] = []
    pod_template = _mapping(spec.get("template"))
    if pod_template:
        # Job: parallelism; Deployment, StatefulSet, ReplicaSet, ...: replicas
        key = "parallelism" if kind == "Job" else "replicas"
        replicas = c.bounded(spec.get(key, 1), f"{path}.spec.{key}", bounds=SPEC_BOUNDS["replicas"])
        replicas = replicas or 0
        requests = _container_requests(
            _mapping(pod_template.get("spec")), f"{path}.spec.template.spec", c
        )
        sets.append(PodSet(replicas, requests))
        return tuple(sets)
    # Kubeflow-style: spec.<x>ReplicaSpecs.<role>{replicas, template}
    for key, value in spec.items():
        if not key.endswith("ReplicaSpecs") or not isinstance(value, Mapping):
            continue
        for role, role_spec in value.items():
            role_map = _mapping(role_spec)
            replicas = role_map.get("replicas", 1)
            if isinstance(replicas, bool) or not isinstance(replicas, int):
                replicas = 0  # not ours to judge: the operator's schema is
            replicas = c.bounded(
                replicas, f"{path}.spec.{key}.{role}.replicas", bounds=SPEC_BOUNDS["replicas"]
            )
            requests = _container_requests(
                _mapping(_mapping(role_map.get("template")).get("spec")),
                f"{path}.spec.{key}.{role}.template.spec",
                c,
            )
            sets.append(PodSet(replicas or 0, requests))
    return tuple(sets)


def _custom_pod_sets(value: object, path: str, c: _Collector) -> tuple[PodSet, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        c.add(INVALID_FIELD, f"{path}: expected a list")
        return ()
    sets = []
    for i, entry in enumerate(value):
        entry_map = _mapping(entry)
        replicas = c.bounded(
            entry_map.get("replicas", 1), f"{path}[{i}].replicas", bounds=SPEC_BOUNDS["replicas"]
        )
        if replicas is None:
            continue
        try:
            requests = resources_from_mapping(_mapping(entry_map.get("requests")))
        except QuantityError as exc:
            c.add(INVALID_QUANTITY, f"{path}[{i}].requests: {exc}")
            continue
        sets.append(PodSet(replicas, requests))
    return tuple(sets)


def _parse_item(index: int, raw: object, c: _Collector, *, namespace: str) -> GenericItem | None:
    path = f"spec.resources.GenericItems[{index}]"
    item = _mapping(raw)
    template = item.get("generictemplate")
    if not isinstance(template, Mapping) or not template:
        c.add(MISSING_TEMPLATE, f"{path}.generictemplate: missing or not an object")
        return None
    tpath = f"{path}.generictemplate"
    api_version = template.get("apiVersion")
    kind = template.get("kind")
    name = _mapping(template.get("metadata")).get("name")
    ok = True
    if not isinstance(kind, str) or not kind:
        c.add(MISSING_KIND, f"{tpath}: kind is missing")
        ok = False
    if not isinstance(api_version, str) or not api_version:
        c.add(MISSING_API_VERSION, f"{tpath}: apiVersion is missing")
        ok = False
    if not isinstance(name, str) or not name:
        c.add(MISSING_NAME, f"{tpath}: metadata.name is missing (generateName is not supported)")
        ok = False
    item_ns = _mapping(template.get("metadata")).get("namespace")
    if item_ns not in (None, "", namespace):
        # DECISIONS "Hostile input": refused, never created elsewhere (nor silently moved here).
        c.add(
            NAMESPACE_MISMATCH,
            f"{tpath}.metadata.namespace: {_short(item_ns)} is not the AppWrapper's namespace "
            f"{namespace!r}; items are created in the AppWrapper's namespace only",
        )
        ok = False
    if not ok:
        return None
    assert isinstance(kind, str) and isinstance(api_version, str) and isinstance(name, str)
    custom = _custom_pod_sets(item.get("custompodresources"), f"{path}.custompodresources", c)
    pod_sets = custom if custom else _template_pod_sets(template, kind, tpath, c)
    status = item.get("completionstatus")
    completion: tuple[str, ...] = ()
    if isinstance(status, str):
        completion = tuple(s.strip() for s in status.split(",") if s.strip())
    elif status is not None:
        c.add(INVALID_FIELD, f"{path}.completionstatus: expected a comma-separated string")
    return GenericItem(
        index=index,
        api_version=api_version,
        kind=kind,
        name=name,
        template=dict(template),
        pod_sets=pod_sets,
        completion_status=completion,
    )


def _parse_requeuing(raw: Mapping[str, Any], c: _Collector) -> Requeuing:
    path = "spec.schedulingSpec.requeuing"
    growth_raw = raw.get("growthType") or "exponential"
    growth: GrowthType = "exponential"
    if growth_raw in ("linear", "none"):
        growth = "linear" if growth_raw == "linear" else "none"
    elif growth_raw != "exponential":
        c.add(INVALID_FIELD, f"{path}.growthType: expected exponential, linear or none")
    removal = raw.get("finalizerRemoval")
    if removal is not None and removal not in ("Never", "AfterForceDeletion"):
        c.add(INVALID_FIELD, f"{path}.finalizerRemoval: expected Never or AfterForceDeletion")
        removal = None
    return Requeuing(
        time_in_seconds=c.int_field(raw, "timeInSeconds", path),
        initial_time_in_seconds=c.int_field(raw, "initialTimeInSeconds", path),
        max_time_in_seconds=c.int_field(raw, "maxTimeInSeconds", path) or 0,
        growth_type=growth,
        max_num_requeuings=c.int_field(raw, "maxNumRequeuings", path) or 0,
        pause_time_in_seconds=c.int_field(raw, "pauseTimeInSeconds", path),
        force_deletion_time_in_seconds=c.int_field(raw, "forceDeletionTimeInSeconds", path),
        stuck_alert_time_in_seconds=c.int_field(raw, "stuckAlertTimeInSeconds", path),
        finalizer_removal=removal,
    )


def parse_appwrapper(raw: Mapping[str, Any]) -> AppWrapperSpec | InvalidAppWrapper:
    """Validate ``raw`` (an AppWrapper as the API returns it); never raises for bad input."""
    meta = _meta(raw)
    namespace = str(meta.get("namespace") or "")
    name = str(meta.get("name") or "")
    uid = str(meta.get("uid") or "")
    generation = meta.get("generation")
    generation = generation if isinstance(generation, int) else 0
    c = _Collector()
    spec = _mapping(raw.get("spec"))
    scheduling = _mapping(spec.get("schedulingSpec"))
    priority = c.int_field(spec, "priority", "spec") or 0
    min_available = scheduling.get("minAvailable", 0)
    if min_available is None:
        min_available = 0
    if isinstance(min_available, int) and not isinstance(min_available, bool) and min_available < 0:
        c.add(
            NEGATIVE_MIN_AVAILABLE,
            f"spec.schedulingSpec.minAvailable: must be >= 0, got {_short(min_available)}",
        )
    else:
        min_available = c.int_field(scheduling, "minAvailable", "spec.schedulingSpec") or 0
    requeuing_raw = dict(_mapping(scheduling.get("requeuing")))
    # Teardown policy by annotation where the spec has none (e.g. an upstream CRD pruned it).
    from_annotations, annotation_problems = policy_fields(
        _mapping(meta.get("annotations")), requeuing_raw, ranges=_ANNOTATION_BOUNDS
    )
    for out_of_range, message in annotation_problems:
        c.add(OUT_OF_RANGE if out_of_range else INVALID_FIELD, message)
    requeuing = _parse_requeuing({**requeuing_raw, **from_annotations}, c)
    limit = c.int_field(
        _mapping(scheduling.get("dispatchDuration")),
        "limit",
        "spec.schedulingSpec.dispatchDuration",
    )
    raw_items = _mapping(spec.get("resources")).get("GenericItems")
    items: list[GenericItem] = []
    if not isinstance(raw_items, list) or not raw_items:
        c.add(NO_GENERIC_ITEMS, "spec.resources.GenericItems: no generic items to dispatch")
    else:
        seen: set[tuple[str, str, str]] = set()
        for index, raw_item in enumerate(raw_items):
            item = _parse_item(index, raw_item, c, namespace=namespace)
            if item is None:
                continue
            key = (item.api_version, item.kind, item.name)
            if key in seen:
                c.add(
                    DUPLICATE_ITEM,
                    f"spec.resources.GenericItems[{index}]: {item.kind} "
                    f"{item.name!r} appears twice",
                )
                continue
            seen.add(key)
            items.append(item)
    if c.problems:
        return InvalidAppWrapper(namespace, name, uid, generation, tuple(c.problems))
    total: Resources = {}
    for item in items:
        for ps in item.pod_sets:
            add(total, ps.requests, ps.replicas)
    return AppWrapperSpec(
        namespace=namespace,
        name=name,
        uid=uid,
        generation=generation,
        creation=parse_time(meta.get("creationTimestamp")),
        priority=priority,
        min_available=int(min_available),
        requeuing=requeuing,
        dispatch_limit_seconds=limit,
        items=tuple(items),
        requests=total,
    )
