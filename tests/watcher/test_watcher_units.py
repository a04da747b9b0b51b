"""The watcher's pure decisions: relist diff, resume catch-up and position, wrapped kinds."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest

from clearance.events import ObjectMeta, PodObject
from clearance.informing import diff_relist
from clearance.kube import Resource
from clearance.listwatch import Decoded, Identity
from clearance_watcher.decoding import Codec, Reading
from clearance_watcher.kinds import wrapped_by_raw
from clearance_watcher.metrics import _LATENCY_BUCKETS, LoopHistogram
from clearance_watcher.progress import WATCH_KEY_HEADER, WATCH_RESUME_HEADER, Progress
from clearance_watcher.resuming import CatchUp
from clearance_watcher.watching import known_of


def snap(uid: str, name: str, rv: str) -> PodObject:
    return PodObject(metadata=ObjectMeta(name=name, namespace="ns", uid=uid, resource_version=rv))


def test_relist_diff_does_not_tombstone_listed_objects_without_a_publishable_snapshot() -> None:
    known = {"odd": known_of(snap("odd", "p", "5"))}
    unpublishable = Decoded(Identity("odd", "p", "ns", "6"), Reading(None))
    changes = diff_relist(known, [unpublishable])
    assert [c.action for c in changes] == ["MODIFIED"]  # exists: no tombstone
    assert changes[0].item.value.snapshot is None  # ...and nothing the informer publishes


def ident(uid: str, rv: str) -> Identity:
    return Identity(uid, uid, "ns", rv)


def test_resume_waits_for_changes_after_the_start_and_deletions_of_known_objects() -> None:
    catch_up = CatchUp.plan(
        start=10,
        listed=[ident("old", "7"), ident("moved", "12")],
        list_rv="15",
        known=["old", "moved", "gone"],
        deadline=100.0,
    )
    assert catch_up.expected == {("moved", "12"), ("gone", "DELETED")}
    assert not catch_up.saw("moved", "11", deleted=False)  # an intermediate version
    assert not catch_up.saw("moved", "12", deleted=False)
    assert catch_up.saw("gone", "14", deleted=True)
    assert catch_up.done and not catch_up.overdue(1000.0)


def test_resume_is_complete_at_a_bookmark_past_the_list_even_if_a_change_was_superseded() -> None:
    catch_up = CatchUp.plan(
        start=10, listed=[ident("a", "12")], list_rv="15", known=[], deadline=100.0
    )
    assert not catch_up.bookmarked("14")
    assert catch_up.overdue(101.0)
    assert catch_up.bookmarked("15")


def test_resume_with_nothing_to_replay_is_complete_at_once() -> None:
    catch_up = CatchUp.plan(
        start=10, listed=[ident("a", "9")], list_rv="10", known=["a"], deadline=1
    )
    assert catch_up.done


async def test_resume_position_only_covers_an_acknowledged_prefix() -> None:
    loop = asyncio.get_running_loop()
    progress = Progress("core/v1/pods@*", resume="10")
    first, second = loop.create_future(), loop.create_future()
    progress.track("11", first)
    progress.track("12", second)
    second.set_result(None)
    assert progress.committed == "10"  # 11 is not acknowledged yet: 12 must not count
    first.set_result(None)
    assert progress.committed == "12"
    relisted = loop.create_future()
    progress.track(None, relisted)  # relist results do not move the position...
    progress.mark("20")  # ...the end of the LIST does, once they are acknowledged
    assert progress.committed == "12"
    relisted.set_result(None)
    assert progress.headers() == {WATCH_KEY_HEADER: "core/v1/pods@*", WATCH_RESUME_HEADER: "20"}


@pytest.mark.parametrize(
    ("spec", "kinds", "problems"),
    [
        (
            {
                "resources": {
                    "GenericItems": [{"generictemplate": {"apiVersion": "batch/v1", "kind": "Job"}}]
                }
            },
            {("batch/v1", "Job")},
            0,
        ),
        ({"resources": {"GenericItems": "not a list"}}, set(), 0),
        ({"resources": {"GenericItems": [{"generictemplate": "x"}, 5]}}, set(), 2),
        (
            {
                "resources": {
                    "GenericItems": [{"generictemplate": {"apiVersion": 1, "kind": ["Job"]}}]
                }
            },
            set(),
            1,
        ),
        ("spec is a string", set(), 0),
    ],
)
def test_wrapped_kinds_of_a_malformed_appwrapper_never_raise(
    spec: object, kinds: set[tuple[str, str]], problems: int
) -> None:
    wrapped = wrapped_by_raw(msgspec.json.encode({"metadata": {"name": "aw"}, "spec": spec}))
    assert set(wrapped.kinds) == kinds
    assert len(wrapped.problems) == problems


def test_list_items_get_kind_and_api_version_of_the_watched_resource() -> None:
    legacy = Resource("mcad.ibm.com", "v1beta1", "appwrappers", "AppWrapper")
    raw = msgspec.json.encode(
        {"metadata": {"name": "a", "namespace": "ns", "uid": "u1", "resourceVersion": "3"}}
    )
    snapshot = Codec(legacy, "appwrapper").decode(raw)
    assert (snapshot.kind, snapshot.api_version) == ("AppWrapper", "mcad.ibm.com/v1beta1")
    item = Codec(Resource("batch", "v1", "jobs", "Job"), "item").decode(raw)
    assert (item.kind, item.api_version) == ("Job", "batch/v1")


def test_loop_histogram_exposes_what_a_prometheus_histogram_exposes() -> None:
    observed = [0.0, 0.0001, 0.0005, 0.001, 0.0026, 0.7, 5.0, 10, 30, 31, 1e9]
    reference, loop = CollectorRegistry(), CollectorRegistry()
    histogram = Histogram("h_seconds", "doc", buckets=_LATENCY_BUCKETS, registry=reference)
    lockless = LoopHistogram("h_seconds", "doc", buckets=_LATENCY_BUCKETS, registry=loop)
    for value in observed:
        histogram.observe(value)
        lockless.observe(value)

    def lines(registry: CollectorRegistry) -> list[str]:
        text = generate_latest(registry).decode()
        # The _created line's value is the creation time: only its presence must match.
        return [line.split(" ")[0] if "_created " in line else line for line in text.splitlines()]

    assert lines(loop) == lines(reference)
