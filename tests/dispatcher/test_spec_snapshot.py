"""The dispatcher judges a stored spec with the watcher's snapshot type itself, so a spec the
watcher cannot decode fails the AppWrapper whichever read of it reaches the dispatcher first."""

from __future__ import annotations

from clearance_dispatcher.intake import spec_snapshot_problem


def test_a_spec_that_does_not_decode_into_the_snapshot_is_an_invalid_field_naming_it() -> None:
    problem = spec_snapshot_problem(
        {"spec": {"schedulingSpec": {"requeuing": {"growthType": False}}}}
    )
    assert problem is not None
    assert problem.reason == "InvalidField"
    assert problem.message.startswith("spec.schedulingSpec.requeuing.growthType: Expected")


def test_a_spec_that_decodes_has_no_snapshot_problem() -> None:
    assert spec_snapshot_problem({"spec": {"schedulingSpec": {"minAvailable": 1}}}) is None
    assert spec_snapshot_problem({"metadata": {"name": "no-spec"}}) is None
