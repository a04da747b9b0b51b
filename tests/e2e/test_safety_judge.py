"""The Safety judge of the e2e scenarios, on hand-written write histories (no stack).

:func:`coexistence_violations` must catch an attempt-2 object created while an attempt-1 object
still exists, and :func:`attempts_from_history` must classify every labelled kind from the
commits' labels alone; otherwise the scenarios' ``safety == []`` could never fail.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from e2e_support import Write, attempts_from_history, coexistence_violations

from clearance import labels


def _w(rv: int, type_: str, kind: str, name: str, uid: str, attempt: int | None) -> Write:
    stamp = labels.stamp(appwrapper="train", namespace="default", attempt=attempt or 1)
    if attempt is None:
        stamp = {}
    return Write(rv=rv, type=type_, kind=kind, name=name, uid=uid, labels=stamp)


HISTORY = [
    _w(1, "ADDED", "PyTorchJob", "train", "job-1", 1),
    _w(2, "ADDED", "Pod", "train-worker-1", "w1-a", 1),
    _w(3, "ADDED", "Service", "train-master-0", "svc", None),  # the operator's, unlabelled
    _w(4, "DELETED", "PyTorchJob", "train", "job-1", 1),
    _w(5, "MODIFIED", "Pod", "train-worker-1", "w1-a", 1),
]


def test_an_attempt_2_pod_created_while_an_attempt_1_pod_exists_is_a_violation() -> None:
    history = [*HISTORY, _w(6, "ADDED", "Pod", "train-worker-1", "w1-b", 2)]
    found = coexistence_violations(history, attempts_from_history(history, "train"))
    assert len(found) == 1
    assert (
        "Pod train-worker-1 of attempt 2 created while Pod train-worker-1 (attempt 1)" in found[0]
    )


def test_an_attempt_2_pod_created_after_the_last_old_object_went_is_safe() -> None:
    history = [
        *HISTORY,
        _w(6, "DELETED", "Pod", "train-worker-1", "w1-a", 1),
        _w(7, "ADDED", "PyTorchJob", "train", "job-2", 2),
        _w(8, "ADDED", "Pod", "train-worker-1", "w1-b", 2),
    ]
    assert coexistence_violations(history, attempts_from_history(history, "train")) == []


def test_history_classifies_labelled_objects_of_any_kind_and_skips_others() -> None:
    attempts = attempts_from_history(
        [*HISTORY, _w(6, "ADDED", "ReplicaSet", "web-5d4", "rs", 3)], "train"
    )
    assert attempts == {"job-1": 1, "w1-a": 1, "rs": 3}
