"""Acceptance 5: hostile input neither crashes nor stalls the watcher, and a log line names it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from nats.js import JetStreamContext
from tests.support.processes import log_records
from watcher_support import (
    AW_LABEL,
    KubeSim,
    appwrapper,
    aws_path,
    job,
    jobs_path,
    metric,
    node,
    nodes_path,
    pod,
    pods_path,
    wait_stream,
)

from clearance import events, subjects
from clearance.events import AppWrapperObject, AppWrapperSpec

CRD_PATH = (
    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/appwrappers.workload.codeflare.dev"
)


@contextlib.contextmanager
def loosened_priority(kubesim: KubeSim) -> Iterator[None]:
    """The served AppWrapper CRD with `spec.priority` untyped, restored afterwards."""
    crd = kubesim.ok("GET", CRD_PATH)
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    typed = schema["properties"]["spec"]["properties"]["priority"]
    schema["properties"]["spec"]["properties"]["priority"] = {
        "x-kubernetes-preserve-unknown-fields": True
    }
    crd = kubesim.ok("PUT", CRD_PATH, crd)
    try:
        yield
    finally:
        schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
        schema["properties"]["spec"]["properties"]["priority"] = typed
        kubesim.ok("PUT", CRD_PATH, crd)


async def published_uid(js: JetStreamContext, obj: dict[str, Any], what: str) -> Any:
    uid = obj["metadata"]["uid"]
    published = await wait_stream(js, lambda ps: any(p.uid == uid for p in ps), what=what)
    return [p for p in published if p.uid == uid]


async def test_unserved_kind_in_generic_items_is_reported_and_other_kinds_still_watched(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    widget = {"apiVersion": "example.com/v1", "kind": "Widget", "metadata": {"name": "w"}}
    aw = kubesim.create(aws_path(ns), appwrapper("odd", widget, job("job-1")))
    await published_uid(js, aw, "the AppWrapper naming an unserved kind")
    created = kubesim.create(jobs_path(ns), job("job-1"))
    [event] = await published_uid(js, created, "the Job, watched despite the Widget")
    assert event.event.kube_kind == "item"
    reports = [
        line
        for line in log_records(watcher)
        if "does not serve" in line["msg"] and line.get("kind") == "Widget"
    ]
    assert reports and reports[0]["appwrapper"] == "odd"
    assert reports[0]["namespace"] == ns
    assert metric(watcher, "clearance_watcher_unserved_kinds") == 1
    assert metric(watcher, "clearance_watcher_unserved_kind_reports_total") == 1


async def test_names_that_are_not_subject_tokens_are_encoded_reversibly(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    start_watcher()
    created = kubesim.create(pods_path(ns), pod("my.pod.v1"))
    cluster = kubesim.create(nodes_path(), node("node.example.com"))
    [p] = await published_uid(js, created, "the dotted pod")
    [n] = await published_uid(js, cluster, "the dotted node")
    assert p.subject == "clearance.kube.v1.pod.team-a.my~2Epod~2Ev1"
    assert n.subject == "clearance.kube.v1.node._.node~2Eexample~2Ecom"
    parsed = subjects.parse_subject(p.subject)
    assert isinstance(parsed, subjects.KubeSubject)
    assert (parsed.namespace, parsed.name) == (ns, "my.pod.v1")


async def test_huge_label_sets_are_published_and_oversized_ones_trimmed(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    big = pod("big", labels={f"label-{i}": "v" * 60 for i in range(3000)})  # ~250 KB
    huge = pod("huge", labels={f"label-{i}": "v" * 60 for i in range(20000)})  # > 1 MB
    [b] = await published_uid(js, kubesim.create(pods_path(ns), big), "the big pod")
    assert len(b.event.object.metadata.labels) == 3001
    [h] = await published_uid(js, kubesim.create(pods_path(ns), huge), "the huge pod")
    assert h.event.object.metadata.labels == {AW_LABEL: "aw-1"}
    assert metric(watcher, "clearance_watcher_oversized_events_total") == 1
    assert any("max payload" in line["msg"] for line in log_records(watcher))
    after = kubesim.create(pods_path(ns), pod("after"))
    await published_uid(js, after, "a pod after the oversized one (no stall)")


async def test_appwrapper_whose_spec_does_not_decode_is_published_empty_with_its_problem(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    bad = appwrapper("bad", job("job-1"))
    bad["spec"]["priority"] = "high"  # the deployed CRD says integer
    # The API answers 422 to that under the deployed CRD, so the AppWrapper is stored the way
    # such objects exist in real clusters: under an earlier, looser CRD that was tightened
    # later (the API server never revalidates stored objects).
    with loosened_priority(kubesim):
        created = kubesim.create(aws_path(ns), bad)
    assert kubesim.request("POST", aws_path(ns), {**bad, "metadata": {"name": "bad-2"}})[0] == 422
    bare = kubesim.create(aws_path(ns), {**appwrapper("bare"), "spec": {}})
    await published_uid(js, bare, "an AppWrapper with no optional field")
    minimal_node = kubesim.create(nodes_path(), {"metadata": {"name": "minimal"}})
    await published_uid(js, minimal_node, "a node with no optional field")
    [partial] = await published_uid(js, created, "the undecodable AppWrapper")
    # read_stream decoded it with the event catalog, as the dispatcher does.
    problem = partial.event.problem
    assert problem is not None
    assert problem.path == "$.spec.priority"
    assert problem.dropped == ("$.spec",)
    obj = partial.event.object
    assert isinstance(obj, AppWrapperObject)
    assert obj.spec == AppWrapperSpec()  # never half a spec: nothing to dispatch from
    assert (obj.metadata.namespace, obj.metadata.name) == (ns, "bad")
    errors = [line for line in log_records(watcher) if "does not decode" in line["msg"]]
    assert errors and errors[0]["object_name"] == "bad" and errors[0]["namespace"] == ns
    assert errors[0]["path"] == "$.spec.priority"
    assert metric(watcher, "clearance_watcher_decode_failures_total") >= 1
    assert metric(watcher, 'clearance_watcher_partial_events_total{kind="appwrapper"}') >= 1
    # Its Job kind is still watched (kinds are read from the raw object).
    item = kubesim.create(jobs_path(ns), job("job-1"))
    await published_uid(js, item, "the undecodable AppWrapper's Job")
    kubesim.delete(aws_path(ns, "bad"))
    await wait_stream(
        js,
        lambda ps: any(p.uid == created["metadata"]["uid"] and p.action == "DELETED" for p in ps),
        what="the undecodable AppWrapper's deletion",
    )


async def test_appwrapper_whose_status_does_not_decode_is_published_with_its_spec(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    start_watcher()
    created = kubesim.create(aws_path(ns), appwrapper("odd", job("job-1")))
    await published_uid(js, created, "the AppWrapper")
    # Bookkeeping the CRD preserves untyped (x-kubernetes-preserve-unknown-fields), written
    # with a type the snapshot rejects: a real API server stores it as well.
    kubesim.patch(aws_path(ns, "odd") + "/status", {"status": {"clearance": {"attempt": "two"}}})
    published = await wait_stream(
        js,
        lambda ps: any(p.uid == created["metadata"]["uid"] and p.event.problem for p in ps),
        what="the AppWrapper with its problem",
    )
    [partial] = [p for p in published if p.event.problem is not None]
    problem = partial.event.problem
    assert problem is not None
    assert problem.path == "$.status.clearance.attempt"
    assert problem.dropped == ("$.status.clearance.attempt",)
    obj = partial.event.object
    assert isinstance(obj, AppWrapperObject)
    assert obj.spec.resources.generic_items  # only the field at fault is missing


def unservable_owner(body: dict[str, Any]) -> dict[str, Any]:
    """An ownerReference the API server stores but the snapshot rejects: its uid is not a
    subject-safe token. The owner's kind is served by no one, so no garbage collector acts."""
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "example.com/v1", "kind": "Unserved", "name": "o", "uid": "urn:uuid:1"}
    ]
    return body


async def test_pod_the_snapshot_cannot_decode_still_reaches_nats_as_an_identity_event(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    created = kubesim.create(pods_path(ns), unservable_owner(pod("odd", labels={"x": "1"})))
    uid = created["metadata"]["uid"]
    kubesim.patch(pods_path(ns, "odd") + "/status", {"status": {"phase": "Running"}})
    kubesim.ok("DELETE", pods_path(ns, "odd"), {"gracePeriodSeconds": 0})
    published = await wait_stream(
        js,
        lambda ps: any(p.uid == uid and p.action == "DELETED" for p in ps),
        what="the undecodable pod's whole life, deletion included",
    )
    # read_stream decoded every message with the event catalog, as consumers do.
    lives = [p for p in published if p.uid == uid]
    assert lives[0].action == "ADDED"
    assert all(p.event.problem is not None for p in lives)
    first = lives[0].event
    assert isinstance(first, events.KubePodEvent) and first.problem is not None
    assert first.problem.path == "$.metadata.ownerReferences[0].uid"
    assert first.problem.dropped == ("$.metadata.ownerReferences[0]",)
    meta = first.object.metadata
    assert (meta.namespace, meta.name, meta.labels[AW_LABEL]) == (ns, "odd", "aw-1")
    assert lives[0].subject == f"clearance.kube.v1.pod.{ns}.odd"
    running = [p for p in lives if isinstance(p.event.object, events.PodObject)]
    assert any(p.event.object.status.phase == "Running" for p in running)
    assert metric(watcher, 'clearance_watcher_partial_events_total{kind="pod"}') >= 3


async def test_job_pods_with_integer_gpu_quantities_are_published_whole(
    kubesim: KubeSim, js: JetStreamContext, start_watcher
) -> None:
    """Issue 19: MCAD's own examples write `nvidia.com/gpu: 0` as an integer. Whether the API
    server stores it canonicalized ("0") or as written (0), the pod is published whole."""
    ns = kubesim.namespace("team-a")
    watcher = start_watcher()
    gpu = {"requests": {"cpu": "100m", "nvidia.com/gpu": 0}, "limits": {"nvidia.com/gpu": 0}}
    template = job("job-gpu")
    template["spec"]["template"]["spec"]["containers"][0]["resources"] = gpu
    aw = kubesim.create(aws_path(ns), appwrapper("gpu", template))
    await published_uid(js, aw, "the AppWrapper")
    created_job = kubesim.create(jobs_path(ns), template)
    # The pod the Job controller makes from that template (this kubesim runs no controllers).
    job_pod = pod("job-gpu-x7k2p")
    job_pod["spec"]["containers"][0]["resources"] = gpu
    job_pod["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "name": "job-gpu",
            "uid": created_job["metadata"]["uid"],
            "controller": True,
        }
    ]
    created_pod = kubesim.create(pods_path(ns), job_pod)
    kubesim.patch(pods_path(ns, "job-gpu-x7k2p") + "/status", {"status": {"phase": "Succeeded"}})
    uid = created_pod["metadata"]["uid"]
    published = await wait_stream(
        js,
        lambda ps: any(
            p.uid == uid
            and isinstance(p.event.object, events.PodObject)
            and p.event.object.status.phase == "Succeeded"
            for p in ps
        ),
        what="the Job's pod succeeding",
    )
    pods = [p for p in published if p.uid == uid]
    assert all(p.event.problem is None for p in pods)
    obj = pods[-1].event.object
    assert isinstance(obj, events.PodObject)
    limits = obj.spec.containers[0].resources.limits
    assert limits.nvidia_gpu in (0, "0")
    [item] = await published_uid(js, created_job, "the Job")
    assert item.event.problem is None
    assert metric(watcher, "clearance_watcher_decode_failures_total") == 0
