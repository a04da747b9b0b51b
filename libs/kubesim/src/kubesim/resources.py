"""The catalogue of resource types the simulator serves, built-in and CRD-defined.

Every handler decision that depends on "what kind of thing is this" (scope, subresources,
field-selector labels, unconditional updates, default GC policy, which schema validates it)
reads it from a :class:`ResourceType`, so the handlers stay generic.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

GcPolicy = Literal["orphan", "delete", "unsupported"]

COMMON_VERBS: tuple[str, ...] = (
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
)
STATUS_VERBS: tuple[str, ...] = ("get", "patch", "update")
METADATA_FIELDS: frozenset[str] = frozenset({"metadata.name", "metadata.namespace"})


@dataclass(frozen=True, slots=True)
class ResourceType:
    """One REST resource (a plural under a group/version)."""

    group: str
    version: str
    plural: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # subresource name -> verbs
    subresources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    field_labels: frozenset[str] = METADATA_FIELDS
    # PUT without metadata.resourceVersion overwrites (built-ins); CRs answer 422 instead.
    unconditional_update: bool = True
    # PUT of a missing object creates it (events, leases, ...).
    create_on_update: bool = False
    # metadata.generation maintained; "spec" = bump on spec change, "nonmeta" = CR rule.
    generation: Literal["none", "spec", "nonmeta"] = "none"
    default_gc: GcPolicy = "delete"
    # Pods only: graceful deletion strategy.
    graceful_delete: bool = False
    # DELETE answers the object (ReturnDeletedObject) rather than a Status.
    return_deleted_object: bool = False
    # Key into the kubernetes-validate definitions (built-ins); None for CRs.
    definition: str | None = None
    custom: bool = False
    # CRD openAPIV3Schema for this version (CRs only).
    schema: dict[str, Any] | None = field(default=None, compare=False, hash=False)
    # CRD additionalPrinterColumns: (name, type, jsonPath, priority).
    printer_columns: tuple[tuple[str, str, str, int], ...] = ()
    # Other served versions that share this storage (CRDs), storage version first.
    storage_key: tuple[str, str] = ("", "")

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def group_resource(self) -> str:
        """`pods` for core, `appwrappers.workload.codeflare.dev` otherwise (error messages)."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def has_status(self) -> bool:
        return any(name == "status" for name, _ in self.subresources)

    def has_subresource(self, name: str) -> bool:
        return any(sub == name for sub, _ in self.subresources)

    @property
    def key(self) -> tuple[str, str]:
        """Storage key: all versions of one group/plural share objects."""
        return self.storage_key if self.storage_key != ("", "") else (self.group, self.plural)


_STATUS = (("status", STATUS_VERBS),)
_POD_FIELDS = METADATA_FIELDS | {
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
}
_EVENT_FIELDS = METADATA_FIELDS | {
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
}


def _core(plural: str, singular: str, kind: str, namespaced: bool, **kw: Any) -> ResourceType:
    return ResourceType(
        group="",
        version="v1",
        plural=plural,
        singular=singular,
        kind=kind,
        namespaced=namespaced,
        definition=f"io.k8s.api.core.v1.{kind}",
        **kw,
    )


def _grouped(
    group: str, pkg: str, plural: str, singular: str, kind: str, namespaced: bool, **kw: Any
) -> ResourceType:
    return ResourceType(
        group=group,
        version="v1",
        plural=plural,
        singular=singular,
        kind=kind,
        namespaced=namespaced,
        definition=f"io.k8s.api.{pkg}.v1.{kind}",
        **kw,
    )


BUILTIN_TYPES: tuple[ResourceType, ...] = (
    _core(
        "namespaces",
        "namespace",
        "Namespace",
        False,
        short_names=("ns",),
        subresources=(("finalize", ("update",)), *_STATUS),
        field_labels=frozenset({"metadata.name", "status.phase"}),
        return_deleted_object=True,
    ),
    _core(
        "nodes",
        "node",
        "Node",
        False,
        short_names=("no",),
        subresources=_STATUS,
        field_labels=METADATA_FIELDS | {"spec.unschedulable"},
    ),
    _core(
        "pods",
        "pod",
        "Pod",
        True,
        short_names=("po",),
        categories=("all",),
        subresources=(("binding", ("create",)), ("eviction", ("create",)), *_STATUS),
        field_labels=frozenset(_POD_FIELDS),
        graceful_delete=True,
        return_deleted_object=True,
    ),
    _core(
        "events",
        "event",
        "Event",
        True,
        short_names=("ev",),
        field_labels=frozenset(_EVENT_FIELDS),
        create_on_update=True,
    ),
    _core("configmaps", "configmap", "ConfigMap", True, short_names=("cm",)),
    _core(
        "secrets",
        "secret",
        "Secret",
        True,
        field_labels=METADATA_FIELDS | {"type"},
    ),
    _core(
        "services",
        "service",
        "Service",
        True,
        short_names=("svc",),
        categories=("all",),
        subresources=_STATUS,
    ),
    _core("serviceaccounts", "serviceaccount", "ServiceAccount", True, short_names=("sa",)),
    _grouped(
        "coordination.k8s.io",
        "coordination",
        "leases",
        "lease",
        "Lease",
        True,
        create_on_update=True,
    ),
    _grouped(
        "batch",
        "batch",
        "jobs",
        "job",
        "Job",
        True,
        categories=("all",),
        subresources=_STATUS,
        field_labels=METADATA_FIELDS | {"status.successful"},
        generation="spec",
        default_gc="orphan",
    ),
    _grouped(
        "apps",
        "apps",
        "deployments",
        "deployment",
        "Deployment",
        True,
        short_names=("deploy",),
        categories=("all",),
        subresources=_STATUS,
        generation="spec",
    ),
    _grouped(
        "apps",
        "apps",
        "statefulsets",
        "statefulset",
        "StatefulSet",
        True,
        short_names=("sts",),
        categories=("all",),
        subresources=_STATUS,
        generation="spec",
    ),
    _grouped(
        "apps",
        "apps",
        "replicasets",
        "replicaset",
        "ReplicaSet",
        True,
        short_names=("rs",),
        categories=("all",),
        subresources=_STATUS,
        generation="spec",
    ),
    _grouped(
        "apps",
        "apps",
        "daemonsets",
        "daemonset",
        "DaemonSet",
        True,
        short_names=("ds",),
        categories=("all",),
        subresources=_STATUS,
        generation="spec",
    ),
    _grouped("rbac.authorization.k8s.io", "rbac", "roles", "role", "Role", True),
    _grouped(
        "rbac.authorization.k8s.io", "rbac", "rolebindings", "rolebinding", "RoleBinding", True
    ),
    _grouped(
        "rbac.authorization.k8s.io", "rbac", "clusterroles", "clusterrole", "ClusterRole", False
    ),
    _grouped(
        "rbac.authorization.k8s.io",
        "rbac",
        "clusterrolebindings",
        "clusterrolebinding",
        "ClusterRoleBinding",
        False,
    ),
    _grouped(
        "policy",
        "policy",
        "poddisruptionbudgets",
        "poddisruptionbudget",
        "PodDisruptionBudget",
        True,
        short_names=("pdb",),
        subresources=_STATUS,
        generation="spec",
    ),
    _grouped(
        "networking.k8s.io",
        "networking",
        "networkpolicies",
        "networkpolicy",
        "NetworkPolicy",
        True,
        short_names=("netpol",),
        generation="spec",
    ),
    ResourceType(
        group="apiextensions.k8s.io",
        version="v1",
        plural="customresourcedefinitions",
        singular="customresourcedefinition",
        kind="CustomResourceDefinition",
        namespaced=False,
        short_names=("crd", "crds"),
        subresources=_STATUS,
        generation="spec",
        definition="io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition",
    ),
)

CRD_TYPE = BUILTIN_TYPES[-1]
NAMESPACE_TYPE = BUILTIN_TYPES[0]
POD_TYPE = BUILTIN_TYPES[2]


class ResourceRegistry:
    """Resource types by group/version/plural; CRD types come and go at run time."""

    def __init__(self, types: Iterable[ResourceType] = BUILTIN_TYPES) -> None:
        self._types: dict[tuple[str, str, str], ResourceType] = {}
        # group -> ordered versions (preferred first)
        self._group_versions: dict[str, list[str]] = {}
        self._crd_owned: dict[str, list[tuple[str, str, str]]] = {}
        self.generation = 0
        for rt in types:
            self.add(rt)

    def add(self, rt: ResourceType) -> None:
        self._types[(rt.group, rt.version, rt.plural)] = rt
        versions = self._group_versions.setdefault(rt.group, [])
        if rt.version not in versions:
            versions.append(rt.version)
        self.generation += 1

    def lookup(self, group: str, version: str, plural: str) -> ResourceType | None:
        return self._types.get((group, version, plural))

    def by_kind(self, group: str, version: str, kind: str) -> ResourceType | None:
        for rt in self._types.values():
            if rt.group == group and rt.version == version and rt.kind == kind:
                return rt
        return None

    def versions(self, group: str) -> list[str]:
        return list(self._group_versions.get(group, []))

    def groups(self) -> list[str]:
        return [g for g in self._group_versions if g and self._group_versions[g]]

    def in_group_version(self, group: str, version: str) -> list[ResourceType]:
        return [rt for rt in self._types.values() if rt.group == group and rt.version == version]

    def __iter__(self) -> Iterator[ResourceType]:
        return iter(list(self._types.values()))

    # ---- CRDs -------------------------------------------------------------------------

    def set_crd_types(self, crd_name: str, types: list[ResourceType], preferred: str) -> None:
        """Replace the types served for one CRD (register, update, or remove with [])."""
        for key in self._crd_owned.pop(crd_name, []):
            self._types.pop(key, None)
            group, version, _ = key
            if not any(k[0] == group and k[1] == version for k in self._types):
                versions = self._group_versions.get(group, [])
                if version in versions:
                    versions.remove(version)
                if not versions:
                    self._group_versions.pop(group, None)
        owned: list[tuple[str, str, str]] = []
        for rt in types:
            self._types[(rt.group, rt.version, rt.plural)] = rt
            owned.append((rt.group, rt.version, rt.plural))
            versions = self._group_versions.setdefault(rt.group, [])
            if rt.version not in versions:
                versions.append(rt.version)
        if types:
            versions = self._group_versions[types[0].group]
            if preferred in versions:
                versions.remove(preferred)
                versions.insert(0, preferred)
            self._crd_owned[crd_name] = owned
        self.generation += 1


def crd_resource_types(crd: dict[str, Any]) -> tuple[list[ResourceType], str]:
    """The served ResourceTypes of a CRD object, and its storage (preferred) version."""
    spec = crd.get("spec") or {}
    names = spec.get("names") or {}
    group = str(spec.get("group", ""))
    plural = str(names.get("plural", ""))
    kind = str(names.get("kind", ""))
    namespaced = spec.get("scope", "Namespaced") == "Namespaced"
    storage = ""
    out: list[ResourceType] = []
    for v in spec.get("versions") or []:
        if v.get("storage"):
            storage = str(v.get("name"))
    for v in spec.get("versions") or []:
        if not v.get("served", True):
            continue
        subs: list[tuple[str, tuple[str, ...]]] = []
        if "status" in (v.get("subresources") or {}):
            subs.append(("status", STATUS_VERBS))
        if "scale" in (v.get("subresources") or {}):
            subs.append(("scale", STATUS_VERBS))
        schema = ((v.get("schema") or {}).get("openAPIV3Schema")) or None
        selectable = frozenset(
            str(f.get("jsonPath", "")).lstrip(".") for f in v.get("selectableFields") or []
        )
        out.append(
            ResourceType(
                group=group,
                version=str(v.get("name")),
                plural=plural,
                singular=str(names.get("singular") or kind.lower()),
                kind=kind,
                namespaced=namespaced,
                short_names=tuple(names.get("shortNames") or ()),
                categories=tuple(names.get("categories") or ()),
                subresources=tuple(subs),
                field_labels=METADATA_FIELDS | selectable,
                unconditional_update=False,
                generation="nonmeta",
                custom=True,
                schema=schema,
                printer_columns=tuple(
                    (
                        str(c.get("name", "")),
                        str(c.get("type", "string")),
                        str(c.get("jsonPath", "")),
                        int(c.get("priority") or 0),
                    )
                    for c in v.get("additionalPrinterColumns") or []
                ),
                storage_key=(group, plural),
            )
        )
    return out, storage or (out[0].version if out else "")
