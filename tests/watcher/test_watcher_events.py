"""Acceptance 1: every change of pods, nodes, AppWrappers and Jobs reaches CLEARANCE_KUBE on
the right subject, in resourceVersion order per object, exactly once — also across a restart."""

from __future__ import annotations

import asyncio

from nats.js import JetStreamContext
from watcher_support import (
    KubeSim,
    Published,
    appwrapper,
    aws_path,
    history_by_uid,
    job,
    jobs_path,
    metric,
    node,
    nodes_path,
    pod,
    pods_path,
    published_by_uid,
    read_stream,
    wait_stream,
)

from clearance import subjects


async def churn(sim: KubeSim, js: JetStreamContext, ns: str, tag: str) -> None:
    """Create, update and delete one object of every kind (the AppWrapper wraps a Job).

    Like the dispatcher, the Job is created only once the AppWrapper's event is out.
    """
    aw = sim.create(aws_path(ns), appwrapper(f"aw-{tag}", job(f"job-{tag}")))
    await wait_stream(
        js, lambda ps: any(p.uid == aw["metadata"]["uid"] for p in ps), what="the AppWrapper"
    )
    sim.create(pods_path(ns), pod(f"pod-{tag}"))
    sim.create(jobs_path(ns), job(f"job-{tag}"))
    sim.create(nodes_path(), node(f"node-{tag}"))
    sim.patch(pods_path(ns, f"pod-{tag}"), {"metadata": {"labels": {"step": "1"}}})
    sim.patch(jobs_path(ns, f"job-{tag}"), {"metadata": {"labels": {"step": "1"}}})
    sim.patch(nodes_path(f"node-{tag}"), {"metadata": {"labels": {"step": "1"}}})
    sim.patch(aws_path(ns, f"aw-{tag}"), {"metadata": {"labels": {"step": "1"}}})
    sim.patch(pods_path(ns, f"pod-{tag}"), {"metadata": {"labels": {"step": "2"}}})
    sim.delete(pods_path(ns, f"pod-{tag}"))
    sim.delete(jobs_path(ns, f"job-{tag}"))
    sim.delete(nodes_path(f"node-{tag}"))


def expected_history(sim: KubeSim, ns: str) -> dict[str, list[tuple[str, str]]]:
    entries = [
        e
        for e in sim.history()
        if (e["kind"] in ("Pod", "Job", "AppWrapper") and e["namespace"] == ns)
        or e["kind"] == "Node"
    ]
    return history_by_uid(entries)


def assert_matches_history(
    published: list[Published], expected: dict[str, list[tuple[str, str]]]
) -> None:
    got = published_by_uid(published)
    assert got == expected
    ids = [p.headers["Nats-Msg-Id"] for p in published]
    assert len(ids) == len(set(ids)), "a message id was stored twice"


def assert_subjects(published: list[Published]) -> None:
    for p in published:
        meta = p.event.object.metadata
        assert p.subject == subjects.kube_subject(p.event.kube_kind, meta.namespace, meta.name)
        assert p.headers["Nats-Msg-Id"] == p.event.msg_id()


async def test_every_change_is_published_once_in_order_on_its_subject(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    start_watcher()
    await churn(kubesim, js, ns, "one")
    expected = expected_history(kubesim, ns)
    published = await wait_stream(
        js, lambda ps: published_by_uid(ps) == expected, what="all changes of round one"
    )
    assert_matches_history(published, expected)
    assert_subjects(published)
    kinds = {p.event.kube_kind for p in published}
    assert kinds == {"pod", "node", "appwrapper", "item"}
    assert not any(p.event.inferred for p in published)


async def test_unlabelled_pods_and_jobs_are_not_published(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    start_watcher()
    kubesim.create(aws_path(ns), appwrapper("aw-x", job("j")))
    stranger = kubesim.create(pods_path(ns), pod("stranger", aw=None))
    member = kubesim.create(pods_path(ns), pod("member"))
    published = await wait_stream(
        js,
        lambda ps: any(p.uid == member["metadata"]["uid"] for p in ps),
        what="the labelled pod",
    )
    assert all(p.uid != stranger["metadata"]["uid"] for p in published)


async def test_changes_across_a_restart_are_published_once_in_order(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    await churn(kubesim, js, ns, "one")
    expected = expected_history(kubesim, ns)
    await wait_stream(js, lambda ps: published_by_uid(ps) == expected, what="round one")
    assert watcher.terminate() == 0, watcher.output()
    # While no watcher runs: updates (intermediate MODIFIED must not be lost), deletions.
    kubesim.create(pods_path(ns), pod("pod-gap"))
    kubesim.patch(pods_path(ns, "pod-gap"), {"metadata": {"labels": {"step": "1"}}})
    kubesim.patch(pods_path(ns, "pod-gap"), {"metadata": {"labels": {"step": "2"}}})
    kubesim.patch(aws_path(ns, "aw-one"), {"metadata": {"labels": {"step": "2"}}})
    kubesim.delete(aws_path(ns, "aw-one"))
    start_watcher()
    await churn(kubesim, js, ns, "two")
    expected = expected_history(kubesim, ns)
    published = await wait_stream(
        js, lambda ps: published_by_uid(ps) == expected, what="everything after the restart"
    )
    assert_matches_history(published, expected)
    assert_subjects(published)


async def test_namespace_scope_limits_appwrappers_pods_and_items(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    served = kubesim.namespace("team-a")
    other = kubesim.namespace("team-b")
    # One replica without leader election: it publishes from the start.
    start_watcher(CLEARANCE_NAMESPACES=served, CLEARANCE_LEADER_ELECTION="false")
    foreign = [
        kubesim.create(aws_path(other), appwrapper("aw-b", job("job-b"))),
        kubesim.create(pods_path(other), pod("pod-b")),
    ]
    await churn(kubesim, js, served, "a")
    expected = expected_history(kubesim, served)
    published = await wait_stream(
        js, lambda ps: published_by_uid(ps) == expected, what="team-a's changes only"
    )
    foreign_uids = {o["metadata"]["uid"] for o in foreign}
    assert not foreign_uids & {p.uid for p in published}


async def test_known_objects_are_reannounced_under_their_original_msg_id(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher(CLEARANCE_RESYNC_INTERVAL="500ms")
    created = kubesim.create(pods_path(ns), pod("steady"))
    uid = created["metadata"]["uid"]
    await wait_stream(js, lambda ps: any(p.uid == uid for p in ps), what="the pod")
    deadline = asyncio.get_running_loop().time() + 10
    while metric(watcher, "clearance_watcher_reannounced_total") < 2:
        assert asyncio.get_running_loop().time() < deadline, watcher.output()
        await asyncio.sleep(0.2)
    # Inside the dedup window the copies are dropped: still one message per state.
    assert metric(watcher, "clearance_events_duplicate_total") >= 1
    published = [p for p in await read_stream(js) if p.uid == uid]
    assert [(p.action, p.rv) for p in published] == [
        ("ADDED", created["metadata"]["resourceVersion"])
    ]


async def test_wrapped_kind_informer_stops_when_unneeded_and_restarts_without_replay(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    await churn(kubesim, js, ns, "one")  # aw-one wraps job-one, which is deleted
    kubesim.delete(aws_path(ns, "aw-one"))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 10
    while metric(watcher, 'clearance_watcher_informers{kind="item"}') != 0:
        assert loop.time() < deadline, "the Job informer did not stop"
        await asyncio.sleep(0.2)
    await churn(kubesim, js, ns, "two")  # needs the Job informer again
    assert metric(watcher, 'clearance_watcher_informers{kind="item"}') == 1
    expected = expected_history(kubesim, ns)
    published = await wait_stream(
        js, lambda ps: published_by_uid(ps) == expected, what="both rounds, nothing replayed"
    )
    assert_matches_history(published, expected)


async def test_a_wrapped_pod_is_published_once_on_its_pod_subject(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    """A bare Pod wrapped by an AppWrapper: its pod events only, no item informer and no
    second copy of each change on an item subject (the tracker consumed both)."""
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    aw = kubesim.create(aws_path(ns), appwrapper("aw-pods", pod("gang-0")))
    await wait_stream(
        js, lambda ps: any(p.uid == aw["metadata"]["uid"] for p in ps), what="the AppWrapper"
    )
    member = kubesim.create(pods_path(ns), pod("gang-0"))
    kubesim.patch(pods_path(ns, "gang-0"), {"metadata": {"labels": {"step": "1"}}})
    kubesim.delete(pods_path(ns, "gang-0"))
    uid = member["metadata"]["uid"]
    expected = expected_history(kubesim, ns)[uid]
    published = await wait_stream(
        js,
        lambda ps: (
            [(p.action, p.rv) for p in ps if p.uid == uid and p.event.kube_kind == "pod"]
            == expected
        ),
        what="every change of the wrapped pod",
    )
    assert [p.event.kube_kind for p in published if p.uid == uid] == ["pod"] * len(expected)
    assert metric(watcher, 'clearance_watcher_informers{kind="item"}') == 0
