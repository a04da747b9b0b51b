"""Issue 13 Build 2: AppWrapper names of any legal length (253 characters) are indexed."""

from __future__ import annotations

import msgspec
from tests.dispatcher.unit_support import appwrapper_raw

from clearance import labels
from clearance.events import PodObject
from clearance_dispatcher.state import ClusterState

LONG = "l" * 253


def _pod(uid: str, *, appwrapper: str) -> PodObject:
    raw = {
        "metadata": {
            "name": f"pod-{uid}",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": "1",
            "labels": labels.stamp(appwrapper=appwrapper, namespace="ns", attempt=1),
        },
        "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Running"},
    }
    return msgspec.convert(raw, PodObject)


def test_a_pod_labelled_with_a_hashed_name_is_counted_for_its_appwrapper() -> None:
    state = ClusterState()
    raw = appwrapper_raw()
    raw["metadata"]["name"] = LONG
    key = state.apply_appwrapper(raw)
    assert key == ("ns", LONG)
    assert state.apply_pod(_pod("p1", appwrapper=LONG)) == key
    assert state.counts(key, 1).running == 1
    assert state.remove_pod("p1") == key
    assert state.counts(key, 1).running == 0
