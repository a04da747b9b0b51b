"""The generated catalog in proto/: deterministic, current, self-consistent, and a
faithful description of what the event classes put on the wire.

No PyPI package ships the official AsyncAPI 3.0 JSON Schema (the candidates carry
pydantic models or nothing), so the AsyncAPI document is checked against the 3.0
structure written out below plus the cross-reference rules of the specification.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, get_args

import jsonschema
import pytest
import yaml

from clearance import catalog, events, subjects

ROOT = Path(__file__).resolve().parents[2]
PROTO = ROOT / "proto"
GENERATED = (catalog.SCHEMA_FILE, catalog.ASYNCAPI_FILE)


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((PROTO / catalog.SCHEMA_FILE).read_text())
    return loaded


@pytest.fixture(scope="module")
def asyncapi() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((PROTO / catalog.ASYNCAPI_FILE).read_text())
    return loaded


@pytest.fixture(scope="module")
def validator(schema: dict[str, Any]) -> jsonschema.Draft202012Validator:
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )


def run_catalog(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clearance.catalog", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from refs(value)


def resolve(document: dict[str, Any], pointer: str) -> Any:
    node: Any = document
    for part in pointer.lstrip("/").split("/"):
        node = node[part.replace("~1", "/").replace("~0", "~")]
    return node


# ---------------------------------------------------------------- determinism, drift


def test_generation_is_byte_identical_across_runs(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    assert run_catalog(str(first), cwd=tmp_path).returncode == 0
    assert run_catalog(str(second), cwd=tmp_path).returncode == 0
    for name in GENERATED:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name
        assert (first / name).read_bytes().endswith(b"\n")
    assert sorted(p.name for p in first.iterdir()) == sorted(GENERATED)


def test_make_schemas_recipe_reproduces_the_committed_proto(tmp_path: Path) -> None:
    makefile = (ROOT / "Makefile").read_text()
    recipe = re.search(r"^schemas:.*\n\t(.+)$", makefile, re.MULTILINE)
    assert recipe, "Makefile has no schemas target"
    command = shlex.split(recipe.group(1))
    python_args = command[command.index("python") + 1 :]
    assert python_args == ["-m", "clearance.catalog", "proto"]
    result = subprocess.run(
        [sys.executable, *python_args], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    for name in GENERATED:
        assert (tmp_path / "proto" / name).read_bytes() == (PROTO / name).read_bytes(), (
            f"proto/{name} is stale: run `make schemas` and commit it"
        )


def test_committed_proto_is_current() -> None:
    assert catalog.stale(PROTO) == [], "proto/ is stale: run `make schemas` and commit it"


def test_check_mode_passes_on_a_fresh_catalog(tmp_path: Path) -> None:
    catalog.write(tmp_path)
    result = run_catalog("--check", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 0
    assert "up to date" in result.stdout


def test_check_mode_fails_with_a_clear_message_when_stale(tmp_path: Path) -> None:
    catalog.write(tmp_path)
    schema_file = tmp_path / catalog.SCHEMA_FILE
    schema_file.write_text(schema_file.read_text().replace("Clearance events", "Old events"))
    result = run_catalog("--check", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 1
    assert catalog.SCHEMA_FILE in result.stderr
    assert catalog.ASYNCAPI_FILE not in result.stderr
    assert "make schemas" in result.stderr
    assert schema_file.read_text().count("Old events") == 1  # --check writes nothing


def test_check_mode_fails_when_files_are_missing(tmp_path: Path) -> None:
    result = run_catalog("--check", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert result.returncode == 1
    assert all(name in result.stderr for name in GENERATED)


# ---------------------------------------------------------------------- JSON Schema


def test_schema_covers_every_event_type_by_its_tag(schema: dict[str, Any]) -> None:
    mapping = schema["discriminator"]["mapping"]
    members = get_args(events.Event)
    assert mapping == {catalog.event_type_of(c): f"#/$defs/{c.__name__}" for c in members}
    assert all(ref.startswith("#/$defs/") for ref in refs(schema))
    for ref in refs(schema):
        assert resolve(schema, ref.removeprefix("#")), ref


@pytest.mark.parametrize("sample", catalog.examples(), ids=lambda s: s.event_type)
def test_encoded_events_validate_against_the_published_schema(
    validator: jsonschema.Draft202012Validator, sample: events.Event
) -> None:
    validator.validate(json.loads(events.encode(sample)))


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"attempt": 0}, "attempt"),
        ({"type": "cycle.unknown"}, "type"),
        ({"cycle_traceparent": "xyz"}, "cycle_traceparent"),
        ({"appwrapper": {"namespace": "ns", "name": "aw"}}, "uid"),
    ],
)
def test_published_schema_rejects_what_the_decoder_rejects(
    validator: jsonschema.Draft202012Validator, change: dict[str, Any], field: str
) -> None:
    (sample,) = (s for s in catalog.examples() if isinstance(s, events.CycleTeardownStarted))
    body = json.loads(events.encode(sample))
    body.update(change)
    assert not validator.is_valid(body)
    with pytest.raises(events.EventDecodeError):
        events.decode(json.dumps(body))


# ------------------------------------------------------------------------- AsyncAPI

_PARAMETER = {
    "type": "object",
    "properties": {
        "enum": {"type": "array", "items": {"type": "string"}},
        "default": {"type": "string"},
        "description": {"type": "string"},
        "examples": {"type": "array", "items": {"type": "string"}},
        "location": {"type": "string"},
    },
    "additionalProperties": False,
}
_REF = {
    "type": "object",
    "required": ["$ref"],
    "properties": {"$ref": {"type": "string"}},
    "additionalProperties": False,
}
_EXTENSIBLE: dict[str, Any] = {"^x-": {}}
# AsyncAPI 3.0.0 object rules for the objects the generator emits: required fields,
# field types, and no fields outside the specification (extensions `x-` aside).
ASYNCAPI_3_STRUCTURE = {
    "type": "object",
    "required": ["asyncapi", "info"],
    "properties": {
        "asyncapi": {"const": "3.0.0"},
        "id": {"type": "string"},
        "info": {
            "type": "object",
            "required": ["title", "version"],
            "properties": {
                "title": {"type": "string"},
                "version": {"type": "string"},
                "description": {"type": "string"},
            },
            "additionalProperties": False,
            "patternProperties": _EXTENSIBLE,
        },
        "defaultContentType": {"type": "string"},
        "servers": {
            "type": "object",
            "additionalProperties": {
                "type": "object",
                "required": ["host", "protocol"],
                "properties": {
                    "host": {"type": "string"},
                    "protocol": {"type": "string"},
                    "description": {"type": "string"},
                },
                "additionalProperties": False,
            },
        },
        "channels": {
            "type": "object",
            "propertyNames": {"pattern": r"^[A-Za-z0-9_\-]+$"},
            "additionalProperties": {
                "type": "object",
                "required": ["address", "messages"],
                "properties": {
                    "address": {"type": ["string", "null"]},
                    "title": {"type": "string"},
                    "summary": {"type": "string"},
                    "description": {"type": "string"},
                    "parameters": {"type": "object", "additionalProperties": _PARAMETER},
                    "messages": {"type": "object", "additionalProperties": _REF},
                },
                "additionalProperties": False,
                "patternProperties": _EXTENSIBLE,
            },
        },
        "operations": {
            "type": "object",
            "propertyNames": {"pattern": r"^[A-Za-z0-9_\-]+$"},
            "additionalProperties": {
                "type": "object",
                "required": ["action", "channel"],
                "properties": {
                    "action": {"enum": ["send", "receive"]},
                    "channel": _REF,
                    "summary": {"type": "string"},
                    "description": {"type": "string"},
                    "messages": {"type": "array", "items": _REF},
                },
                "additionalProperties": False,
                "patternProperties": _EXTENSIBLE,
            },
        },
        "components": {
            "type": "object",
            "properties": {
                "schemas": {"type": "object"},
                "messages": {
                    "type": "object",
                    "propertyNames": {"pattern": r"^[A-Za-z0-9.\-_]+$"},
                    "additionalProperties": {
                        "type": "object",
                        "properties": {
                            "name": {"type": "string"},
                            "title": {"type": "string"},
                            "summary": {"type": "string"},
                            "contentType": {"type": "string"},
                            "headers": {"type": "object"},
                            "payload": {"type": "object"},
                            "examples": {
                                "type": "array",
                                "items": {
                                    "type": "object",
                                    "anyOf": [
                                        {"required": ["payload"]},
                                        {"required": ["headers"]},
                                    ],
                                    "properties": {
                                        "name": {"type": "string"},
                                        "summary": {"type": "string"},
                                        "headers": {"type": "object"},
                                        "payload": {},
                                    },
                                    "additionalProperties": False,
                                },
                            },
                        },
                        "additionalProperties": False,
                    },
                },
            },
            "additionalProperties": False,
        },
    },
    "additionalProperties": False,
    "patternProperties": _EXTENSIBLE,
}


def test_asyncapi_document_has_the_3_0_structure(asyncapi: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(ASYNCAPI_3_STRUCTURE).validate(asyncapi)
    assert asyncapi["defaultContentType"] == "application/json"


def test_every_local_ref_in_asyncapi_resolves(asyncapi: dict[str, Any]) -> None:
    local = [ref for ref in refs(asyncapi) if ref.startswith("#/")]
    assert local
    for ref in local:
        assert resolve(asyncapi, ref.removeprefix("#")) is not None, ref


def test_every_asyncapi_message_resolves_to_a_schema_definition(
    asyncapi: dict[str, Any], schema: dict[str, Any]
) -> None:
    by_name = {c.__name__: c for c in get_args(events.Event)}
    messages = asyncapi["components"]["messages"]
    assert set(by_name) <= set(messages)
    for name, message in messages.items():
        ref = message["payload"].get("$ref")
        if name == "DeadLetter":
            assert ref is None  # raw bytes, no schema by design
            continue
        document, _, pointer = ref.partition("#")
        assert document == catalog.SCHEMA_FILE
        definition = resolve(schema, pointer)
        assert definition["title"] == name
        assert definition["properties"]["type"]["enum"] == [message["name"]]
        assert message["name"] == catalog.event_type_of(by_name[name])


def test_channel_parameters_match_their_address(asyncapi: dict[str, Any]) -> None:
    for channel_id, channel in asyncapi["channels"].items():
        in_address = set(re.findall(r"\{([^}]+)\}", channel["address"]))
        assert in_address == set(channel.get("parameters", {})), channel_id


def test_operations_send_and_receive_messages_of_their_own_channel(
    asyncapi: dict[str, Any],
) -> None:
    senders: dict[str, list[str]] = {}
    for operation_id, operation in asyncapi["operations"].items():
        channel_id = operation["channel"]["$ref"].removeprefix("#/channels/")
        for message in operation["messages"]:
            assert message["$ref"].startswith(f"#/channels/{channel_id}/messages/"), operation_id
        if operation["action"] == "send":
            senders.setdefault(channel_id, []).append(operation_id.split("Send")[0])
    assert set(senders) == set(asyncapi["channels"])
    assert senders["kubePod"] == ["watcher"]
    assert senders["cycleCleared"] == ["tracker"]  # nothing else ever publishes it
    assert senders["cycleTeardownStarted"] == ["dispatcher"]
    assert sorted(senders["deadLetter"]) == ["dispatcher", "tracker"]


def test_every_example_is_on_a_subject_its_channel_address_matches(
    asyncapi: dict[str, Any],
) -> None:
    channels = asyncapi["channels"]
    for sample in catalog.examples():
        channel = channels[next(k for k, c in channels.items() if c["title"] == sample.event_type)]
        pattern = re.escape(channel["address"])
        for parameter in channel["parameters"]:
            pattern = pattern.replace(re.escape(f"{{{parameter}}}"), r"[^.]+")
        assert re.fullmatch(pattern, sample.subject()), (sample.subject(), channel["address"])
        stream = subjects.stream_for_subject(sample.subject())
        assert f"`{stream.name}`" in channel["description"]


def test_message_examples_decode_to_the_documented_type(asyncapi: dict[str, Any]) -> None:
    for name, message in asyncapi["components"]["messages"].items():
        if name == "DeadLetter":
            continue
        (example,) = message["examples"]
        event = events.decode(json.dumps(example["payload"]))
        assert type(event).__name__ == name
        assert example["headers"]["Nats-Msg-Id"] == event.msg_id()
