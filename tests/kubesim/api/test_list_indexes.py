"""LISTs served from indexes and remembered encodings answer exactly what a full scan does."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from kubesim.apiserver.http import encode
from kubesim.registry import Registry
from kubesim.resources import ResourceRegistry
from kubesim.selectors import build_matcher
from kubesim.store import Store

KEYS = ("app", "tier", "clearance.dev/attempt")
VALUES = ("a", "b", "1")
SELECTORS = (
    "app=a",
    "app==b",
    "app=a,tier=b",
    "app in (a)",
    "app in (a,b)",
    "app=a,tier!=b",
    "app=a,!tier",
    "clearance.dev/attempt=1,app",
    "tier notin (a)",
    "app=zzz",
)

labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALUES), max_size=3)
step_st = st.tuples(
    st.sampled_from(("put", "delete")),
    st.sampled_from(("ns1", "ns2")),
    st.integers(0, 5),
    labels_st,
)


def _configmap(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {}}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(step_st, max_size=40),
    st.sampled_from(SELECTORS),
    st.sampled_from((None, "ns1")),
    st.integers(0, 3),
)
def test_a_list_by_label_matches_a_scan_of_every_object_after_any_writes(
    steps: list[tuple[str, str, int, dict[str, str]]],
    selector: str,
    namespace: str | None,
    limit: int,
) -> None:
    store = Store()
    resources = ResourceRegistry()
    registry = Registry(store, resources)
    rt = resources.lookup("", "v1", "configmaps")
    assert rt is not None
    for action, ns, slot, labels in steps:
        if action == "put":
            store.put(rt.key, _configmap(ns, f"cm{slot}", labels))
        else:
            store.delete(rt.key, ns, f"cm{slot}")
    match = build_matcher(rt, selector, "")
    assert match is not None
    scanned = sorted(
        (o["metadata"]["namespace"], o["metadata"]["name"])
        for o in store.items(rt.key, namespace)
        if match(o)
    )
    listed: list[tuple[str, str]] = []
    token = ""
    while True:  # every page, so the continue tokens are exercised too
        page = registry.list_objects(
            rt, namespace, label_selector=selector, limit=limit, continue_token=token
        )
        listed += [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert listed == scanned


@settings(max_examples=100, deadline=None)
@given(st.lists(step_st, min_size=1, max_size=40), st.sampled_from((None, "ns1")))
def test_a_list_answer_from_remembered_items_is_byte_for_byte_a_fresh_encoding(
    steps: list[tuple[str, str, int, dict[str, str]]], namespace: str | None
) -> None:
    store = Store()
    resources = ResourceRegistry()
    registry = Registry(store, resources)
    rt = resources.lookup("", "v1", "configmaps")
    assert rt is not None
    for action, ns, slot, labels in steps:
        if action == "put":
            store.put(rt.key, _configmap(ns, f"cm{slot}", labels))
        else:
            store.delete(rt.key, ns, f"cm{slot}")
        # Listing after every write: remembered items of replaced objects must not be served.
        fresh = encode(registry.list_objects(rt, namespace))
        assert encode(registry.list_objects(rt, namespace, encoded=True)) == fresh


def test_a_deleted_objects_remembered_list_item_is_forgotten_with_it() -> None:
    store = Store()
    resources = ResourceRegistry()
    registry = Registry(store, resources)
    rt = resources.lookup("", "v1", "configmaps")
    assert rt is not None
    store.put(rt.key, _configmap("ns1", "cm", {"app": "a"}))
    registry.list_objects(rt, "ns1", encoded=True)
    assert registry.list_items._items
    store.delete(rt.key, "ns1", "cm")
    assert not registry.list_items._items
