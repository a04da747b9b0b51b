"""The watcher's pure decisions: relist diff, resume position, wrapped kinds, decoding."""

from __future__ import annotations

import asyncio

import msgspec
import pytest

from clearance.events import ObjectMeta, PodObject
from clearance.kube import PODS, Resource
from clearance_watcher.decoding import Codec
from clearance_watcher.kinds import wrapped_by_raw
from clearance_watcher.publishing import WATCH_KEY_HEADER, WATCH_RESUME_HEADER, Progress
from clearance_watcher.watching import diff


def snap(uid: str, name: str, rv: str) -> PodObject:
    return PodObject(metadata=ObjectMeta(name=name, namespace="ns", uid=uid, resource_version=rv))


def test_relist_diff_puts_tombstones_first_and_skips_unchanged_objects() -> None:
    known = {
        "old": snap("old", "p", "5"),
        "same": snap("same", "q", "6"),
        "moved": snap("moved", "r", "7"),
    }
    listed = [snap("new", "p", "12"), snap("same", "q", "6"), snap("moved", "r", "9")]
    changes = [(c.action, c.snapshot.metadata.uid, c.inferred) for c in diff(known, listed)]
    assert changes == [
        ("DELETED", "old", True),
        ("ADDED", "new", False),
        ("MODIFIED", "moved", False),
    ]


def test_relist_diff_does_not_tombstone_listed_objects_that_failed_to_decode() -> None:
    known = {"odd": snap("odd", "p", "5")}
    assert diff(known, [], present=["odd"]) == []


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


def test_hostile_object_fails_decode_but_still_yields_its_identity() -> None:
    raw = msgspec.json.encode(
        {
            "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "resourceVersion": "3"},
            "spec": {"containers": "not a list", "nodeName": 7},
        }
    )
    codec = Codec(PODS, "pod")
    with pytest.raises(msgspec.ValidationError):
        codec.decode(raw)
    bare = codec.identity_snapshot(raw)
    assert bare is not None and bare.metadata.uid == "u1" and bare.spec.containers == ()
