"""Resource quantities inside built-in objects: what the API server does to them on every write.

Which fields hold a `resource.Quantity` comes from the real v1.32 schemas (`$ref` to
`io.k8s.apimachinery.pkg.api.resource.Quantity`), so pods, pod templates in Jobs and apps
workloads, nodes, ResourceQuotas, LimitRanges (and any other served built-in) are covered
without a hand-kept list. On create, update, patch and status writes, before defaulting:

* each value is decoded as `Quantity.UnmarshalJSON` does; a malformed one fails the whole
  request with **400 BadRequest** `<Kind> in version "<v>" cannot be handled as a <Kind>:
  quantities must match the regular expression …` (the decode error, not a 422);
* values of a `ResourceList` (a map of quantities: requests, limits, overhead, capacity,
  allocatable, hard, used…) are rounded up to milli scale (core/v1 `SetDefaults_ResourceList`);
* the canonical string is stored (integers and non-canonical strings become `"1"`, `"1Gi"`…).

After defaulting, :func:`validate` applies the ValidateResourceRequirements rules that decide
whether such a pod is accepted (422): non-negative values, whole numbers for extended
resources, requests ≤ limits, requests == limits (and a limit present) for resources that
cannot be overcommitted (`nvidia.com/gpu`, hugepages).

Custom resources are left exactly as sent (reference cluster-faults-and-workloads.md §2).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

from kubesim import schemas, statuses
from kubesim.quantity import Quantity, QuantityError, parse_json
from kubesim.resources import ResourceType
from kubesim.statuses import Cause

__all__ = ["canonicalize", "quantity_tree", "validate"]

_QUANTITY_REF = "io.k8s.apimachinery.pkg.api.resource.Quantity"
_ITEMS = "[]"  # tree key: every list item
_VALUES = "{}"  # tree key: every map value
_MILLI = -3


class _Leaf:
    """Tree leaf: a quantity; `listed` for the values of a ResourceList map."""

    __slots__ = ("listed",)

    def __init__(self, *, listed: bool) -> None:
        self.listed = listed


_PLAIN = _Leaf(listed=False)
_LISTED = _Leaf(listed=True)
Tree = dict[str, "Tree | _Leaf"]


@functools.cache
def quantity_tree(definition: str) -> Tree | None:
    """The paths of a definition that lead to quantities, or None when there are none."""
    node = _tree_of(schemas.definition(definition), frozenset({definition}))
    return node if isinstance(node, dict) else None


def _tree_of(node: schemas.Node | None, visiting: frozenset[str]) -> Tree | _Leaf | None:
    if node is None:
        return None
    ref = node.get("$ref")
    if isinstance(ref, str):
        name = ref.rsplit("/", 1)[-1]
        if name == _QUANTITY_REF:
            return _PLAIN
        if name in visiting:
            return None  # recursive schema (JSONSchemaProps): holds no quantities
        if name in _cached_names:
            return quantity_tree(name)
        return _tree_of(schemas.definition(name), visiting | {name})
    resolved = schemas.resolve(node)
    if resolved is None or resolved is not node:
        return _tree_of(resolved, visiting)
    tree: Tree = {}
    props = node.get("properties")
    if isinstance(props, dict):
        for key, child in props.items():
            sub = _tree_of(child, visiting) if isinstance(child, dict) else None
            if sub is not None:
                tree[key] = sub
    extra = node.get("additionalProperties")
    if isinstance(extra, dict):
        sub = _tree_of(extra, visiting)
        if sub is _PLAIN:
            sub = _LISTED
        if sub is not None:
            tree[_VALUES] = sub
    items = node.get("items")
    if isinstance(items, dict):
        sub = _tree_of(items, visiting)
        if sub is not None:
            tree[_ITEMS] = sub
    return tree or None


# Definitions worth memoizing on their own (shared by many types).
_cached_names = frozenset(
    {
        "io.k8s.api.core.v1.PodSpec",
        "io.k8s.api.core.v1.PodTemplateSpec",
        "io.k8s.api.core.v1.Container",
        "io.k8s.api.core.v1.ResourceRequirements",
    }
)


Found = tuple[dict[str, Any] | list[Any], Any, str, bool]


def _walk(value: Any, tree: Tree, path: str) -> Iterator[Found]:
    """(container, key, field path, listed) for every quantity present in `value`."""
    if isinstance(value, dict):
        for key, sub in tree.items():
            if key == _ITEMS:
                continue
            if key == _VALUES:
                for k in list(value):
                    yield from _visit(value, k, sub, f"{path}[{k}]")
            elif key in value:
                yield from _visit(value, key, sub, f"{path}.{key}" if path else key)
    elif isinstance(value, list) and _ITEMS in tree:
        sub = tree[_ITEMS]
        for i in range(len(value)):
            yield from _visit(value, i, sub, f"{path}[{i}]")


def _visit(
    holder: dict[str, Any] | list[Any], key: Any, sub: Tree | _Leaf, path: str
) -> Iterator[Found]:
    if isinstance(sub, _Leaf):
        yield holder, key, path, sub.listed
    else:
        yield from _walk(holder[key], sub, path)


def _decode_error(rt: ResourceType, message: str) -> statuses.ApiError:
    return statuses.bad_request(
        f'{rt.kind} in version "{rt.version}" cannot be handled as a {rt.kind}: {message}'
    )


def canonicalize(rt: ResourceType, obj: dict[str, Any]) -> None:
    """Decode, round and canonicalize every quantity of a built-in object, in place."""
    if rt.custom or not rt.definition:
        return
    tree = quantity_tree(rt.definition)
    if tree is None:
        return
    for holder, key, _path, listed in list(_walk(obj, tree, "")):
        raw = holder[key]
        if raw is None and not listed:
            continue  # an optional field sent as null: absent
        try:
            if isinstance(raw, str):
                holder[key] = _stored_form(raw, listed=listed)  # the common case, cached
                continue
            quantity = parse_json(raw)
        except QuantityError as exc:
            raise _decode_error(rt, str(exc)) from exc
        if listed:
            quantity = quantity.round_up(_MILLI)
        holder[key] = quantity.canonical()


@functools.lru_cache(maxsize=4096)
def _stored_form(text: str, *, listed: bool) -> str:
    quantity = _parse_text(text)
    return (quantity.round_up(_MILLI) if listed else quantity).canonical()


def _parsed(value: Any) -> Quantity | None:
    try:
        return _parse_text(value) if isinstance(value, str) else parse_json(value)
    except QuantityError:
        return None


@functools.lru_cache(maxsize=4096)
def _parse_text(text: str) -> Quantity:
    return parse_json(text)


def _is_native(name: str) -> bool:
    """`IsNativeResource`: no domain, or a `kubernetes.io` domain."""
    if "/" not in name:
        return True
    domain = name.split("/", 1)[0]
    return domain == "kubernetes.io" or domain.endswith(".kubernetes.io")


def _is_hugepages(name: str) -> bool:
    return name.startswith("hugepages-")


def _overcommit_allowed(name: str) -> bool:
    return _is_native(name) and not _is_hugepages(name)


def _is_integer_resource(name: str) -> bool:
    """`IsIntegerResourceName`: extended resources (and quota object counts)."""
    return not _is_native(name) and not name.startswith("requests.")


def _quantity_causes(name: str, quantity: Quantity, path: str) -> list[Cause]:
    """`ValidateResourceQuantityValue`."""
    causes: list[Cause] = []
    text = quantity.canonical()
    if quantity.mantissa < 0:
        causes.append(statuses.invalid_value(path, text, "must be greater than or equal to 0"))
    if _is_integer_resource(name) and quantity.amount.denominator != 1:
        causes.append(statuses.invalid_value(path, text, "must be an integer"))
    return causes


def _requirements_causes(resources: dict[str, Any], path: str) -> list[Cause]:
    """`ValidateResourceRequirements` for one container's `resources`."""
    causes: list[Cause] = []
    limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
    requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
    assert isinstance(limits, dict) and isinstance(requests, dict)
    parsed_limits: dict[str, Quantity] = {}
    for name, raw in limits.items():
        q = _parsed(raw)
        if q is not None:
            parsed_limits[name] = q
            causes += _quantity_causes(name, q, f"{path}.limits[{name}]")
    for name, raw in requests.items():
        q = _parsed(raw)
        if q is None:
            continue
        causes += _quantity_causes(name, q, f"{path}.requests[{name}]")
        limit = parsed_limits.get(name)
        if limit is not None:
            if q.amount != limit.amount and not _overcommit_allowed(name):
                causes.append(
                    statuses.invalid_value(
                        f"{path}.requests",
                        q.canonical(),
                        f"must be equal to {name} limit of {limit.canonical()}",
                    )
                )
            elif q.amount > limit.amount:
                causes.append(
                    statuses.invalid_value(
                        f"{path}.requests",
                        q.canonical(),
                        f"must be less than or equal to {name} limit of {limit.canonical()}",
                    )
                )
        elif not _overcommit_allowed(name):
            causes.append(
                statuses.required(
                    f"{path}.limits", "Limit must be set for non overcommitable resources"
                )
            )
    return causes


def _pod_specs(rt: ResourceType, obj: dict[str, Any]) -> Iterator[tuple[dict[str, Any], str]]:
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return
    if (rt.group, rt.plural) == ("", "pods"):
        yield spec, "spec"
        return
    template = spec.get("template")
    if isinstance(template, dict) and isinstance(template.get("spec"), dict):
        yield template["spec"], "spec.template.spec"


def validate(rt: ResourceType, obj: dict[str, Any]) -> list[Cause]:
    """422 causes for the quantities of a built-in object (after defaulting)."""
    if rt.custom or not rt.definition or quantity_tree(rt.definition) is None:
        return []
    causes: list[Cause] = []
    container_paths: set[str] = set()
    for pod_spec, prefix in _pod_specs(rt, obj):
        for kind in ("initContainers", "containers", "ephemeralContainers"):
            for i, container in enumerate(pod_spec.get(kind) or []):
                if isinstance(container, dict) and isinstance(container.get("resources"), dict):
                    path = f"{prefix}.{kind}[{i}].resources"
                    container_paths.add(path)
                    causes += _requirements_causes(container["resources"], path)
    tree = quantity_tree(rt.definition)
    assert tree is not None
    for holder, key, path, listed in _walk(obj, tree, ""):
        if not listed or path.rsplit(".", 1)[0] in container_paths:
            continue
        q = _parsed(holder[key])
        if q is not None and q.mantissa < 0:
            causes.append(
                statuses.invalid_value(path, q.canonical(), "must be greater than or equal to 0")
            )
    return causes
