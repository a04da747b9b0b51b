"""Issue 17 Build 4 / Acceptance 4: kubesim rejects what a real API server rejects, in the same
shape, through kubectl, kubernetes-asyncio (typed + CustomObjectsApi) and the dynamic client.

References (the oracle for every expected string here): the shared reference
kubernetes-semantics.md (§ "Invalid object → 422 Invalid with details.causes[{reason, message,
field}]", the `Status` shape and the 422 row of the error table), and the sources it points to:
* custom resources: apiextensions-apiserver pkg/apiserver/validation/validation.go
  (`kubeOpenAPIResultToFieldErrors`), kube-openapi pkg/validation/errors/schema.go (messages),
  pkg/apiserver/schema/objectmeta/validation.go (embedded resources);
* all kinds: apimachinery pkg/api/errors/errors.go `NewInvalid` (`<Kind>.<group> "<name>" is
  invalid: ...`, `details.{name,group,kind,causes[{reason,message,field}]}`) and
  pkg/util/validation/field/errors.go (`reason` = FieldValue*, `message` = ErrorBody);
* built-in kinds: a wrong JSON type fails decoding, not validation: create/update answer
  400 (apiserver endpoints/handlers/rest.go `transformDecodeError`), a patch 422 on `patch`
  (handlers/patch.go); missing required and enum violations are 422 from the kind's
  validation (pkg/apis/core/validation: `validateRestartPolicy`, container name/image).
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from fidelity_support import (
    AW_GROUP,
    AW_PLURAL,
    AW_VERSION,
    DEPLOY_CRD_FILE,
    MERGE_PATCH,
    Client,
    JsonObj,
    Kubectl,
    ServerHandle,
    appwrapper,
    outcome_from_kubectl,
    pod,
    status_from_exception,
)
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.rest import ApiException

PRELOAD_CRD = False  # the module installs the CRD the project ships (deploy/crd)
CRD_PATH = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{AW_PLURAL}.{AW_GROUP}"
KIND = "AppWrapper.workload.codeflare.dev"
PRIORITY_TYPE = 'Invalid value: "string": spec.priority in body must be of type integer: "string"'


@pytest.fixture(scope="module", autouse=True)
def deployed_crd(server: ServerHandle) -> JsonObj:
    crd: JsonObj = yaml.safe_load(DEPLOY_CRD_FILE.read_text())
    server.register_crd(crd)
    return crd


def bad_priority(ns: str, name: str) -> JsonObj:
    aw = appwrapper(name, ns)
    aw["spec"]["priority"] = "high"
    return aw


async def test_wrong_type_in_a_custom_resource_is_422_with_the_real_causes(
    client: Client, ns: str
) -> None:
    outcome = await client.create(bad_priority(ns, "typed-wrong"))
    outcome.expect_failure(code=422, reason="Invalid", message=f"spec.priority: {PRIORITY_TYPE}")
    if outcome.status is not None:  # kubectl shows only the message
        assert outcome.status["message"] == (
            f'{KIND} "typed-wrong" is invalid: spec.priority: {PRIORITY_TYPE}'
        )
        assert outcome.status["details"] == {
            "name": "typed-wrong",
            "group": AW_GROUP,
            "kind": "AppWrapper",
            "causes": [
                {
                    "reason": "FieldValueTypeInvalid",
                    "message": PRIORITY_TYPE,
                    "field": "spec.priority",
                }
            ],
        }


async def test_missing_required_fields_in_a_custom_resource_are_422_required_value(
    client: Client, ns: str
) -> None:
    aw = appwrapper("required", ns)
    item = aw["spec"]["resources"]["GenericItems"][0]
    del item["custompodresources"][0]["requests"]
    del item["generictemplate"]["kind"]  # an embedded resource needs apiVersion and kind
    outcome = await client.create(aw)
    outcome.expect_failure(code=422, reason="Invalid")
    prefix = "spec.resources.GenericItems[0]"
    for field in (f"{prefix}.custompodresources[0].requests", f"{prefix}.generictemplate.kind"):
        assert f"{field}: Required value" in outcome.message
    if outcome.status is not None:
        causes = outcome.status["details"]["causes"]
        assert sorted((c["reason"], c["field"]) for c in causes) == [
            ("FieldValueRequired", f"{prefix}.custompodresources[0].requests"),
            ("FieldValueRequired", f"{prefix}.generictemplate.kind"),
        ]


async def test_enum_violation_in_a_custom_resource_is_422_unsupported_value(
    client: Client, ns: str
) -> None:
    aw = appwrapper("enum", ns)
    aw["spec"]["schedulingSpec"]["requeuing"]["finalizerRemoval"] = "Sometimes"
    outcome = await client.create(aw)
    outcome.expect_failure(
        code=422,
        reason="Invalid",
        message='spec.schedulingSpec.requeuing.finalizerRemoval: Unsupported value: "Sometimes": '
        'supported values: "Never", "AfterForceDeletion"',
    )
    if outcome.status is not None:
        [cause] = outcome.status["details"]["causes"]
        assert cause["reason"] == "FieldValueNotSupported"


def test_kubectl_prints_the_invalid_custom_resource_like_a_real_server(
    kubectl: Kubectl, ns: str
) -> None:
    aw = bad_priority(ns, "kubectl-wrong")
    aw["spec"]["schedulingSpec"]["requeuing"]["finalizerRemoval"] = "Sometimes"
    proc = kubectl.run("apply", "-f", "-", stdin=yaml.safe_dump(aw))
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        'The AppWrapper "kubectl-wrong" is invalid: ',
        '* spec.priority: Invalid value: "string": spec.priority in body must be of type '
        'integer: "string"',
        '* spec.schedulingSpec.requeuing.finalizerRemoval: Unsupported value: "Sometimes": '
        'supported values: "Never", "AfterForceDeletion"',
    ]


async def test_a_wrong_type_in_a_built_in_kind_fails_decoding_with_400(
    client: Client, ns: str
) -> None:
    bad = pod("decode", ns)
    bad["spec"]["terminationGracePeriodSeconds"] = "thirty"
    outcome = await client.create(bad)
    outcome.expect_failure(
        code=400,
        reason="BadRequest",
        message='Pod in version "v1" cannot be handled as a Pod: json: cannot unmarshal string '
        "into Go struct field PodSpec.spec.terminationGracePeriodSeconds of type int64",
    )


async def test_missing_required_and_enum_violation_in_a_built_in_kind_are_422(
    client: Client, ns: str
) -> None:
    bad = pod("required", ns)
    del bad["spec"]["containers"][0]["image"]
    bad["spec"]["restartPolicy"] = "Sometimes"
    outcome = await client.create(bad)
    outcome.expect_failure(code=422, reason="Invalid")
    assert "spec.containers[0].image: Required value" in outcome.message
    assert (
        'spec.restartPolicy: Unsupported value: "Sometimes": supported values: "Always", '
        '"OnFailure", "Never"'
    ) in outcome.message
    if outcome.status is not None:
        assert outcome.status["message"].startswith('Pod "required" is invalid: [')
        assert outcome.status["details"]["kind"] == "Pod"
        assert "group" not in outcome.status["details"]
        assert [(c["reason"], c["field"]) for c in outcome.status["details"]["causes"]] == [
            ("FieldValueRequired", "spec.containers[0].image"),
            ("FieldValueNotSupported", "spec.restartPolicy"),
        ]


def test_a_patch_that_breaks_a_built_in_type_is_422_on_patch(kubectl: Kubectl, ns: str) -> None:
    kubectl.ok("create", "-f", "-", stdin=json.dumps(pod("patched", ns)))
    proc = kubectl.run(
        "patch", "pod", "patched", "-n", ns, "-p", '{"spec":{"activeDeadlineSeconds":"x"}}'
    )
    assert proc.returncode == 1
    assert (
        'patch: Invalid value: "map[spec:map[activeDeadlineSeconds:x]]": json: cannot unmarshal '
        "string into Go struct field PodSpec.spec.activeDeadlineSeconds of type int64"
    ) in proc.stderr


async def test_status_writes_are_validated_against_the_status_schema(
    custom: k8s.CustomObjectsApi, server: ServerHandle, ns: str
) -> None:
    server.create(f"/apis/{AW_GROUP}/{AW_VERSION}/namespaces/{ns}/{AW_PLURAL}", appwrapper("s", ns))
    with pytest.raises(ApiException) as caught:
        await custom.patch_namespaced_custom_object_status(
            AW_GROUP,
            AW_VERSION,
            ns,
            AW_PLURAL,
            "s",
            {"status": {"numberOfRequeueings": "many", "controllerfirsttimestamp": "yesterday"}},
            _content_type=MERGE_PATCH,
        )
    outcome = status_from_exception(caught.value)
    assert outcome.code == 422 and outcome.status is not None
    assert [(c["reason"], c["field"]) for c in outcome.status["details"]["causes"]] == [
        ("FieldValueTypeInvalid", "status.numberOfRequeueings"),
        ("FieldValueTypeInvalid", "status.controllerfirsttimestamp"),
    ]
    assert outcome.status["details"]["causes"][1]["message"] == (
        'Invalid value: "yesterday": status.controllerfirsttimestamp in body must be of type '
        'date-time: "yesterday"'
    )


async def test_status_writes_prune_unknown_fields_but_keep_preserved_bookkeeping(
    custom: k8s.CustomObjectsApi, server: ServerHandle, ns: str
) -> None:
    server.create(f"/apis/{AW_GROUP}/{AW_VERSION}/namespaces/{ns}/{AW_PLURAL}", appwrapper("p", ns))
    status = {
        "state": "Running",
        "bogus": {"x": 1},
        "conditions": [{"type": "Dispatched", "status": "True", "extra": "dropped"}],
        "clearance": {"attempt": 2, "anything": {"kept": True}},
    }
    stored = await custom.patch_namespaced_custom_object_status(
        AW_GROUP, AW_VERSION, ns, AW_PLURAL, "p", {"status": status}, _content_type=MERGE_PATCH
    )
    assert stored["status"] == {
        "state": "Running",
        "conditions": [{"type": "Dispatched", "status": "True"}],
        "clearance": {"attempt": 2, "anything": {"kept": True}},
    }


async def test_null_in_a_non_nullable_custom_field_means_unset(
    custom: k8s.CustomObjectsApi, ns: str
) -> None:
    aw = appwrapper("nulls", ns)
    aw["spec"]["priority"] = None
    stored = await custom.create_namespaced_custom_object(AW_GROUP, AW_VERSION, ns, AW_PLURAL, aw)
    assert "priority" not in stored["spec"]


async def test_an_invalid_value_stored_under_a_looser_crd_ratchets_on_later_writes(
    custom: k8s.CustomObjectsApi, server: ServerHandle, deployed_crd: JsonObj, ns: str
) -> None:
    loose = copy.deepcopy(deployed_crd)
    spec_props = loose["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec_props["properties"]["priority"] = {"x-kubernetes-preserve-unknown-fields": True}
    _replace_crd(server, loose)
    try:
        await custom.create_namespaced_custom_object(
            AW_GROUP, AW_VERSION, ns, AW_PLURAL, bad_priority(ns, "legacy")
        )
    finally:
        _replace_crd(server, deployed_crd)
    patched = await custom.patch_namespaced_custom_object(
        AW_GROUP,
        AW_VERSION,
        ns,
        AW_PLURAL,
        "legacy",
        {"metadata": {"labels": {"a": "b"}}, "spec": {"schedulingSpec": {"minAvailable": 3}}},
        _content_type=MERGE_PATCH,
    )
    assert patched["spec"]["priority"] == "high"  # unchanged, so not validated again
    with pytest.raises(ApiException) as caught:
        await custom.patch_namespaced_custom_object(
            AW_GROUP,
            AW_VERSION,
            ns,
            AW_PLURAL,
            "legacy",
            {"spec": {"priority": "higher"}},
            _content_type=MERGE_PATCH,
        )
    assert caught.value.status == 422


def _replace_crd(server: ServerHandle, crd: JsonObj) -> None:
    code, current = server.request("GET", CRD_PATH)
    assert code == 200, current
    body: dict[str, Any] = {**crd, "metadata": {**crd["metadata"], **current["metadata"]}}
    code, obj = server.request("PUT", CRD_PATH, body)
    assert code == 200, obj


def test_kubectl_shows_a_built_in_decode_error_like_a_real_server(
    kubectl: Kubectl, ns: str
) -> None:
    bad = pod("kubectl-decode", ns)
    bad["spec"]["containers"][0]["ports"] = [{"containerPort": "http"}]
    outcome = outcome_from_kubectl(kubectl.run("create", "-f", "-", stdin=json.dumps(bad)))
    outcome.expect_failure(
        code=400,
        reason="BadRequest",
        message="json: cannot unmarshal string into Go struct field "
        "ContainerPort.spec.containers.ports.containerPort of type int32",
    )
