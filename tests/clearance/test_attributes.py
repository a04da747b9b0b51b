"""Span attribute names: semantic conventions where they exist, `clearance.*` for the rest."""

from __future__ import annotations

from clearance import attributes


def test_the_kubernetes_and_messaging_names_are_the_semantic_conventions() -> None:
    assert attributes.K8S_NAMESPACE_NAME == "k8s.namespace.name"
    assert (attributes.K8S_POD_NAME, attributes.K8S_POD_UID) == ("k8s.pod.name", "k8s.pod.uid")
    assert attributes.MESSAGING_SYSTEM == "messaging.system"
    assert attributes.MESSAGING_DESTINATION_NAME == "messaging.destination.name"


def test_our_own_names_live_under_one_clearance_namespace() -> None:
    own = [
        value
        for name, value in vars(attributes).items()
        if name.isupper() and not name.startswith(("K8S_", "MESSAGING_", "_"))
    ]
    assert own and all(value.startswith("clearance.") for value in own)


def test_an_appwrapper_is_its_namespace_name_uid_and_attempt() -> None:
    assert attributes.appwrapper_attributes(namespace="ns", name="aw", uid="u", attempt=2) == {
        "k8s.namespace.name": "ns",
        "clearance.appwrapper.name": "aw",
        "clearance.appwrapper.uid": "u",
        "clearance.attempt": 2,
    }


def test_a_pod_or_job_gets_its_semconv_pair_beside_the_generic_object_triple() -> None:
    pod = attributes.object_attributes(
        api_version="v1", kind="Pod", name="p", uid="u1", namespace="ns"
    )
    assert pod == {
        "clearance.object.kind": "Pod",
        "clearance.object.name": "p",
        "clearance.object.uid": "u1",
        "k8s.namespace.name": "ns",
        "k8s.pod.name": "p",
        "k8s.pod.uid": "u1",
    }
    job = attributes.object_attributes(
        api_version="batch/v1", kind="Job", name="j", uid="u2", namespace="ns"
    )
    assert (job["k8s.job.name"], job["k8s.job.uid"]) == ("j", "u2")


def test_a_kind_semconv_does_not_know_gets_only_the_generic_triple() -> None:
    other = attributes.object_attributes(
        api_version="kubeflow.org/v1", kind="Job", name="j", uid="u3", namespace=None
    )
    assert other == {
        "clearance.object.kind": "Job",
        "clearance.object.name": "j",
        "clearance.object.uid": "u3",
    }
