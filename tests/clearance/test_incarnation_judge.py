"""The Incarnations judge (tests/support/incarnations.py) on hand-written write histories."""

from __future__ import annotations

from typing import Any

from tests.support.incarnations import incarnation_violations


def _w(rv: int, type_: str, kind: str, name: str, uid: str, *owners: str) -> dict[str, Any]:
    return {
        "rv": str(rv),
        "type": type_,
        "kind": kind,
        "namespace": "ns",
        "name": name,
        "uid": uid,
        "owners": list(owners),
    }


def _resubmission(*, config_gone_first: bool) -> list[dict[str, Any]]:
    history = [
        _w(1, "ADDED", "AppWrapper", "again", "aw-1"),
        _w(2, "ADDED", "ConfigMap", "again-cfg", "cm-1", "aw-1"),
        _w(3, "ADDED", "Job", "again-job", "job-1", "aw-1"),
        _w(4, "ADDED", "Pod", "again-job-x", "pod-1", "job-1"),
        _w(5, "DELETED", "AppWrapper", "again", "aw-1"),
        _w(6, "DELETED", "Pod", "again-job-x", "pod-1", "job-1"),
        _w(7, "DELETED", "Job", "again-job", "job-1", "aw-1"),
        _w(8, "ADDED", "AppWrapper", "again", "aw-2"),
    ]
    if config_gone_first:
        history.append(_w(9, "DELETED", "ConfigMap", "again-cfg", "cm-1", "aw-1"))
    history.append(_w(10, "ADDED", "Job", "again-job", "job-2", "aw-2"))
    history.append(_w(11, "ADDED", "Pod", "again-job-y", "pod-2", "job-2"))
    return history


def test_a_new_incarnation_created_beside_the_old_configmap_is_reported() -> None:
    found = incarnation_violations(_resubmission(config_gone_first=False))
    assert len(found) == 2, found  # the Job and, through it, its pod
    assert "Job again-job" in found[0] and "ConfigMap again-cfg" in found[0]
    assert "Pod again-job-y" in found[1]


def test_a_new_incarnation_created_after_the_old_objects_went_is_fine() -> None:
    assert incarnation_violations(_resubmission(config_gone_first=True)) == []
