"""Reference §2.12 (discovery for the dynamic client and kubectl) and §2.13 (what kubectl 1.32
needs: OpenAPI v3 with GVK-tagged paths and `fieldValidation`, server-side strict decoding), plus
the everyday kubectl verbs: apply, create, get (table / json / yaml), describe, delete."""

from __future__ import annotations

import json

import pytest
import yaml
from fidelity_support import (
    AW_API_VERSION,
    DATA,
    Http,
    Kubectl,
    pod,
)
from kubernetes_asyncio.dynamic import DynamicClient

AGGREGATED_ACCEPT = (
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,"
    "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
)


async def test_version_endpoint(http: Http) -> None:
    version = (await http.request("GET", "/version")).json()
    assert {"major", "minor", "gitVersion"} <= set(version)


async def test_core_api_versions(http: Http) -> None:
    body = (await http.request("GET", "/api")).json()
    assert body["kind"] == "APIVersions"
    assert body["versions"] == ["v1"]


async def test_api_group_list(http: Http) -> None:
    body = (await http.request("GET", "/apis")).json()
    assert body["kind"] == "APIGroupList"
    groups = {g["name"]: g for g in body["groups"]}
    for name in (
        "batch",
        "apps",
        "coordination.k8s.io",
        "rbac.authorization.k8s.io",
        "apiextensions.k8s.io",
        "workload.codeflare.dev",
    ):
        assert name in groups, name
        group = groups[name]
        assert group["preferredVersion"]["groupVersion"].startswith(name + "/")
        for version in group["versions"]:
            assert version["groupVersion"] == f"{name}/{version['version']}"


async def test_core_v1_resource_list(http: Http) -> None:
    body = (await http.request("GET", "/api/v1")).json()
    assert body["kind"] == "APIResourceList"
    assert body["groupVersion"] == "v1"
    resources = {r["name"]: r for r in body["resources"]}
    pods = resources["pods"]
    assert (pods["kind"], pods["singularName"], pods["namespaced"]) == ("Pod", "pod", True)
    assert {"create", "delete", "get", "list", "patch", "update", "watch"} <= set(pods["verbs"])
    assert "pods/status" in resources
    assert resources["nodes"]["namespaced"] is False
    assert resources["namespaces"]["namespaced"] is False
    for name in ("events", "configmaps", "services", "nodes/status"):
        assert name in resources, name


@pytest.mark.parametrize(
    ("group_version", "expected"),
    [
        ("batch/v1", {"jobs", "jobs/status"}),
        ("coordination.k8s.io/v1", {"leases"}),
        ("apps/v1", {"deployments", "statefulsets"}),
        ("apiextensions.k8s.io/v1", {"customresourcedefinitions"}),
        (AW_API_VERSION, {"appwrappers", "appwrappers/status"}),
    ],
)
async def test_group_version_resource_lists(
    http: Http, group_version: str, expected: set[str]
) -> None:
    body = (await http.request("GET", f"/apis/{group_version}")).json()
    assert body["groupVersion"] == group_version
    assert expected <= {r["name"] for r in body["resources"]}


async def test_aggregated_discovery_accept_header_gets_a_usable_answer(http: Http) -> None:
    for path in ("/api", "/apis"):
        resp = await http.request("GET", path, headers={"Accept": AGGREGATED_ACCEPT})
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("application/json")
        assert resp.json()["kind"] in ("APIVersions", "APIGroupList", "APIGroupDiscoveryList")


async def test_openapi_v3_paths_carry_gvk_and_field_validation(http: Http) -> None:
    index = (await http.request("GET", "/openapi/v3")).json()
    url = index["paths"]["api/v1"]["serverRelativeURL"]
    doc = (await http.request("GET", url)).json()
    collection = doc["paths"]["/api/v1/namespaces/{namespace}/pods"]
    post = collection["post"]
    assert post["x-kubernetes-group-version-kind"] == {"group": "", "version": "v1", "kind": "Pod"}
    assert post["x-kubernetes-action"] == "post"
    params = [p.get("name") for p in post.get("parameters", []) + collection.get("parameters", [])]
    assert "fieldValidation" in params
    item = doc["paths"]["/api/v1/namespaces/{namespace}/pods/{name}"]
    assert {"get", "put", "patch", "delete"} <= set(item)


async def test_dynamic_client_discovers_builtin_and_custom_resources(dyn: DynamicClient) -> None:
    pods = await dyn.resources.get(api_version="v1", kind="Pod")
    assert (pods.name, pods.namespaced) == ("pods", True)
    jobs = await dyn.resources.get(api_version="batch/v1", kind="Job")
    assert "status" in jobs.subresources
    aws = await dyn.resources.get(api_version=AW_API_VERSION, kind="AppWrapper")
    assert aws.name == "appwrappers" and aws.namespaced
    assert "status" in aws.subresources


# --- kubectl ----------------------------------------------------------------------------------


def test_kubectl_version_reaches_server(kubectl: Kubectl) -> None:
    out = json.loads(kubectl.ok("version", "-o", "json"))
    assert "serverVersion" in out


def test_kubectl_api_resources(kubectl: Kubectl) -> None:
    out = kubectl.ok("api-resources", "-o", "name")
    names = set(out.split())
    assert {
        "pods",
        "jobs.batch",
        "leases.coordination.k8s.io",
        "appwrappers.workload.codeflare.dev",
    } <= names


def _sample_pod(ns: str) -> str:
    doc = yaml.safe_load((DATA / "pod-sample.yaml").read_text())
    doc["metadata"]["namespace"] = ns
    return yaml.safe_dump(doc)


def test_kubectl_apply_creates_then_configures(kubectl: Kubectl, ns: str) -> None:
    manifest = _sample_pod(ns)
    assert kubectl.ok("apply", "-f", "-", stdin=manifest).strip() == "pod/sample-pod created"
    changed = manifest.replace("app: sample", "app: sample2")
    assert kubectl.ok("apply", "-f", "-", stdin=changed).strip() == "pod/sample-pod configured"
    live = kubectl.json("get", "pod", "sample-pod", "-n", ns)
    assert live["metadata"]["labels"] == {"app": "sample2"}
    assert "kubectl.kubernetes.io/last-applied-configuration" in live["metadata"]["annotations"]
    assert kubectl.ok("apply", "-f", "-", stdin=changed).strip() == "pod/sample-pod unchanged"


def test_kubectl_create_unknown_field_is_strict_decoding_error(kubectl: Kubectl, ns: str) -> None:
    body = pod("p1", ns)
    body["spec"]["containerz"] = []
    proc = kubectl.run("create", "-f", "-", stdin=json.dumps(body))
    assert proc.returncode != 0
    assert "Error from server (BadRequest)" in proc.stderr
    assert 'strict decoding error: unknown field "spec.containerz"' in proc.stderr


def test_kubectl_create_then_get_json_and_yaml(kubectl: Kubectl, ns: str) -> None:
    assert (
        kubectl.ok("create", "-f", "-", stdin=_sample_pod(ns)).strip() == "pod/sample-pod created"
    )
    as_json = kubectl.json("get", "pod", "sample-pod", "-n", ns)
    as_yaml = yaml.safe_load(kubectl.ok("get", "pod", "sample-pod", "-n", ns, "-o", "yaml"))
    assert as_json["kind"] == as_yaml["kind"] == "Pod"
    assert as_json["metadata"]["uid"] == as_yaml["metadata"]["uid"]
    listed = kubectl.json("get", "pods", "-n", ns)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["sample-pod"]


def test_kubectl_get_table(kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=_sample_pod(ns))
    lines = kubectl.ok("get", "pods", "-n", ns).splitlines()
    assert lines[0].split()[0] == "NAME"
    assert lines[1].split()[0] == "sample-pod"


def test_kubectl_get_missing_reports_not_found(kubectl: Kubectl, ns: str) -> None:
    proc = kubectl.run("get", "pod", "nope", "-n", ns)
    assert proc.returncode != 0
    assert 'Error from server (NotFound): pods "nope" not found' in proc.stderr


def test_kubectl_describe_pod(kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=_sample_pod(ns))
    out = kubectl.ok("describe", "pod", "sample-pod", "-n", ns)
    assert "Name:" in out and "sample-pod" in out
    assert f"Namespace:        {ns}" in out or f"Namespace:  {ns}" in out or ns in out
    assert "busybox:1.36" in out


def test_kubectl_delete_reports_deleted(kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=_sample_pod(ns))
    out = kubectl.ok("delete", "pod", "sample-pod", "-n", ns, "--wait=false")
    assert out.strip() == 'pod "sample-pod" deleted'


def test_kubectl_force_delete(kubectl: Kubectl, ns: str) -> None:
    body = pod("p1", ns, node_name="node-x", grace=30)
    kubectl.ok("create", "-f", "-", stdin=json.dumps(body))
    proc = kubectl.run("delete", "pod", "p1", "-n", ns, "--grace-period=0", "--force")
    assert proc.returncode == 0, proc.stderr
    assert 'pod "p1" force deleted' in proc.stdout
    assert kubectl.run("get", "pod", "p1", "-n", ns).returncode != 0


def test_kubectl_explain_pod_spec(kubectl: Kubectl) -> None:
    out = kubectl.ok("explain", "pods.spec.containers")
    assert "FIELD" in out or "FIELDS" in out


def test_kubectl_get_all_namespaces_table(kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=_sample_pod(ns))
    lines = kubectl.ok("get", "pods", "-A").splitlines()
    assert lines[0].split()[:2] == ["NAMESPACE", "NAME"]
    assert [ns, "sample-pod"] in [line.split()[:2] for line in lines[1:]]


def test_kubectl_describe_pod_lists_its_events(kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=_sample_pod(ns))
    live = kubectl.json("get", "pod", "sample-pod", "-n", ns)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "sample-pod.1", "namespace": ns},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "sample-pod",
            "namespace": ns,
            "uid": live["metadata"]["uid"],
        },
        "reason": "FidelityCheck",
        "message": "described by kubectl",
        "type": "Warning",
        "count": 1,
        "firstTimestamp": live["metadata"]["creationTimestamp"],
        "lastTimestamp": live["metadata"]["creationTimestamp"],
        "source": {"component": "fidelity"},
    }
    kubectl.ok("create", "-f", "-", stdin=json.dumps(event))
    out = kubectl.ok("describe", "pod", "sample-pod", "-n", ns)
    events_section = out.split("Events:", 1)[1]
    assert "FidelityCheck" in events_section and "described by kubectl" in events_section


def test_kubectl_patch_pod_all_types(kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=_sample_pod(ns))
    base = ["patch", "pod", "sample-pod", "-n", ns]
    kubectl.ok(*base, "--type", "merge", "-p", '{"metadata":{"labels":{"m":"1"}}}')
    kubectl.ok(
        *base, "--type", "json", "-p", '[{"op":"add","path":"/metadata/labels/j","value":"2"}]'
    )
    kubectl.ok(*base, "--type", "strategic", "-p", '{"metadata":{"labels":{"s":"3"}}}')
    kubectl.ok(*base, "-p", '{"metadata":{"labels":{"d":"4"}}}')  # default: strategic
    labels = kubectl.json("get", "pod", "sample-pod", "-n", ns)["metadata"]["labels"]
    assert labels == {"app": "sample", "m": "1", "j": "2", "s": "3", "d": "4"}


def test_kubectl_node_verbs_for_the_seed_scenario(kubectl: Kubectl, ns: str) -> None:
    """cordon / taint (out-of-service, reference §1.4) / untaint / describe on a Node."""
    node = f"{ns}-node"[:63]
    kubectl.ok(
        "create",
        "-f",
        "-",
        stdin=json.dumps({"apiVersion": "v1", "kind": "Node", "metadata": {"name": node}}),
    )
    assert kubectl.ok("cordon", node).strip() == f"node/{node} cordoned"
    taint = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute"
    assert kubectl.ok("taint", "nodes", node, taint).strip() == f"node/{node} tainted"
    live = kubectl.json("get", "node", node)
    assert live["spec"]["unschedulable"] is True
    assert [(t["key"], t["value"], t["effect"]) for t in live["spec"]["taints"]] == [
        ("node.kubernetes.io/out-of-service", "nodeshutdown", "NoExecute")
    ]
    kubectl.ok("taint", "nodes", node, "node.kubernetes.io/out-of-service-")
    assert not kubectl.json("get", "node", node)["spec"].get("taints")
    assert node in kubectl.ok("describe", "node", node)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["namespace", "{gen}"], "namespace/{gen} created"),
        (["configmap", "cm1", "-n", "{ns}", "--from-literal=a=b"], "configmap/cm1 created"),
        (["secret", "generic", "s1", "-n", "{ns}", "--from-literal=a=b"], "secret/s1 created"),
        (["serviceaccount", "sa1", "-n", "{ns}"], "serviceaccount/sa1 created"),
    ],
    ids=["namespace", "configmap", "secret", "serviceaccount"],
)
def test_kubectl_create_generators_send_protobuf(
    kubectl: Kubectl, ns: str, args: list[str], expected: str
) -> None:
    """These subcommands POST application/vnd.kubernetes.protobuf (FINDINGS.md F-1)."""
    names = {"ns": ns, "gen": f"{ns[:50]}-gen"}
    out = kubectl.ok("create", *(a.format(**names) for a in args)).strip()
    assert out == expected.format(**names)


def test_kubectl_create_generator_for_unsupported_kind_says_why(kubectl: Kubectl, ns: str) -> None:
    proc = kubectl.run("create", "job", "j1", "-n", ns, "--image=busybox")
    assert proc.returncode != 0
    assert "application/json" in proc.stderr and "protobuf" in proc.stderr
