"""Benchmark latencies come from server timestamps and cannot be negative by construction."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from clearance import labels
from support.serverclock import (
    Commit,
    cycle_commits,
    removed_to_created,
    removed_to_stored,
    stored_to_created,
)


def commit(rv: int, at: float, type_: str, attempt: int, *, aw: str = "aw") -> Commit:
    stamped = labels.stamp(appwrapper=aw, namespace="default", attempt=attempt)
    return Commit.from_json(
        {"rv": str(rv), "time": at, "type": type_, "kind": "Pod", "name": f"{aw}-{attempt}",
         "labels": stamped, "userAgent": "kubesim"}
    )  # fmt: skip


def test_removal_to_next_attempt_is_the_difference_of_commit_times() -> None:
    history = [
        commit(10, 100.000, "ADDED", 1),
        commit(11, 100.500, "DELETED", 1),
        commit(12, 100.530, "ADDED", 2),
    ]
    timed = removed_to_created(cycle_commits(history))
    assert [round(v, 3) for v in timed.values] == [30.0]
    assert timed.out_of_order == []


def test_next_attempt_committed_before_the_removal_is_a_violation_not_a_latency() -> None:
    history = [
        commit(10, 100.000, "ADDED", 1),
        commit(11, 100.100, "ADDED", 2),
        commit(12, 100.500, "DELETED", 1),
    ]
    timed = removed_to_created(cycle_commits(history))
    assert timed.values == []
    assert len(timed.out_of_order) == 1


def test_a_store_time_before_the_commit_is_a_clock_order_error() -> None:
    commits = cycle_commits([commit(11, 100.5, "DELETED", 1), commit(12, 100.6, "ADDED", 2)])
    early = removed_to_stored(commits, {("aw", 1): 100.4})
    late = stored_to_created(commits, {("aw", 1): 100.7})
    assert early.values == [] and len(early.out_of_order) == 1
    assert late.values == [] and len(late.out_of_order) == 1


_histories = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=1e4, allow_nan=False),
        st.sampled_from(["ADDED", "DELETED"]),
        st.integers(min_value=1, max_value=4),
        st.sampled_from(["a", "b"]),
    ),
    max_size=40,
)


_stored = st.dictionaries(
    st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 4)),
    st.floats(min_value=0, max_value=1e4, allow_nan=False),
)


@given(_histories, _stored)
def test_no_interval_is_ever_negative_whatever_the_history(
    rows: list[tuple[float, str, int, str]], stored: dict[tuple[str, int], float]
) -> None:
    history = [commit(rv, at, t, a, aw=aw) for rv, (at, t, a, aw) in enumerate(rows, start=1)]
    commits = cycle_commits(history)
    for timed in (
        removed_to_created(commits),
        removed_to_stored(commits, stored),
        stored_to_created(commits, stored),
    ):
        assert all(v >= 0 for v in timed.values)
