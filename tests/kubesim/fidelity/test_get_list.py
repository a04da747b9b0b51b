"""Reference §2.3: GET and LIST — shapes, ordering, resourceVersion, label and field selectors,
limit/continue with snapshots and expiry."""

from __future__ import annotations

import pytest
from fidelity_support import (
    AW_API_VERSION,
    Client,
    Http,
    JsonObj,
    ServerHandle,
    appwrapper,
    configmap,
    names,
    pod,
)
from kubernetes_asyncio import client as k8s


async def _post(http: Http, path: str, body: JsonObj) -> JsonObj:
    resp = await http.request("POST", path, json_body=body)
    assert resp.status == 201, resp.body
    obj: JsonObj = resp.json()
    return obj


async def test_get_returns_object_with_kind_and_api_version(http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("p1", ns))
    resp = await http.request("GET", f"/api/v1/namespaces/{ns}/pods/p1")
    assert resp.status == 200
    assert resp.headers["Content-Type"].startswith("application/json")
    obj = resp.json()
    assert (obj["kind"], obj["apiVersion"]) == ("Pod", "v1")


async def test_get_missing_is_404_exact_status(http: Http, ns: str) -> None:
    resp = await http.request("GET", f"/api/v1/namespaces/{ns}/pods/x")
    assert resp.status == 404
    assert resp.json() == {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": 'pods "x" not found',
        "reason": "NotFound",
        "details": {"name": "x", "kind": "pods"},
        "code": 404,
    }


@pytest.mark.parametrize(
    ("plural", "message"),
    [
        ("pods", 'pods "x" not found'),
        ("appwrappers", 'appwrappers.workload.codeflare.dev "x" not found'),
    ],
)
async def test_get_missing_reported_by_every_client(
    client: Client, ns: str, plural: str, message: str
) -> None:
    (await client.get(plural, "x", ns)).expect_failure(code=404, reason="NotFound", message=message)


async def test_list_shape_for_builtin(http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("p1", ns))
    body = (await http.request("GET", f"/api/v1/namespaces/{ns}/pods")).json()
    assert body["kind"] == "PodList"
    assert body["apiVersion"] == "v1"
    assert body["metadata"]["resourceVersion"].isdigit()
    assert names(body["items"]) == ["p1"]
    # Built-in list items omit kind/apiVersion (real server behaviour; clients tolerate both).
    assert "kind" not in body["items"][0] and "apiVersion" not in body["items"][0]


async def test_list_shape_for_custom_resource(http: Http, ns: str) -> None:
    await _post(http, f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers", appwrapper("a1", ns))
    body = (await http.request("GET", f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers")).json()
    assert body["kind"] == "AppWrapperList"
    assert body["apiVersion"] == AW_API_VERSION
    assert body["items"][0]["kind"] == "AppWrapper"
    assert body["items"][0]["apiVersion"] == AW_API_VERSION


async def test_list_resource_version_is_global_revision_not_max_item(http: Http, ns: str) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("p1", ns))
    later = await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap("c1", ns))
    body = (await http.request("GET", f"/api/v1/namespaces/{ns}/pods")).json()
    assert int(body["metadata"]["resourceVersion"]) >= int(later["metadata"]["resourceVersion"])


async def test_list_is_sorted_by_namespace_then_name(
    http: Http, server: ServerHandle, ns: str
) -> None:
    other = server.make_namespace(f"{ns[:50]}-a")  # sorts after ns
    for name, where in [
        ("zeta", ns),
        ("alpha", other),
        ("mid", ns),
        ("alpha", ns),
        ("beta", other),
    ]:
        await _post(http, f"/api/v1/namespaces/{where}/pods", pod(name, where, labels={"set": ns}))
    body = (await http.request("GET", "/api/v1/pods", params={"labelSelector": f"set={ns}"})).json()
    got = [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in body["items"]]
    assert got == sorted(got)
    assert len(got) == 5


async def test_list_through_typed_client_deserialises(
    core: k8s.CoreV1Api, http: Http, ns: str
) -> None:
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("p1", ns, labels={"a": "b"}))
    listed = await core.list_namespaced_pod(ns)
    assert [p.metadata.name for p in listed.items] == ["p1"]
    assert listed.metadata.resource_version


# --- label selectors --------------------------------------------------------------------------

LABELLED = {
    "p-a": {"env": "prod", "tier": "web", "rank": "3", "app.kubernetes.io/part-of": "clearance"},
    "p-b": {"env": "dev", "tier": "web", "rank": "10"},
    "p-c": {"env": "test", "rank": "7", "app.kubernetes.io/part-of": "clearance"},
    "p-d": {},
}
SELECTOR_CASES = [
    ("env=prod", ["p-a"]),
    ("env==prod", ["p-a"]),
    ("env!=prod", ["p-b", "p-c", "p-d"]),  # also objects without the key
    ("env in (prod,dev)", ["p-a", "p-b"]),
    ("env notin (prod,dev)", ["p-c", "p-d"]),  # also objects without the key
    ("tier", ["p-a", "p-b"]),
    ("!tier", ["p-c", "p-d"]),
    ("rank>5", ["p-b", "p-c"]),
    ("rank<5", ["p-a"]),
    ("tier=web,env!=dev", ["p-a"]),
    (" env in ( prod , test ) , rank > 4 ", ["p-c"]),
    ("app.kubernetes.io/part-of=clearance", ["p-a", "p-c"]),
    ("app.kubernetes.io/part-of notin (clearance)", ["p-b", "p-d"]),
]


@pytest.fixture
async def labelled_pods(http: Http, ns: str) -> str:
    for name, labels in LABELLED.items():
        await _post(http, f"/api/v1/namespaces/{ns}/pods", pod(name, ns, labels=labels))
    return ns


@pytest.mark.parametrize(("selector", "expected"), SELECTOR_CASES)
async def test_label_selector_grammar(
    http: Http, labelled_pods: str, selector: str, expected: list[str]
) -> None:
    resp = await http.request(
        "GET", f"/api/v1/namespaces/{labelled_pods}/pods", params={"labelSelector": selector}
    )
    assert resp.status == 200, resp.body
    assert names(resp.json()["items"]) == expected


@pytest.mark.parametrize(
    ("selector", "expected"),
    [("env in (prod,dev)", ["p-a", "p-b"]), ("!tier", ["p-c", "p-d"]), ("rank>5", ["p-b", "p-c"])],
)
async def test_label_selector_through_every_client(
    client: Client, labelled_pods: str, selector: str, expected: list[str]
) -> None:
    listed = (await client.list("pods", labelled_pods, label_selector=selector)).value()
    assert names(listed["items"]) == expected


@pytest.mark.parametrize("selector", ["env in (prod", "env=prod=x", "rank>abc", "=x"])
async def test_malformed_label_selector_is_400(http: Http, ns: str, selector: str) -> None:
    resp = await http.request(
        "GET", f"/api/v1/namespaces/{ns}/pods", params={"labelSelector": selector}
    )
    assert resp.status == 400
    assert resp.json()["reason"] == "BadRequest"


# --- field selectors --------------------------------------------------------------------------


@pytest.fixture
async def placed_pods(http: Http, ns: str) -> str:
    on_a = pod("on-a", ns, node_name="node-a")
    on_a["spec"] |= {"restartPolicy": "Never", "schedulerName": "custom"}
    await _post(http, f"/api/v1/namespaces/{ns}/pods", on_a)
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("on-b", ns, node_name="node-b"))
    await _post(http, f"/api/v1/namespaces/{ns}/pods", pod("nowhere", ns))
    return ns


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("spec.nodeName=node-a", ["on-a"]),
        ("spec.nodeName==node-b", ["on-b"]),
        ("spec.nodeName!=node-a", ["nowhere", "on-b"]),
        ("spec.nodeName=", ["nowhere"]),  # unscheduled pods
        ("metadata.name=on-b", ["on-b"]),
        ("status.phase=Pending,spec.nodeName=node-a", ["on-a"]),
        ("spec.restartPolicy=Never", ["on-a"]),
        ("spec.schedulerName=custom", ["on-a"]),
        ("spec.hostNetwork=false", ["nowhere", "on-a", "on-b"]),
    ],
)
async def test_pod_field_selectors(
    http: Http, placed_pods: str, selector: str, expected: list[str]
) -> None:
    resp = await http.request(
        "GET", f"/api/v1/namespaces/{placed_pods}/pods", params={"fieldSelector": selector}
    )
    assert resp.status == 200, resp.body
    assert names(resp.json()["items"]) == expected


async def test_field_selector_through_every_client(client: Client, placed_pods: str) -> None:
    listed = (await client.list("pods", placed_pods, field_selector="spec.nodeName=node-b")).value()
    assert names(listed["items"]) == ["on-b"]


async def test_field_selector_on_metadata_namespace_across_namespaces(
    http: Http, placed_pods: str
) -> None:
    resp = await http.request(
        "GET", "/api/v1/pods", params={"fieldSelector": f"metadata.namespace={placed_pods}"}
    )
    assert names(resp.json()["items"]) == ["nowhere", "on-a", "on-b"]


@pytest.mark.parametrize(
    ("path", "selector"),
    [
        ("/api/v1/namespaces/{ns}/pods", "spec.containers"),
        ("/api/v1/namespaces/{ns}/pods", "metadata.labels"),
        ("/api/v1/namespaces/{ns}/configmaps", "data.key"),
        ("/apis/" + AW_API_VERSION + "/namespaces/{ns}/appwrappers", "status.state"),
    ],
)
async def test_unsupported_field_label_is_400(
    http: Http, ns: str, path: str, selector: str
) -> None:
    resp = await http.request("GET", path.format(ns=ns), params={"fieldSelector": f"{selector}=x"})
    assert resp.status == 400
    status = resp.json()
    assert status["reason"] == "BadRequest"
    assert f"field label not supported: {selector}" in status["message"]


async def test_unsupported_field_label_through_every_client(client: Client, ns: str) -> None:
    outcome = await client.list("pods", ns, field_selector="spec.bogus=x")
    outcome.expect_failure(
        code=400, reason="BadRequest", message="field label not supported: spec.bogus"
    )


async def test_cr_field_selector_on_metadata_name(http: Http, ns: str) -> None:
    path = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    for name in ("a1", "a2"):
        await _post(http, path, appwrapper(name, ns))
    resp = await http.request("GET", path, params={"fieldSelector": "metadata.name=a2"})
    assert names(resp.json()["items"]) == ["a2"]


async def test_node_field_selectors(http: Http, ns: str) -> None:
    for name, unschedulable in ((f"{ns}-n1", True), (f"{ns}-n2", False)):
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name},
            "spec": {"unschedulable": unschedulable},
        }
        await _post(http, "/api/v1/nodes", body)
    resp = await http.request(
        "GET",
        "/api/v1/nodes",
        params={"fieldSelector": f"metadata.name={ns}-n1,spec.unschedulable=true"},
    )
    assert names(resp.json()["items"]) == [f"{ns}-n1"]
    resp = await http.request("GET", "/api/v1/nodes", params={"fieldSelector": "spec.taints=x"})
    assert resp.status == 400


async def test_namespace_field_selector_status_phase(http: Http, ns: str) -> None:
    resp = await http.request(
        "GET",
        "/api/v1/namespaces",
        params={"fieldSelector": f"metadata.name={ns},status.phase=Active"},
    )
    assert names(resp.json()["items"]) == [ns]


async def test_event_field_selectors_with_escaped_comma(http: Http, ns: str) -> None:
    def event(name: str, reason: str, involved: str) -> JsonObj:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": ns},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": involved},
            "reason": reason,
            "message": "m",
            "type": "Warning",
            "source": {"component": "fidelity"},
            "reportingComponent": "fidelity",
        }

    await _post(http, f"/api/v1/namespaces/{ns}/events", event("e1", "a,b", "p1"))
    await _post(http, f"/api/v1/namespaces/{ns}/events", event("e2", "Plain", "p2"))
    path = f"/api/v1/namespaces/{ns}/events"
    cases = [
        ("involvedObject.name=p2", ["e2"]),
        ("involvedObject.kind=Pod,involvedObject.name=p1", ["e1"]),
        (r"reason=a\,b", ["e1"]),
        ("type=Warning,reason!=Plain", ["e1"]),
        ("reportingComponent=fidelity", ["e1", "e2"]),
        ("source=fidelity", ["e1", "e2"]),
    ]
    for selector, expected in cases:
        resp = await http.request("GET", path, params={"fieldSelector": selector})
        assert resp.status == 200, (selector, resp.body)
        assert names(resp.json()["items"]) == expected, selector


# --- limit / continue -------------------------------------------------------------------------


@pytest.fixture
async def five_configmaps(http: Http, ns: str) -> str:
    for i in range(5):
        await _post(http, f"/api/v1/namespaces/{ns}/configmaps", configmap(f"c{i}", ns))
    return ns


async def test_limit_and_continue_walk_all_pages_at_first_page_rv(
    http: Http, five_configmaps: str
) -> None:
    path = f"/api/v1/namespaces/{five_configmaps}/configmaps"
    page1 = (await http.request("GET", path, params={"limit": "2"})).json()
    assert names(page1["items"]) == ["c0", "c1"]
    token = page1["metadata"]["continue"]
    assert token
    if "remainingItemCount" in page1["metadata"]:
        assert page1["metadata"]["remainingItemCount"] == 3
    # A write between pages must not show up: later pages are served at page 1's revision.
    await _post(http, path, configmap("c2a", five_configmaps))
    seen = names(page1["items"])
    while token:
        page = (await http.request("GET", path, params={"limit": "2", "continue": token})).json()
        assert page["metadata"]["resourceVersion"] == page1["metadata"]["resourceVersion"]
        seen += names(page["items"])
        token = page["metadata"].get("continue", "")
    assert seen == ["c0", "c1", "c2", "c3", "c4"]


async def test_typed_client_paginates(core: k8s.CoreV1Api, five_configmaps: str) -> None:
    first = await core.list_namespaced_config_map(five_configmaps, limit=3)
    assert len(first.items) == 3 and first.metadata._continue
    rest = await core.list_namespaced_config_map(
        five_configmaps, limit=3, _continue=first.metadata._continue
    )
    assert [c.metadata.name for c in first.items + rest.items] == [f"c{i}" for i in range(5)]
    assert not rest.metadata._continue


async def test_expired_continue_token_is_410(
    http: Http, server: ServerHandle, five_configmaps: str
) -> None:
    path = f"/api/v1/namespaces/{five_configmaps}/configmaps"
    page1 = (await http.request("GET", path, params={"limit": "2"})).json()
    await _post(http, path, configmap("later", five_configmaps))
    server.compact()
    resp = await http.request(
        "GET", path, params={"limit": "2", "continue": page1["metadata"]["continue"]}
    )
    assert resp.status == 410
    status = resp.json()
    assert status["kind"] == "Status" and status["code"] == 410
    assert status["reason"] == "Expired"


async def test_limit_with_exact_old_resource_version_is_410(
    http: Http, server: ServerHandle, five_configmaps: str
) -> None:
    path = f"/api/v1/namespaces/{five_configmaps}/configmaps"
    old_rv = (await http.request("GET", path)).json()["metadata"]["resourceVersion"]
    await _post(http, path, configmap("later", five_configmaps))
    server.compact()
    resp = await http.request(
        "GET",
        path,
        params={"limit": "2", "resourceVersion": old_rv, "resourceVersionMatch": "Exact"},
    )
    assert resp.status == 410
    assert resp.json()["reason"] == "Expired"


@pytest.mark.parametrize(
    "params",
    [
        {"resourceVersion": "0"},
        {"resourceVersion": "1", "resourceVersionMatch": "NotOlderThan"},
        {},
    ],
)
async def test_list_resource_version_semantics_serve_latest(
    http: Http, five_configmaps: str, params: dict[str, str]
) -> None:
    resp = await http.request(
        "GET", f"/api/v1/namespaces/{five_configmaps}/configmaps", params=params
    )
    assert resp.status == 200, resp.body
    assert names(resp.json()["items"]) == [f"c{i}" for i in range(5)]


async def test_job_field_selector_status_successful(http: Http, ns: str) -> None:
    path = f"/apis/batch/v1/namespaces/{ns}/jobs"
    for name in ("j1", "j2"):
        body = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [{"name": "main", "image": "busybox"}],
                    }
                }
            },
        }
        await _post(http, path, body)
    done = await http.request(
        "PATCH",
        f"{path}/j2/status",
        json_body={"status": {"succeeded": 1}},
        content_type="application/merge-patch+json",
    )
    assert done.status == 200, done.body
    resp = await http.request("GET", path, params={"fieldSelector": "status.successful=1"})
    assert resp.status == 200, resp.body
    assert names(resp.json()["items"]) == ["j2"]
    resp = await http.request("GET", path, params={"fieldSelector": "metadata.name=j1"})
    assert names(resp.json()["items"]) == ["j1"]


async def test_typed_node_list_deserialises(core: k8s.CoreV1Api, http: Http, ns: str) -> None:
    name = f"{ns}-n"[:63]
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
    }
    await _post(http, "/api/v1/nodes", node)
    listed = await core.list_node(field_selector=f"metadata.name={name}")
    assert [n.metadata.name for n in listed.items] == [name]
    assert listed.items[0].spec.taints[0].key == "k"


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        ("/api/v1/pods", "PodList"),
        ("/api/v1/events", "EventList"),
        ("/apis/batch/v1/jobs", "JobList"),
        (f"/apis/{AW_API_VERSION}/appwrappers", "AppWrapperList"),
        ("/api/v1/nodes", "NodeList"),
        ("/api/v1/namespaces", "NamespaceList"),
    ],
)
async def test_cluster_wide_collections(http: Http, path: str, kind: str) -> None:
    resp = await http.request("GET", path)
    assert resp.status == 200, resp.body
    assert resp.json()["kind"] == kind


async def test_pagination_with_label_selector_counts_matches_only(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    for i in range(6):
        labels = {"pick": "yes"} if i % 2 else {"pick": "no"}
        await _post(http, path, configmap(f"c{i}", ns, labels=labels))
    seen: list[str] = []
    params = {"limit": "2", "labelSelector": "pick=yes"}
    page = (await http.request("GET", path, params=params)).json()
    seen += names(page["items"])
    assert len(page["items"]) == 2
    while token := page["metadata"].get("continue"):
        page = (await http.request("GET", path, params=params | {"continue": token})).json()
        seen += names(page["items"])
    assert seen == ["c1", "c3", "c5"]


async def test_exact_resource_version_list_serves_that_snapshot(http: Http, ns: str) -> None:
    path = f"/api/v1/namespaces/{ns}/configmaps"
    await _post(http, path, configmap("before", ns))
    snapshot = (await http.request("GET", path)).json()["metadata"]["resourceVersion"]
    await _post(http, path, configmap("after", ns))
    resp = await http.request(
        "GET",
        path,
        params={"limit": "10", "resourceVersion": snapshot, "resourceVersionMatch": "Exact"},
    )
    assert resp.status == 200, resp.body
    body = resp.json()
    assert names(body["items"]) == ["before"]
    assert body["metadata"]["resourceVersion"] == snapshot


async def test_custom_objects_pagination(custom: k8s.CustomObjectsApi, http: Http, ns: str) -> None:
    path = f"/apis/{AW_API_VERSION}/namespaces/{ns}/appwrappers"
    for name in ("a1", "a2", "a3"):
        await _post(http, path, appwrapper(name, ns))
    seen: list[str] = []
    token = None
    while True:
        kw = {"_continue": token} if token else {}
        page = await custom.list_namespaced_custom_object(
            "workload.codeflare.dev", "v1beta1", ns, "appwrappers", limit=1, **kw
        )
        seen += names(page["items"])
        token = page["metadata"].get("continue")
        if not token:
            break
    assert seen == ["a1", "a2", "a3"]


async def test_limit_zero_means_no_limit_and_last_page_has_no_continue(
    http: Http, five_configmaps: str
) -> None:
    path = f"/api/v1/namespaces/{five_configmaps}/configmaps"
    for limit in ("0", "10"):
        body = (await http.request("GET", path, params={"limit": limit})).json()
        assert len(body["items"]) == 5
        assert not body["metadata"].get("continue")


@pytest.mark.parametrize("params", [{"limit": "1", "continue": "garbage"}, {"watch": "maybe"}])
async def test_malformed_query_parameters_are_400(
    http: Http, ns: str, params: dict[str, str]
) -> None:
    resp = await http.request("GET", f"/api/v1/namespaces/{ns}/configmaps", params=params)
    assert resp.status == 400
    assert resp.json()["reason"] == "BadRequest"
