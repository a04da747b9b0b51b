"""The relist diff: what a fresh LIST means given what the informer reported before it."""

from __future__ import annotations

import msgspec

from clearance.informing import Known, diff_relist, meta_of


def obj(uid: str, name: str, rv: str) -> msgspec.Raw:
    body = {"metadata": {"uid": uid, "name": name, "namespace": "ns", "resourceVersion": rv}}
    return msgspec.Raw(msgspec.json.encode(body))


def known(*raws: msgspec.Raw) -> dict[str, Known]:
    return {meta_of(r).uid: Known(meta_of(r), r) for r in raws}


def test_first_list_reports_every_object_as_added() -> None:
    changes = diff_relist({}, [obj("u1", "a", "5"), obj("u2", "b", "6")])
    assert [(c.action, c.meta.uid, c.inferred) for c in changes] == [
        ("ADDED", "u1", False),
        ("ADDED", "u2", False),
    ]


def test_object_gone_during_gap_yields_inferred_tombstone_with_last_state() -> None:
    last = obj("u1", "a", "5")
    changes = diff_relist(known(last), [])
    assert len(changes) == 1
    assert changes[0].action == "DELETED"
    assert changes[0].inferred
    assert changes[0].raw == last
    assert changes[0].meta.resourceVersion == "5"


def test_unchanged_object_is_not_reported_again() -> None:
    same = obj("u1", "a", "5")
    assert diff_relist(known(same), [same]) == []


def test_object_changed_during_gap_is_reported_modified() -> None:
    changes = diff_relist(known(obj("u1", "a", "5")), [obj("u1", "a", "9")])
    assert [(c.action, c.meta.resourceVersion) for c in changes] == [("MODIFIED", "9")]


def test_reused_name_reports_old_tombstone_before_new_object() -> None:
    changes = diff_relist(known(obj("old", "pod-1", "5")), [obj("new", "pod-1", "12")])
    assert [(c.action, c.meta.uid, c.inferred) for c in changes] == [
        ("DELETED", "old", True),
        ("ADDED", "new", False),
    ]
