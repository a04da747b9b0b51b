"""Resource quantities are stored the way the API server stores them (issue 19 Build 1).

Oracle: reference cluster-faults-and-workloads.md §2 and apimachinery pkg/api/resource
quantity.go (canonical form, `MarshalJSON` always a quoted string, `UnmarshalJSON` accepts JSON
numbers); core/v1 defaults.go `SetDefaults_ResourceList` (round up to milli); core validation
`ValidateResourceRequirements` (422 rules); a malformed quantity is a decode error, answered
`400 BadRequest "Pod in version "v1" cannot be handled as a Pod: quantities must match …"`
(the message users report from real servers, e.g. kubeflow/spark-operator#2199,
strimzi/strimzi-kafka-operator#8430). Each case runs through kubernetes-asyncio and kubectl.
"""

from __future__ import annotations

import json
from typing import Any

from fidelity_support import (
    AW_API_VERSION,
    AW_GROUP,
    AW_PLURAL,
    AW_VERSION,
    Http,
    JsonObj,
    Kubectl,
    appwrapper,
    outcome_from_kubectl,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

GPU = "nvidia.com/gpu"
DECODE_ERROR = (
    'Pod in version "v1" cannot be handled as a Pod: quantities must match the regular '
    "expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)


def pod_with(name: str, ns: str, resources: JsonObj, **spec: Any) -> JsonObj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "containers": [{"name": "main", "image": "busybox", "resources": resources}],
            **spec,
        },
    }


async def raw_get(http: Http, path: str) -> JsonObj:
    resp = await http.request("GET", path)
    assert resp.status == 200, resp.body
    out: JsonObj = resp.json()
    return out


async def test_integer_quantities_are_stored_as_canonical_strings_via_kubernetes_asyncio(
    core: k8s.CoreV1Api, http: Http, ns: str
) -> None:
    """MCAD's examples write `nvidia.com/gpu: 0` as a JSON number; the server answers "0"."""
    # A plain number stays decimal SI: 1073741824 does not become "1Gi", 1000000 is "1M".
    limits = {GPU: 0, "cpu": 1, "memory": 1000000, "ephemeral-storage": 1073741824}
    expected = {GPU: "0", "cpu": "1", "memory": "1M", "ephemeral-storage": "1073741824"}
    created = await core.create_namespaced_pod(ns, pod_with("p", ns, {"limits": limits}))
    assert created.spec.containers[0].resources.limits == expected
    wire = await raw_get(http, f"/api/v1/namespaces/{ns}/pods/p")
    resources = wire["spec"]["containers"][0]["resources"]
    assert resources["limits"] == expected
    # Defaulting copies limits into requests: canonical too, and JSON strings on the wire.
    assert resources["requests"] == expected
    assert all(isinstance(v, str) for v in resources["requests"].values())


async def test_float_quantities_are_stored_as_canonical_strings(http: Http, ns: str) -> None:
    body = pod_with("p", ns, {"requests": {"cpu": 0.1, "memory": 0.5}})
    resp = await http.request("POST", f"/api/v1/namespaces/{ns}/pods", json_body=body)
    assert resp.status == 201, resp.body
    assert resp.json()["spec"]["containers"][0]["resources"]["requests"] == {
        "cpu": "100m",
        "memory": "500m",
    }


def test_non_canonical_strings_are_canonicalized_via_kubectl(kubectl: Kubectl, ns: str) -> None:
    requests = {"cpu": "1000m", "memory": "1024Mi", "ephemeral-storage": "1000"}
    limits = {"cpu": "1500m", "memory": "1.5Gi", "ephemeral-storage": "1e3"}
    body = pod_with("p", ns, {"requests": requests, "limits": limits})
    kubectl.ok("create", "-f", "-", stdin=json.dumps(body))
    got = kubectl.json("get", "pod", "p", "-n", ns)["spec"]["containers"][0]["resources"]
    assert got["requests"] == {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1k"}
    assert got["limits"] == {"cpu": "1500m", "memory": "1536Mi", "ephemeral-storage": "1e3"}


def test_integer_quantities_are_stored_as_canonical_strings_via_kubectl(
    kubectl: Kubectl, ns: str
) -> None:
    limits = {GPU: 0, "cpu": 2, "memory": 1000000}
    kubectl.ok("create", "-f", "-", stdin=json.dumps(pod_with("p", ns, {"limits": limits})))
    got = kubectl.json("get", "pod", "p", "-n", ns)["spec"]["containers"][0]["resources"]
    assert got["limits"] == {GPU: "0", "cpu": "2", "memory": "1M"}
    assert got["requests"] == got["limits"]


async def test_non_canonical_strings_are_canonicalized_via_kubernetes_asyncio(
    core: k8s.CoreV1Api, http: Http, ns: str
) -> None:
    # ("01" would be kept as written: ParseQuantity's fast path strips the zero, then reuses
    # the input string, a quirk kubesim reproduces.)
    requests = {"cpu": "1000m", "memory": "1024Mi", GPU: "1000m"}
    limits = {"cpu": "1500m", "memory": "1.5Gi", GPU: "1000m"}
    body = pod_with("p", ns, {"requests": requests, "limits": limits})
    created = await core.create_namespaced_pod(ns, body)
    resources = created.spec.containers[0].resources
    assert resources.requests == {"cpu": "1", "memory": "1Gi", GPU: "1"}
    assert resources.limits == {"cpu": "1500m", "memory": "1536Mi", GPU: "1"}
    assert resources.requests[GPU] == resources.limits[GPU]
    read = await core.read_namespaced_pod("p", ns)
    assert read.spec.containers[0].resources.requests == resources.requests


def test_resource_list_values_round_up_to_milli(kubectl: Kubectl, ns: str) -> None:
    """SetDefaults_ResourceList: `val.RoundUp(milliScale)` for requests/limits/overhead."""
    body = pod_with("p", ns, {"requests": {"cpu": "1n", "memory": "1.2345"}})
    kubectl.ok("create", "-f", "-", stdin=json.dumps(body))
    got = kubectl.json("get", "pod", "p", "-n", ns)["spec"]["containers"][0]["resources"]
    assert got["requests"] == {"cpu": "1m", "memory": "1235m"}


async def test_init_containers_and_overhead_are_canonicalized(http: Http, ns: str) -> None:
    body = pod_with("p", ns, {"limits": {"cpu": 2}}, overhead={"cpu": "250m", "memory": 1024000})
    body["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox", "resources": {"requests": {"memory": "2048Ki"}}}
    ]
    resp = await http.request("POST", f"/api/v1/namespaces/{ns}/pods", json_body=body)
    assert resp.status == 201, resp.body
    spec = resp.json()["spec"]
    assert spec["overhead"] == {"cpu": "250m", "memory": "1024k"}
    assert spec["initContainers"][0]["resources"]["requests"] == {"memory": "2Mi"}
    assert spec["containers"][0]["resources"]["limits"] == {"cpu": "2"}


def test_job_pod_template_quantities_are_canonicalized_via_kubectl(
    kubectl: Kubectl, ns: str
) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "j", "namespace": ns},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "main",
                            "image": "busybox",
                            "resources": {"limits": {GPU: 0, "cpu": "0.5"}},
                        }
                    ],
                }
            }
        },
    }
    kubectl.ok("create", "-f", "-", stdin=json.dumps(job))
    got = kubectl.json("get", "job", "j", "-n", ns)
    assert got["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"] == {
        GPU: "0",
        "cpu": "500m",
    }


async def test_deployment_and_statefulset_templates_are_canonicalized(
    api: k8s.ApiClient, ns: str
) -> None:
    apps = k8s.AppsV1Api(api)
    template = {
        "metadata": {"labels": {"app": "a"}},
        "spec": {
            "containers": [
                {"name": "m", "image": "busybox", "resources": {"requests": {"memory": "1024Ki"}}}
            ]
        },
    }
    spec = {"selector": {"matchLabels": {"app": "a"}}, "template": template}
    deploy = await apps.create_namespaced_deployment(ns, {"metadata": {"name": "d"}, "spec": spec})
    sts = await apps.create_namespaced_stateful_set(
        ns, {"metadata": {"name": "s"}, "spec": {**spec, "serviceName": "s"}}
    )
    for obj in (deploy, sts):
        assert obj.spec.template.spec.containers[0].resources.requests == {"memory": "1Mi"}


async def test_node_capacity_and_resource_quota_are_canonicalized(
    core: k8s.CoreV1Api, ns: str
) -> None:
    node = await core.create_node(
        {"metadata": {"name": f"{ns}-n"}, "status": {"capacity": {"cpu": 8, "memory": "32768Mi"}}}
    )
    assert node.status.capacity == {"cpu": "8", "memory": "32Gi"}
    updated = await core.patch_node_status(
        f"{ns}-n", {"status": {"allocatable": {"cpu": "7500m", "pods": 110}}}
    )
    assert updated.status.allocatable == {"cpu": "7500m", "pods": "110"}
    quota = await core.create_namespaced_resource_quota(
        ns, {"metadata": {"name": "q"}, "spec": {"hard": {"requests.cpu": 4000, "pods": "10"}}}
    )
    assert quota.spec.hard == {"requests.cpu": "4k", "pods": "10"}


async def test_updates_and_patches_are_canonicalized(core: k8s.CoreV1Api, ns: str) -> None:
    await core.create_node({"metadata": {"name": f"{ns}-m"}})
    node = await core.patch_node(
        f"{ns}-m",
        [{"op": "add", "path": "/metadata/labels", "value": {"x": "y"}}],
    )
    node_body = core.api_client.sanitize_for_serialization(node)
    node_body["status"] = {"capacity": {"cpu": "2000m"}}
    replaced = await core.replace_node_status(f"{ns}-m", node_body)
    assert replaced.status.capacity == {"cpu": "2"}


async def test_malformed_quantity_is_a_400_decode_error_via_kubernetes_asyncio(
    core: k8s.CoreV1Api, ns: str
) -> None:
    for bad in ("abc", "1 Gi", True):
        try:
            await core.create_namespaced_pod(ns, pod_with("p", ns, {"limits": {"cpu": bad}}))
        except ApiException as exc:
            status = json.loads(exc.body)
            assert exc.status == 400
            assert status["reason"] == "BadRequest"
            assert status["message"] == DECODE_ERROR
        else:
            raise AssertionError(f"cpu {bad!r} was accepted")


def test_malformed_quantity_is_a_400_decode_error_via_kubectl(kubectl: Kubectl, ns: str) -> None:
    body = pod_with("p", ns, {"requests": {"memory": "32MMi"}})
    outcome = outcome_from_kubectl(kubectl.run("create", "-f", "-", stdin=json.dumps(body)))
    outcome.expect_failure(
        code=400,
        reason="BadRequest",
        message='Pod in version "v1" cannot be handled as a Pod: '
        "unable to parse quantity's suffix",
    )
    assert kubectl.run("get", "pod", "p", "-n", ns).returncode != 0  # nothing was stored


async def test_negative_request_is_422_with_the_field_path(core: k8s.CoreV1Api, ns: str) -> None:
    try:
        await core.create_namespaced_pod(ns, pod_with("p", ns, {"requests": {"cpu": -1}}))
    except ApiException as exc:
        status = json.loads(exc.body)
        assert exc.status == 422 and status["reason"] == "Invalid"
        assert status["details"]["causes"] == [
            {
                "reason": "FieldValueInvalid",
                "field": "spec.containers[0].resources.requests[cpu]",
                "message": 'Invalid value: "-1": must be greater than or equal to 0',
            }
        ]
    else:
        raise AssertionError("a negative request was accepted")


def test_extended_resources_follow_the_no_overcommit_rules_via_kubectl(
    kubectl: Kubectl, ns: str
) -> None:
    cases = [
        ({"requests": {GPU: 1}}, "Limit must be set for non overcommitable resources"),
        ({"requests": {GPU: 1}, "limits": {GPU: 2}}, f"must be equal to {GPU} limit of 2"),
        ({"limits": {GPU: "500m"}}, "must be an integer"),
        ({"requests": {"cpu": 2}, "limits": {"cpu": 1}}, "must be less than or equal to cpu"),
    ]
    for i, (resources, message) in enumerate(cases):
        body = pod_with(f"p{i}", ns, resources)
        outcome = outcome_from_kubectl(kubectl.run("create", "-f", "-", stdin=json.dumps(body)))
        outcome.expect_failure(code=422, reason="Invalid", message=message)
    ok = pod_with("ok", ns, {"limits": {GPU: 1}})  # limit only: request defaulted to it
    kubectl.ok("create", "-f", "-", stdin=json.dumps(ok))


async def test_custom_resources_are_not_canonicalized(
    custom: k8s.CustomObjectsApi, ns: str
) -> None:
    """Reference §2: a CR keeps `1000m` (grafana/tempo-operator#1613); only pods are canonical."""
    aw = appwrapper("aw", ns)
    item_template = aw["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    containers = item_template["spec"]["template"]["spec"]["containers"]
    containers[0]["resources"] = {"limits": {"cpu": "1000m", GPU: 0}}
    created = await custom.create_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, aw)
    assert created["apiVersion"] == AW_API_VERSION
    stored = created["spec"]["resources"]["GenericItems"][0]["generictemplate"]
    assert stored["spec"]["template"]["spec"]["containers"][0]["resources"] == {
        "limits": {"cpu": "1000m", GPU: 0}
    }
