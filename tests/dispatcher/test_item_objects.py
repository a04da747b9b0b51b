"""The object created for a generic item: labels on it and on its pod template, owner, namespace."""

from __future__ import annotations

from tests.dispatcher.unit_support import appwrapper_raw as _aw

from clearance import labels
from clearance_dispatcher.appwrapper import AppWrapperSpec, parse_appwrapper
from clearance_dispatcher.dispatching import build_object


def test_build_object_stamps_labels_owner_and_pod_template() -> None:
    spec = parse_appwrapper(_aw())
    assert isinstance(spec, AppWrapperSpec)
    obj = build_object(
        spec.items[0], spec, attempt=3, aw_api_version="workload.codeflare.dev/v1beta1"
    )
    want = labels.stamp(appwrapper="aw", namespace="ns", attempt=3)
    assert want.items() <= obj["metadata"]["labels"].items()
    assert want.items() <= obj["spec"]["template"]["metadata"]["labels"].items()
    assert obj["metadata"]["namespace"] == "ns"
    (owner,) = obj["metadata"]["ownerReferences"]
    assert owner["uid"] == "u-1" and owner["kind"] == "AppWrapper"
    assert "labels" not in spec.items[0].template["metadata"]  # template untouched
