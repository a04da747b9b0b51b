"""The drift rules (pure): corrected only toward the declaration, replicas never reduced."""

from __future__ import annotations

from dataclasses import replace

from nats.js import api

from clearance.bus import StreamSpec, plan_stream

SPEC = StreamSpec("S", ("s.>",), max_age=600.0, replicas=3, description="declared")


def test_a_stream_as_declared_needs_no_update() -> None:
    assert plan_stream(SPEC, SPEC.to_config()).update is None


def test_fewer_replicas_than_declared_are_scaled_up() -> None:
    plan = plan_stream(SPEC, replace(SPEC.to_config(), num_replicas=1))
    assert plan.update is not None and plan.update.num_replicas == 3
    assert plan.corrected == ("num_replicas: 1 -> 3",)


def test_more_replicas_than_declared_are_kept_and_reported() -> None:
    r1 = replace(SPEC, replicas=1)
    plan = plan_stream(r1, SPEC.to_config())
    assert plan.update is None
    assert [k.split(":")[0] for k in plan.kept] == ["num_replicas"]


def test_other_drift_is_corrected_without_touching_replicas() -> None:
    r1 = replace(SPEC, replicas=1)
    plan = plan_stream(r1, replace(SPEC.to_config(), max_age=60.0, subjects=["old.>"]))
    assert plan.update is not None
    assert plan.update.num_replicas == 3
    assert plan.update.max_age == 600.0 and plan.update.subjects == ["s.>"]


def test_immutable_fields_are_reported_not_changed() -> None:
    found = replace(SPEC.to_config(), storage=api.StorageType.MEMORY)
    plan = plan_stream(SPEC, found)
    assert plan.update is None
    assert [k.split(":")[0] for k in plan.kept] == ["storage"]
