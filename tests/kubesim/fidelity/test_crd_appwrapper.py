"""Issue 3 Acceptance 4: the MCAD v1 AppWrapper CRD (workload.codeflare.dev/v1beta1, status
subresource) applies with `kubectl apply`, and AppWrappers can be created, listed, watched and
status-patched through kubectl, CustomObjectsApi and the dynamic client (reference §2.11, §4.4)."""

from __future__ import annotations

import asyncio
import json

import pytest
import yaml
from fidelity_support import (
    AW_API_VERSION,
    AW_GROUP,
    AW_PLURAL,
    AW_VERSION,
    CRD_FILE,
    DATA,
    DEPLOY_CRD_FILE,
    MERGE_PATCH,
    JsonObj,
    Kubectl,
    appwrapper,
    eventually,
    load_crd,
    status_from_exception,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.rest import ApiException
from kubernetes_asyncio.dynamic import DynamicClient

PRELOAD_CRD = False  # this module installs it the way an operator would: kubectl apply
AW = "appwrappers.workload.codeflare.dev"


@pytest.fixture(scope="module")
def applied(kubectl: Kubectl) -> str:
    """`kubectl apply -f` the CRD file once for the module; returns kubectl's output."""
    proc = kubectl.run("apply", "-f", str(CRD_FILE))
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def _sample(ns: str, name: str = "sample-aw") -> JsonObj:
    return appwrapper(name, ns, labels={"team": "fidelity"})


# --- the CRD file itself ----------------------------------------------------------------------


def _schema_paths(schema: JsonObj, prefix: str = "") -> set[str]:
    paths = {prefix} if prefix else set()
    for name, sub in schema.get("properties", {}).items():
        paths |= _schema_paths(sub, f"{prefix}.{name}")
    if "items" in schema:
        paths |= _schema_paths(schema["items"], f"{prefix}[]")
    return paths


def test_deploy_crd_extends_the_tested_crd() -> None:
    """deploy/crd/appwrapper-crd.yaml (owned by the deploy issue) may add Clearance fields, but
    must keep the MCAD v1 identity, printer columns and every field of the tested shape."""
    deploy, tested = yaml.safe_load(DEPLOY_CRD_FILE.read_text()), load_crd()
    assert deploy["metadata"]["name"] == tested["metadata"]["name"]
    for key in ("group", "names", "scope"):
        assert deploy["spec"][key] == tested["spec"][key], key
    [d_version], [t_version] = deploy["spec"]["versions"], tested["spec"]["versions"]
    for key in ("name", "served", "storage", "subresources", "additionalPrinterColumns"):
        assert d_version[key] == t_version[key], key
    missing = _schema_paths(t_version["schema"]["openAPIV3Schema"]) - _schema_paths(
        d_version["schema"]["openAPIV3Schema"]
    )
    assert not missing, sorted(missing)


def test_crd_has_mcad_v1_shape() -> None:
    crd = load_crd()
    spec = crd["spec"]
    assert crd["metadata"]["name"] == AW
    assert (spec["group"], spec["scope"]) == (AW_GROUP, "Namespaced")
    assert spec["names"] == {
        "kind": "AppWrapper",
        "listKind": "AppWrapperList",
        "plural": "appwrappers",
        "singular": "appwrapper",
    }
    [version] = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["State"] == ".status.state"
    assert columns["Attempt"] == ".status.clearance.attempt"
    assert columns["Requeues"] == ".status.numberOfRequeueings"
    props = version["schema"]["openAPIV3Schema"]["properties"]
    item = props["spec"]["properties"]["resources"]["properties"]["GenericItems"]["items"]
    assert item["properties"]["generictemplate"]["x-kubernetes-preserve-unknown-fields"] is True
    status = props["status"]["properties"]
    for field in (
        "state",
        "Succeeded",
        "numberOfRequeueings",
        "requeueingTimeInSeconds",
        "conditions",
        "pendingpodconditions",
        "template",
    ):
        assert field in status, field


# --- kubectl apply and friends ----------------------------------------------------------------


def test_kubectl_apply_crd(applied: str, kubectl: Kubectl) -> None:
    assert applied == f"customresourcedefinition.apiextensions.k8s.io/{AW} created"
    again = kubectl.ok("apply", "-f", str(CRD_FILE)).strip()
    assert again == f"customresourcedefinition.apiextensions.k8s.io/{AW} unchanged"
    stored = kubectl.json("get", "crd", AW)
    assert stored["spec"]["names"]["kind"] == "AppWrapper"


def test_kubectl_apply_appwrapper_keeps_unknown_fields(
    applied: str, kubectl: Kubectl, ns: str
) -> None:
    manifest = yaml.safe_load((DATA / "appwrapper-sample.yaml").read_text())
    manifest["metadata"]["namespace"] = ns
    out = kubectl.ok("apply", "-f", "-", stdin=yaml.safe_dump(manifest)).strip()
    assert out == "appwrapper.workload.codeflare.dev/sample-aw created"
    live = kubectl.json("get", AW, "sample-aw", "-n", ns)
    assert live["spec"]["resources"] == manifest["spec"]["resources"]
    assert live["metadata"]["generation"] == 1


def test_kubectl_create_get_list_and_delete_appwrapper(
    applied: str, kubectl: Kubectl, ns: str
) -> None:
    for name in ("aw-b", "aw-a"):
        kubectl.ok("create", "-f", "-", stdin=json.dumps(_sample(ns, name)))
    listed = kubectl.json("get", "appwrappers", "-n", ns)
    assert [i["metadata"]["name"] for i in listed["items"]] == ["aw-a", "aw-b"]
    table = kubectl.ok("get", "appwrappers", "-n", ns).splitlines()
    assert [line.split()[0] for line in table[1:]] == ["aw-a", "aw-b"]
    out = kubectl.ok("delete", "appwrapper", "aw-a", "-n", ns).strip()
    assert out == 'appwrapper.workload.codeflare.dev "aw-a" deleted'


def test_kubectl_get_shows_printer_columns(applied: str, kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=json.dumps(_sample(ns, "aw-1")))
    header = kubectl.ok("get", "appwrappers", "-n", ns).splitlines()[0].split()
    assert header[:4] == ["NAME", "STATE", "ATTEMPT", "REQUEUES"]


def test_kubectl_status_merge_patch(applied: str, kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=json.dumps(_sample(ns, "aw-1")))
    patched = json.loads(
        kubectl.ok(
            "patch",
            AW,
            "aw-1",
            "-n",
            ns,
            "--subresource",
            "status",
            "--type",
            "merge",
            "-p",
            json.dumps(
                {
                    "status": {
                        "state": "Running",
                        "numberOfRequeueings": 2,
                        "clearance": {"attempt": 3},
                    }
                }
            ),
            "-o",
            "json",
        )
    )
    assert patched["status"]["state"] == "Running"
    assert patched["status"]["clearance"] == {"attempt": 3}
    assert patched["metadata"]["generation"] == 1


def test_kubectl_describe_appwrapper(applied: str, kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=json.dumps(_sample(ns, "aw-1")))
    out = kubectl.ok("describe", "appwrapper", "aw-1", "-n", ns)
    assert "aw-1" in out and "AppWrapper" in out


async def test_kubectl_watch_appwrappers(applied: str, kubectl: Kubectl, ns: str) -> None:
    async with kubectl.watch("get", AW, "-n", ns, "-w", "-o", "name") as lines:
        await asyncio.sleep(0.3)
        await kubectl.arun("create", "-f", "-", stdin=json.dumps(_sample(ns, "aw-w")))
        await lines.read_until(lambda line: line == "appwrapper.workload.codeflare.dev/aw-w")


# --- CustomObjectsApi -------------------------------------------------------------------------


async def test_custom_objects_create_get_list(
    applied: str, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    created = await custom.create_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, _sample(ns, "a1")
    )
    assert created["metadata"]["generation"] == 1
    got = await custom.get_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, "a1")
    assert got["spec"] == created["spec"]
    listed = await custom.list_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, label_selector="team=fidelity"
    )
    assert listed["kind"] == "AppWrapperList"
    assert [i["metadata"]["name"] for i in listed["items"]] == ["a1"]


async def test_custom_objects_status_merge_patch(
    applied: str, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    created = await custom.create_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, _sample(ns, "a1")
    )
    patched = await custom.patch_namespaced_custom_object_status(
        AW_GROUP,
        AW_VERSION,
        ns,
        AW_PLURAL,
        "a1",
        {"status": {"state": "Pending", "numberOfRequeueings": 1}, "spec": {"priority": 99}},
        _content_type=MERGE_PATCH,
    )
    assert patched["status"] == {"state": "Pending", "numberOfRequeueings": 1}
    assert patched["spec"] == created["spec"], "/status must not change spec"
    assert patched["metadata"]["generation"] == 1
    # and the main endpoint ignores status
    main = await custom.patch_namespaced_custom_object(
        AW_GROUP,
        AW_VERSION,
        ns,
        AW_PLURAL,
        "a1",
        {"status": {"state": "Running"}},
        _content_type=MERGE_PATCH,
    )
    assert main["status"]["state"] == "Pending"


async def test_custom_objects_watch_sees_lifecycle(
    applied: str, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    created = await custom.create_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, _sample(ns, "a1")
    )

    async def lifecycle() -> None:
        await asyncio.sleep(0.2)
        await custom.patch_namespaced_custom_object_status(
            AW_GROUP,
            AW_VERSION,
            ns,
            AW_PLURAL,
            "a1",
            {"status": {"state": "Running"}},
            _content_type=MERGE_PATCH,
        )
        await custom.delete_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, "a1")

    seen: list[tuple[str, str | None]] = []
    task = asyncio.create_task(lifecycle())
    async with asyncio.timeout(10), watch.Watch() as w:
        async for event in w.stream(
            custom.list_namespaced_custom_object,
            AW_GROUP,
            AW_VERSION,
            ns,
            AW_PLURAL,
            resource_version=created["metadata"]["resourceVersion"],
            timeout_seconds=5,
        ):
            seen.append((event["type"], event["object"].get("status", {}).get("state")))
            if event["type"] == "DELETED":
                w.stop()
    await task
    assert seen == [("MODIFIED", "Running"), ("DELETED", "Running")]


# --- dynamic client ---------------------------------------------------------------------------


async def test_dynamic_client_finds_and_uses_appwrappers(
    applied: str, dyn: DynamicClient, ns: str
) -> None:
    aws = await dyn.resources.get(api_version=AW_API_VERSION, kind="AppWrapper")
    created = await dyn.create(aws, body=_sample(ns, "d1"), namespace=ns)
    assert created.metadata.name == "d1"
    status = aws.subresources["status"]
    patched = await dyn.patch(
        status,
        body={"status": {"state": "Running"}},
        name="d1",
        namespace=ns,
        content_type=MERGE_PATCH,
    )
    assert patched.status.state == "Running"
    listed = await dyn.get(aws, namespace=ns)
    assert listed.kind == "AppWrapperList"
    assert [i.metadata.name for i in listed.items] == ["d1"]


def test_kubectl_apply_appwrapper_twice_configures(applied: str, kubectl: Kubectl, ns: str) -> None:
    """kubectl apply on a CR computes a JSON merge patch (no SMP for CRs) — must be accepted."""
    manifest = _sample(ns, "aw-apply")
    kubectl.ok("apply", "-f", "-", stdin=json.dumps(manifest))
    manifest["spec"]["priority"] = 7
    out = kubectl.ok("apply", "-f", "-", stdin=json.dumps(manifest)).strip()
    assert out == "appwrapper.workload.codeflare.dev/aw-apply configured"
    live = kubectl.json("get", AW, "aw-apply", "-n", ns)
    assert live["spec"]["priority"] == 7
    assert live["metadata"]["generation"] == 2


def test_kubectl_label_appwrapper(applied: str, kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=json.dumps(_sample(ns, "aw-l")))
    kubectl.ok("label", AW, "aw-l", "-n", ns, "stage=two")
    assert kubectl.json("get", AW, "aw-l", "-n", ns)["metadata"]["labels"]["stage"] == "two"


async def test_kubectl_wait_for_status_jsonpath(
    applied: str, kubectl: Kubectl, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    await custom.create_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, _sample(ns, "aw-wait")
    )
    waiter = asyncio.create_task(
        kubectl.arun(
            "wait",
            f"{AW}/aw-wait",
            "-n",
            ns,
            "--for=jsonpath={.status.state}=Running",
            "--timeout=10s",
        )
    )
    await asyncio.sleep(0.5)
    await custom.patch_namespaced_custom_object_status(
        AW_GROUP,
        AW_VERSION,
        ns,
        AW_PLURAL,
        "aw-wait",
        {"status": {"state": "Running"}},
        _content_type=MERGE_PATCH,
    )
    proc = await waiter
    assert proc.returncode == 0, proc.stderr


# --- CR edge cases Clearance relies on ----------------------------------------------------------


async def test_cr_clash_with_finalizer_held_appwrapper_says_being_deleted(
    applied: str, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    body = _sample(ns, "held")
    body["metadata"]["finalizers"] = ["clearance.example.com/hold"]
    await custom.create_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, body)
    pending = await custom.delete_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, "held"
    )
    assert pending["metadata"]["deletionTimestamp"]
    with pytest.raises(ApiException) as info:
        await custom.create_namespaced_custom_object(
            AW_GROUP, AW_VERSION, ns, AW_PLURAL, _sample(ns, "held")
        )
    status_from_exception(info.value).expect_failure(
        code=409,
        reason="AlreadyExists",
        message='object is being deleted: appwrappers.workload.codeflare.dev "held" already exists',
    )


async def test_cr_status_replace_with_stale_rv_is_409(
    applied: str, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    created = await custom.create_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, _sample(ns, "a1")
    )
    first = dict(created, status={"state": "Pending"})
    await custom.replace_namespaced_custom_object_status(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, "a1", first
    )
    stale = dict(created, status={"state": "Running"})
    with pytest.raises(ApiException) as info:
        await custom.replace_namespaced_custom_object_status(
            AW_GROUP, AW_VERSION, ns, AW_PLURAL, "a1", stale
        )
    status_from_exception(info.value).expect_failure(
        code=409,
        reason="Conflict",
        message='Operation cannot be fulfilled on appwrappers.workload.codeflare.dev "a1"',
    )


async def test_custom_objects_json_patch_list_body_removes_finalizer(
    applied: str, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    body = _sample(ns, "a1")
    body["metadata"]["finalizers"] = ["clearance.example.com/a", "clearance.example.com/b"]
    await custom.create_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, body)
    patched = await custom.patch_namespaced_custom_object(
        AW_GROUP,
        AW_VERSION,
        ns,
        AW_PLURAL,
        "a1",
        [
            {"op": "test", "path": "/metadata/finalizers/0", "value": "clearance.example.com/a"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ],
    )
    assert patched["metadata"]["finalizers"] == ["clearance.example.com/b"]


async def test_cr_foreground_delete_is_pending_object(
    applied: str, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    await custom.create_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, _sample(ns, "a1")
    )
    result = await custom.delete_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, "a1", propagation_policy="Foreground"
    )
    assert result["kind"] == "AppWrapper"
    assert "foregroundDeletion" in result["metadata"]["finalizers"]


async def test_cr_cluster_wide_list_with_namespace_field_selector(
    applied: str, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    await custom.create_namespaced_custom_object(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, _sample(ns, "a1")
    )
    listed = await custom.list_cluster_custom_object(
        AW_GROUP, AW_VERSION, AW_PLURAL, field_selector=f"metadata.namespace={ns}"
    )
    assert [(i["metadata"]["namespace"], i["metadata"]["name"]) for i in listed["items"]] == [
        (ns, "a1")
    ]


def test_kubectl_apply_deploy_crd_over_the_tested_one(applied: str, kubectl: Kubectl) -> None:
    """The deploy manifest applies on top (after the AppWrapper tests: it changes the schema)."""
    out = kubectl.ok("apply", "-f", str(DEPLOY_CRD_FILE)).strip()
    assert out in (
        f"customresourcedefinition.apiextensions.k8s.io/{AW} configured",
        f"customresourcedefinition.apiextensions.k8s.io/{AW} unchanged",
    )


def _widget_crd() -> JsonObj:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.fidelity.example.com"},
        "spec": {
            "group": "fidelity.example.com",
            "names": {
                "kind": "Widget",
                "listKind": "WidgetList",
                "plural": "widgets",
                "singular": "widget",
            },
            "scope": "Namespaced",
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


async def test_crd_registered_later_is_found_after_discovery_refresh(
    applied: str, dyn: DynamicClient, kubectl: Kubectl, ns: str
) -> None:
    """§2.11/§4.4: registering a CRD serves its plural and shows up in discovery; the dynamic
    client's cached discovery needs a refresh (invalidate_cache) to see it."""
    await kubectl.arun("apply", "-f", "-", stdin=json.dumps(_widget_crd()))
    await dyn.resources.invalidate_cache()
    widgets = await dyn.resources.get(api_version="fidelity.example.com/v1", kind="Widget")
    body = {
        "apiVersion": "fidelity.example.com/v1",
        "kind": "Widget",
        "metadata": {"name": "w1", "namespace": ns},
        "spec": {"anything": [1, 2]},
    }
    created = await dyn.create(widgets, body=body, namespace=ns)
    assert created.spec.anything == [1, 2]
    assert created.metadata.generation == 1
    proc = await kubectl.arun("get", "widgets", "-n", ns, "-o", "name")
    assert proc.stdout.strip() == "widget.fidelity.example.com/w1", proc.stderr


async def test_deleting_a_crd_stops_serving_its_plural(
    applied: str, kubectl: Kubectl, custom: k8s.CustomObjectsApi, ns: str
) -> None:
    crd = _widget_crd()
    crd["metadata"]["name"] = "gadgets.fidelity.example.com"
    crd["spec"]["names"] = {
        "kind": "Gadget",
        "listKind": "GadgetList",
        "plural": "gadgets",
        "singular": "gadget",
    }
    await kubectl.arun("apply", "-f", "-", stdin=json.dumps(crd))
    listed = await custom.list_namespaced_custom_object("fidelity.example.com", "v1", ns, "gadgets")
    assert listed["kind"] == "GadgetList"
    proc = await kubectl.arun("delete", "crd", "gadgets.fidelity.example.com")
    assert proc.returncode == 0, proc.stderr

    async def gone() -> bool:
        try:
            await custom.list_namespaced_custom_object("fidelity.example.com", "v1", ns, "gadgets")
        except ApiException as exc:
            return exc.status == 404
        return False

    await eventually(gone, what="gadgets to stop being served")
