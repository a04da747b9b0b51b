"""AppWrapper specs: what a valid one requests, and each malformed case named by its field."""

from __future__ import annotations

from typing import Any

import pytest
from tests.dispatcher.unit_support import appwrapper_raw as _aw

from clearance_dispatcher import appwrapper as aw_mod
from clearance_dispatcher.appwrapper import AppWrapperSpec, InvalidAppWrapper, parse_appwrapper


def test_valid_job_appwrapper_requests_are_parallelism_times_pod_requests() -> None:
    spec = parse_appwrapper(_aw(parallelism=3, cpu="500m"))
    assert isinstance(spec, AppWrapperSpec)
    assert spec.requests == {"cpu": 1500, "memory": 3 * 64 * 2**20}
    assert spec.expected_pods == 3
    assert spec.items[0].completion_status == ("Complete",)


def test_custompodresources_win_over_the_template() -> None:
    spec = parse_appwrapper(_aw(parallelism=2, cpu="100m", custom_cpu="2"))
    assert isinstance(spec, AppWrapperSpec)
    assert spec.requests["cpu"] == 4000


def _invalid(raw: dict[str, Any]) -> InvalidAppWrapper:
    result = parse_appwrapper(raw)
    assert isinstance(result, InvalidAppWrapper), result
    return result


def _template(raw: dict[str, Any]) -> dict[str, Any]:
    return raw["spec"]["resources"]["GenericItems"][0]["generictemplate"]  # type: ignore[no-any-return]


def test_no_generic_items_is_invalid() -> None:
    raw = _aw()
    raw["spec"]["resources"]["GenericItems"] = []
    assert _invalid(raw).reason == aw_mod.NO_GENERIC_ITEMS


@pytest.mark.parametrize(
    ("remove", "reason"),
    [("kind", aw_mod.MISSING_KIND), ("apiVersion", aw_mod.MISSING_API_VERSION)],
)
def test_template_without_kind_or_api_version_is_invalid(remove: str, reason: str) -> None:
    raw = _aw()
    del _template(raw)[remove]
    bad = _invalid(raw)
    assert bad.reason == reason
    assert "GenericItems[0].generictemplate" in bad.message


def test_template_without_name_is_invalid() -> None:
    raw = _aw()
    del _template(raw)["metadata"]["name"]
    assert _invalid(raw).reason == aw_mod.MISSING_NAME


def test_negative_min_available_is_invalid() -> None:
    assert _invalid(_aw(min_available=-1)).reason == aw_mod.NEGATIVE_MIN_AVAILABLE


def test_unparsable_quantities_are_invalid_in_template_and_custom_resources() -> None:
    assert _invalid(_aw(cpu="lots")).reason == aw_mod.INVALID_QUANTITY
    bad = _invalid(_aw(custom_cpu="1x"))
    assert bad.reason == aw_mod.INVALID_QUANTITY and "custompodresources[0]" in bad.message


def test_bad_requeuing_fields_are_named() -> None:
    bad = _invalid(_aw(requeuing={"growthType": "cubic", "timeInSeconds": "soon"}))
    assert "growthType" in bad.message and "timeInSeconds" in bad.message


def test_garbage_never_raises() -> None:
    for raw in (
        {},
        {"spec": None},
        {"spec": {"resources": {"GenericItems": [None, 3, "x"]}}},
        {"metadata": [], "spec": {"schedulingSpec": "x"}},
    ):
        assert isinstance(parse_appwrapper(raw), InvalidAppWrapper)


INT64_MAX = 2**63 - 1


def _set(raw: dict[str, Any], path: str, value: object) -> None:
    """Set a dotted ``spec...`` path (``replicas`` is the Job's parallelism)."""
    if path == "replicas":
        _template(raw)["spec"]["parallelism"] = value
        return
    keys = path.split(".")
    node = raw
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value


@pytest.mark.parametrize("path", sorted(aw_mod.SPEC_BOUNDS))
def test_int64_max_in_any_bounded_field_is_out_of_range_naming_field_and_range(path: str) -> None:
    raw = _aw()
    _set(raw, path, INT64_MAX)
    bad = _invalid(raw)
    assert bad.reason == aw_mod.OUT_OF_RANGE, bad
    shown = "spec.resources.GenericItems[0].generictemplate.spec.parallelism"
    assert (shown if path == "replicas" else path) in bad.message
    assert f"is outside {aw_mod.SPEC_BOUNDS[path]}" in bad.message


def test_a_duration_past_30_days_is_refused_and_30_days_is_accepted() -> None:
    field = "spec.schedulingSpec.requeuing.timeInSeconds"
    raw = _aw()
    _set(raw, field, 30 * 86400 + 1)
    assert "is outside 0s..30d" in _invalid(raw).message
    _set(raw, field, 30 * 86400)
    assert isinstance(parse_appwrapper(raw), AppWrapperSpec)


def test_an_integer_beyond_any_float_is_refused_not_raised() -> None:
    raw = _aw()
    _set(raw, "spec.schedulingSpec.requeuing.stuckAlertTimeInSeconds", 10**400)
    assert _invalid(raw).reason == aw_mod.OUT_OF_RANGE


def test_a_template_naming_another_namespace_is_refused_naming_both() -> None:
    raw = _aw()
    _template(raw)["metadata"]["namespace"] = "elsewhere"
    bad = _invalid(raw)
    assert bad.reason == aw_mod.NAMESPACE_MISMATCH
    assert "generictemplate.metadata.namespace" in bad.message and "'elsewhere'" in bad.message
    _template(raw)["metadata"]["namespace"] = "ns"  # its own namespace is fine
    assert isinstance(parse_appwrapper(raw), AppWrapperSpec)
