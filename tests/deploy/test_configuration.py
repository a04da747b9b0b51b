"""Acceptance 4 of issue #8 on the Kubernetes side: the rendered Deployments configure the services
with settings the services really read, pointing at Services and ports that exist; the
PrometheusRule uses metric names the services export; images agree between Kubernetes and compose.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest
import yaml
from deploy_support import (
    OVERLAYS,
    REPO,
    SERVICES,
    Obj,
    container,
    container_environment,
    exported_metric_names,
    one,
    render,
)

from clearance.natsserver import find_nats_server, nats_server_version
from clearance.settings import CommonSettings
from clearance_dispatcher.settings import DispatcherSettings
from clearance_tracker.diagnosis import CAUSE_NAMES
from clearance_tracker.settings import TrackerSettings
from clearance_watcher.settings import WatcherSettings

SETTINGS: dict[str, type[CommonSettings]] = {
    "watcher": WatcherSettings,
    "tracker": TrackerSettings,
    "dispatcher": DispatcherSettings,
}
OTHER_VARIABLES = frozenset(
    {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"}
)
STREAM_REPLICAS = "CLEARANCE_STREAM_REPLICAS"
TEARDOWN_POLICY = (
    "CLEARANCE_STUCK_ALERT_TIME",
    "CLEARANCE_FORCE_DELETION_TIME",
    "CLEARANCE_FINALIZER_REMOVAL",
)


def with_operator_secret(objs: list[Obj]) -> list[Obj]:
    """prod expects the operator to create clearance-nats-auth; stand one in for env resolution."""
    if any(o["kind"] == "Secret" for o in objs):
        return objs
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "clearance-nats-auth", "namespace": "clearance"},
        "stringData": {f"{u}-password": f"operator-{u}" for u in (*SERVICES, "alerts")},
    }
    return [*copy.deepcopy(objs), secret]


def settings_fields(service: str) -> set[str]:
    cls = SETTINGS[service]
    return {cls.env_name(f.name) for f in dataclasses.fields(cls)}


def service_port(objs: list[Obj], name: str, port: int) -> Obj:
    service = one(objs, "Service", name)
    [found] = [p for p in service["spec"]["ports"] if p["port"] == port]
    result: Obj = found
    return result


@pytest.mark.parametrize("overlay", OVERLAYS)
@pytest.mark.parametrize("service", SERVICES)
def test_deployment_env_is_read_by_the_service_settings(overlay: str, service: str) -> None:
    objs = with_operator_secret(render(f"overlays/{overlay}"))
    env = container_environment(objs, one(objs, "Deployment", f"clearance-{service}"))
    known = settings_fields(service)
    unknown = {k for k in env if k.startswith("CLEARANCE_") and k not in known}
    assert not unknown, f"set but read by no setting of clearance-{service}: {unknown}"
    others = {k for k in env if not k.startswith("CLEARANCE_")} - OTHER_VARIABLES
    assert others <= {"POD_NAME", "POD_NAMESPACE"}
    settings = SETTINGS[service].from_env(env)
    assert settings.http_port == 8080
    assert (
        settings.nats_user == service and settings.nats_password == env["CLEARANCE_NATS_PASSWORD"]
    )


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_services_point_at_existing_services_and_ports(overlay: str) -> None:
    objs = with_operator_secret(render(f"overlays/{overlay}"))
    for service in SERVICES:
        deployment = one(objs, "Deployment", f"clearance-{service}")
        env = container_environment(objs, deployment)
        nats = urlparse(env["CLEARANCE_NATS_URL"])
        assert service_port(objs, str(nats.hostname), int(nats.port or 0))["targetPort"] == "client"
        otlp = urlparse(env["OTEL_EXPORTER_OTLP_ENDPOINT"])
        assert (
            service_port(objs, str(otlp.hostname), int(otlp.port or 0))["targetPort"] == "otlp-http"
        )
        ports = {p["name"]: p["containerPort"] for p in container(deployment)["ports"]}
        assert ports["http"] == int(env["CLEARANCE_HTTP_PORT"])
        metrics = one(objs, "Service", f"clearance-{service}-metrics")
        assert metrics["spec"]["ports"][0]["targetPort"] == "http"
        assert env["OTEL_SERVICE_NAME"] == f"clearance-{service}"
    jaeger_ports = {
        p["containerPort"] for p in container(one(objs, "Deployment", "jaeger"))["ports"]
    }
    assert {4318, 16686} <= jaeger_ports


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_tracker_and_dispatcher_share_one_teardown_policy(overlay: str) -> None:
    objs = with_operator_secret(render(f"overlays/{overlay}"))
    envs = {
        s: container_environment(objs, one(objs, "Deployment", f"clearance-{s}"))
        for s in ("tracker", "dispatcher")
    }
    for variable in TEARDOWN_POLICY:
        assert variable in settings_fields("tracker") and variable in settings_fields("dispatcher")
        assert envs["tracker"][variable] == envs["dispatcher"][variable]
    tracker = TrackerSettings.from_env(envs["tracker"])
    dispatcher = DispatcherSettings.from_env(envs["dispatcher"])
    assert tracker.force_deletion_time == dispatcher.force_deletion_time == 570.0
    assert tracker.stuck_alert_time == dispatcher.stuck_alert_time == 60.0


def test_prod_asks_for_as_many_stream_replicas_as_nats_nodes() -> None:
    objs = with_operator_secret(render("overlays/prod"))
    [nats] = [o for o in objs if o["kind"] == "StatefulSet"]
    for service in SERVICES:
        env = container_environment(objs, one(objs, "Deployment", f"clearance-{service}"))
        assert int(env[STREAM_REPLICAS]) == nats["spec"]["replicas"] == 3
        assert SETTINGS[service].from_env(env).stream_replicas == 3


def test_every_namespaced_object_lives_in_the_clearance_namespace() -> None:
    for overlay in OVERLAYS:
        for obj in render(f"overlays/{overlay}"):
            if obj["kind"] in (
                "Namespace",
                "CustomResourceDefinition",
                "ClusterRole",
                "ClusterRoleBinding",
            ):
                assert "namespace" not in obj["metadata"], obj["metadata"]["name"]
            else:
                assert obj["metadata"]["namespace"] == "clearance", (
                    obj["kind"],
                    obj["metadata"]["name"],
                )


def test_prometheus_rule_uses_metrics_the_services_export() -> None:
    [rule] = [o for o in render("overlays/prod") if o["kind"] == "PrometheusRule"]
    exported = exported_metric_names()
    alerts = [r for group in rule["spec"]["groups"] for r in group["rules"]]
    assert {"ClearanceTeardownStuck", "ClearanceRequeueStorm"} <= {a["alert"] for a in alerts}
    for alert in alerts:
        used = re.findall(r"\b(clearance_[a-z0-9_]+)", alert["expr"])
        scrape_health = re.search(r'\bup\{job=~?"clearance-', alert["expr"]) is not None
        assert used or scrape_health, alert["alert"]
        for name in used:
            base = re.sub(r"_(total|bucket|sum|count|created)$", "", name)
            assert base in exported, f"{alert['alert']}: {name} is not exported by any service"
        assert alert["labels"]["severity"] in ("warning", "critical")
        assert alert["annotations"]["summary"]
    tracker_metrics = (REPO / "services/tracker/src/clearance_tracker/metrics.py").read_text()
    for step in re.findall(r'step="([a-z_]+)"', yaml.safe_dump(rule)):
        assert f'"{step}"' in tracker_metrics, f"escalation step {step!r} is not a label value"
    for causes in re.findall(r'cause=~?"([a-z_|]+)"', yaml.safe_dump(rule)):
        unknown = set(causes.split("|")) - set(CAUSE_NAMES)
        assert not unknown, f"diagnosis causes {unknown} are no `cause` label value"


def test_images_agree_between_kubernetes_compose_and_the_tested_nats_server() -> None:
    objs = render("overlays/prod")
    [nats] = [o for o in objs if o["kind"] == "StatefulSet"]
    version = nats_server_version(find_nats_server())
    assert container(nats)["image"] == f"nats:{version}"
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())["services"]
    assert compose["nats"]["image"] == f"nats:{version}-alpine"
    jaeger = container(one(objs, "Deployment", "jaeger"))
    assert compose["jaeger"]["image"] == jaeger["image"]
    assert compose["jaeger"]["command"] == jaeger["args"]
    for service in SERVICES:
        image = container(one(objs, "Deployment", f"clearance-{service}"))["image"]
        assert image == "ghcr.io/clearance/clearance:0.1.0"


def test_crd_in_the_base_is_the_shipped_crd_file() -> None:
    crd_file = yaml.safe_load(Path(REPO / "deploy/crd/appwrapper-crd.yaml").read_text())
    [rendered] = [o for o in render("overlays/prod") if o["kind"] == "CustomResourceDefinition"]
    rendered["metadata"].pop("labels", None)
    assert rendered == crd_file
    version = rendered["spec"]["versions"][0]
    assert "status" in version["subresources"]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns[:3] == ["State", "Attempt", "Requeues"]
