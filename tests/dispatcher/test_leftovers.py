"""Which objects hold a dispatch back (clearance_dispatcher.leftovers.judge, pure)."""

from __future__ import annotations

from typing import Any

import msgspec
from tests.dispatcher.unit_support import appwrapper_raw

from clearance import labels
from clearance_dispatcher.appwrapper import AppWrapperSpec, parse_appwrapper
from clearance_dispatcher.leftovers import ObjectMeta as _Meta
from clearance_dispatcher.leftovers import judge


def _spec() -> AppWrapperSpec:
    spec = parse_appwrapper(appwrapper_raw())
    assert isinstance(spec, AppWrapperSpec)
    return spec


def _meta(*, uid: str | None, attempt: int | None, **extra: Any) -> _Meta:
    lbls = {}
    if attempt is not None:
        lbls = labels.stamp(appwrapper="aw", namespace="ns", attempt=attempt, uid=uid)
    return msgspec.convert({"name": "x", "uid": "o-1", "labels": lbls, **extra}, _Meta)


def test_this_attempts_own_live_object_does_not_hold_the_dispatch() -> None:
    assert judge(_meta(uid="u-1", attempt=2), spec=_spec(), attempt=2, by_name=True) is None


def test_an_older_attempt_of_the_same_appwrapper_holds_it() -> None:
    verdict = judge(_meta(uid="u-1", attempt=1), spec=_spec(), attempt=2, by_name=False)
    assert verdict is not None and "attempt 1 of this AppWrapper" in verdict[1]


def test_an_earlier_incarnations_held_object_holds_it_with_finalizers_named() -> None:
    meta = _meta(
        uid="old-uid",
        attempt=1,
        deletionTimestamp="2026-01-01T00:00:00Z",
        finalizers=["x.dev/hold"],
    )
    verdict = judge(meta, spec=_spec(), attempt=1, by_name=False)
    assert verdict is not None and verdict[0] == "old-uid"
    assert "earlier AppWrapper" in verdict[1] and "held by finalizers x.dev/hold" in verdict[1]


def test_an_earlier_incarnation_is_known_by_its_owner_reference_without_the_uid_label() -> None:
    meta = _meta(uid=None, attempt=None, ownerReferences=[{"kind": "AppWrapper", "uid": "old"}])
    verdict = judge(meta, spec=_spec(), attempt=1, by_name=True)
    assert verdict is not None and verdict[0] == "old"


def test_a_foreign_object_under_an_items_name_holds_it_but_not_when_only_labelled() -> None:
    foreign = _meta(uid=None, attempt=None)
    verdict = judge(foreign, spec=_spec(), attempt=1, by_name=True)
    assert verdict is not None and "not created by Clearance" in verdict[1]
    assert judge(foreign, spec=_spec(), attempt=1, by_name=False) is None
