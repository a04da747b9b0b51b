"""Generate the published event catalog in `proto/` from the event classes.

`python -m clearance.catalog proto` (= `make schemas`) writes

* `events.schema.json` — JSON Schema (2020-12) of the `Event` union, every Struct under
  `$defs`, keys sorted, so any JSON Schema tool can validate a message body;
* `asyncapi.yaml` — AsyncAPI 3.0.0: one channel per subject pattern and event type,
  the writer's `send` and the readers' `receive` operations, and one message per event
  whose payload `$ref`s `events.schema.json#/$defs/<Name>`.

Both files are pure functions of the code: regenerating gives identical bytes, and
`--check` exits 1 when the committed files differ (a test runs the same comparison).
Who sends and who receives each event (:data:`ROUTES`) lives here, not in the event
classes, because it documents the deployment rather than the payload.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, get_args

import msgspec
import yaml

from clearance import events, subjects

SCHEMA_FILE: Final = "events.schema.json"
ASYNCAPI_FILE: Final = "asyncapi.yaml"
GENERATED_BY: Final = "python -m clearance.catalog proto  (make schemas)"

HEADER_MSG_ID: Final = events.HEADER_MSG_ID
HEADER_TRACEPARENT: Final = events.HEADER_TRACEPARENT
HEADER_TRACESTATE: Final = events.HEADER_TRACESTATE


@dataclass(frozen=True, slots=True)
class Route:
    """Which service publishes an event and which consume it."""

    writer: str
    readers: tuple[str, ...]


_WATCHER, _TRACKER, _DISPATCHER, _CLI = "watcher", "tracker", "dispatcher", "cli"
_AUDIT: Final = (_CLI,)  # `clearance events` tails every cycle event and alert

ROUTES: Final[dict[type[Any], Route]] = {
    events.KubeAppWrapperEvent: Route(_WATCHER, (_DISPATCHER,)),
    events.KubePodEvent: Route(_WATCHER, (_DISPATCHER, _TRACKER)),
    events.KubeNodeEvent: Route(_WATCHER, (_TRACKER,)),
    events.KubeItemEvent: Route(_WATCHER, (_TRACKER,)),
    events.CycleDispatched: Route(_DISPATCHER, _AUDIT),
    events.CycleRequeued: Route(_DISPATCHER, _AUDIT),
    events.CycleTeardownStarted: Route(_DISPATCHER, (_TRACKER, *_AUDIT)),
    events.CycleDeletionConfirmed: Route(_TRACKER, _AUDIT),
    events.CycleDeletionForced: Route(_TRACKER, _AUDIT),
    events.CycleFinalizersRemoved: Route(_TRACKER, _AUDIT),
    events.CycleCleared: Route(_TRACKER, (_DISPATCHER, *_AUDIT)),
    events.CycleRedispatched: Route(_DISPATCHER, _AUDIT),
    events.CycleFailed: Route(_DISPATCHER, _AUDIT),
    events.CycleCompleted: Route(_DISPATCHER, _AUDIT),
    events.AlertDeletionStuck: Route(_TRACKER, _AUDIT),
    events.AlertNodeLost: Route(_TRACKER, _AUDIT),
    events.AlertRequeueLimit: Route(_DISPATCHER, _AUDIT),
    events.AlertDispatchFailed: Route(_DISPATCHER, _AUDIT),
    events.AlertDeletionForced: Route(_TRACKER, _AUDIT),
}

# Undecodable messages are copied to the DLQ by whichever service consumed them.
DLQ_WRITERS: Final = (_TRACKER, _DISPATCHER)

EVENT_CLASSES: Final[tuple[type[Any], ...]] = get_args(events.Event)


def event_type_of(cls: type[Any]) -> str:
    tag = cls.__struct_config__.tag
    assert isinstance(tag, str), cls
    return tag


def _camel(dotted: str) -> str:
    head, *rest = dotted.replace("-", ".").replace("_", ".").split(".")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _first_paragraph(cls: type[Any]) -> str:
    doc = (cls.__doc__ or "").strip()
    return " ".join(doc.split("\n\n", 1)[0].split())


# ----------------------------------------------------------------------- examples

_T0: Final = datetime(2026, 1, 15, 9, 30, 0, tzinfo=UTC)
_AW: Final = events.AppWrapperRef(
    namespace="team-a", name="bert-finetune", uid="6a1f0c2e-7d4b-4b8e-9a51-1f2e3d4c5b6a"
)
_TRACEPARENT: Final = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _ref(kind: str, name: str, uid: str, *, api_version: str = "v1") -> events.ObjectRef:
    return events.ObjectRef(
        kind=kind, api_version=api_version, namespace=_AW.namespace, name=name, uid=uid
    )


_POD: Final = _ref("Pod", "bert-finetune-worker-0", "0b6c1d2e-3f40-4a5b-8c6d-7e8f90a1b2c3")
_JOB: Final = _ref(
    "Job", "bert-finetune", "1c7d2e3f-4051-4b6c-9d7e-8f90a1b2c3d4", api_version="batch/v1"
)


def _meta(name: str, uid: str, rv: str, *, namespace: str | None = "team-a") -> events.ObjectMeta:
    return events.ObjectMeta(
        name=name,
        namespace=namespace,
        uid=uid,
        resource_version=rv,
        labels={"workload.codeflare.dev/appwrapper": _AW.name, "clearance.dev/attempt": "2"}
        if namespace
        else {},
        creation_timestamp=_T0 - timedelta(minutes=10),
    )


def examples() -> tuple[events.Event, ...]:
    """One realistic, fixed instance of every event type, in union order.

    Published as AsyncAPI message examples and used by the tests as the sample set.
    """
    t = _T0
    about: dict[str, Any] = {"appwrapper": _AW, "attempt": 2, "occurred_at": t}
    cycle = {**about, "cycle_traceparent": _TRACEPARENT}
    pod = events.PodObject(
        metadata=msgspec.structs.replace(
            _meta(_POD.name, _POD.uid, "48213"),
            deletion_timestamp=t - timedelta(seconds=75),
            deletion_grace_period_seconds=30,
            finalizers=("example.com/block",),
            owner_references=(
                events.OwnerReference(
                    api_version="batch/v1",
                    kind="Job",
                    name=_JOB.name,
                    uid=_JOB.uid,
                    controller=True,
                ),
            ),
        ),
        spec=events.PodSpec(
            node_name="node-3",
            containers=(
                events.Container(
                    name="trainer",
                    resources=events.ResourceRequirements(
                        requests=events.ResourceList(cpu="4", memory="16Gi", nvidia_gpu="1")
                    ),
                ),
            ),
            termination_grace_period_seconds=30,
        ),
        status=events.PodStatus(
            phase="Running",
            conditions=(events.Condition(type="Ready", status="False"),),
        ),
    )
    node = events.NodeObject(
        metadata=_meta("node-3", "5e0a1b2c-3d4e-4f50-8a6b-7c8d9e0f1a2b", "48190", namespace=None),
        spec=events.NodeSpec(
            taints=(
                events.Taint(
                    key="node.kubernetes.io/unreachable",
                    effect="NoExecute",
                    time_added=t - timedelta(seconds=90),
                ),
            )
        ),
        status=events.NodeStatus(
            conditions=(
                events.Condition(
                    type="Ready",
                    status="Unknown",
                    reason="NodeStatusUnknown",
                    last_transition_time=t - timedelta(seconds=95),
                ),
            ),
            allocatable=events.ResourceList(cpu="32", memory="256Gi", nvidia_gpu="8"),
        ),
    )
    appwrapper = events.AppWrapperObject(
        metadata=_meta(_AW.name, _AW.uid, "48200"),
        spec=events.AppWrapperSpec(
            priority=5,
            scheduling_spec=events.SchedulingSpec(
                min_available=2,
                requeuing=events.Requeuing(
                    time_in_seconds=120, growth_type="exponential", max_num_requeuings=5
                ),
            ),
            resources=events.AppWrapperResources(
                generic_items=(
                    {
                        "replicas": 1,
                        "generictemplate": {
                            "apiVersion": "batch/v1",
                            "kind": "Job",
                            "metadata": {"name": _JOB.name},
                        },
                    },
                )
            ),
        ),
        status=events.AppWrapperStatus(
            state="Pending",
            number_of_requeueings=1,
            conditions=(events.Condition(type="AwaitingDeletion", status="True"),),
            clearance=events.ClearanceStatus(attempt=2, teardown_started_at=t),
        ),
    )
    item = events.ItemObject(
        kind=_JOB.kind, api_version=_JOB.api_version, metadata=_meta(_JOB.name, _JOB.uid, "48199")
    )
    stuck = events.StuckObject(
        object=_POD,
        node="node-3",
        deletion_timestamp=t - timedelta(seconds=75),
        reasons=(
            events.NodeUnreachable(node="node-3"),
            events.Finalizers(finalizers=("example.com/block",)),
        ),
    )
    kube: dict[str, Any] = {"action": "MODIFIED", "observed_at": t}
    return (
        events.KubeAppWrapperEvent(**kube, object=appwrapper),
        events.KubePodEvent(**kube, object=pod),
        events.KubeNodeEvent(**kube, object=node),
        events.KubeItemEvent(action="DELETED", inferred=True, observed_at=t, object=item),
        events.CycleDispatched(**{**cycle, "attempt": 1}, items=(_JOB,)),
        events.CycleRequeued(
            **cycle,
            reason="1 of 2 pods running after 120 s",
            number_of_requeueings=1,
            running=1,
            min_available=2,
        ),
        events.CycleTeardownStarted(**cycle, inventory=(_JOB, _POD)),
        events.CycleDeletionConfirmed(**cycle, object=_JOB, how="watch_deleted"),
        events.CycleDeletionForced(**cycle, objects=(_POD,)),
        events.CycleFinalizersRemoved(
            **cycle,
            removed=(events.RemovedFinalizers(object=_POD, finalizers=("example.com/block",)),),
        ),
        events.CycleCleared(
            **cycle,
            cleared_at=t,
            teardown_started_at=t - timedelta(seconds=600),
            confirmed=(_JOB, _POD),
        ),
        events.CycleRedispatched(
            **{**cycle, "attempt": 3}, cleared_at=t - timedelta(seconds=90), pause_seconds=90
        ),
        events.CycleFailed(**cycle, reason="RequeueLimit", message="maxNumRequeuings 5 reached"),
        events.CycleCompleted(**cycle),
        events.AlertDeletionStuck(
            **cycle,
            summary="1 object of attempt 2 still present after 60 s",
            elapsed_seconds=61.5,
            stuck=(stuck,),
        ),
        events.AlertNodeLost(
            **cycle,
            summary="node-3 is unreachable and holds 1 pod",
            node="node-3",
            reasons=(events.NodeUnreachable(node="node-3"),),
            objects=(_POD,),
        ),
        events.AlertRequeueLimit(
            **cycle,
            summary="requeued 5 times; marked Failed",
            number_of_requeueings=5,
            max_num_requeuings=5,
        ),
        events.AlertDispatchFailed(
            **cycle,
            summary="creating Job bert-finetune failed",
            reason="Forbidden",
            item=_JOB,
        ),
        events.AlertDeletionForced(
            **cycle, summary="force-deleted 1 object of attempt 2", objects=(_POD,)
        ),
    )


# -------------------------------------------------------------------- JSON Schema


def json_schema() -> dict[str, Any]:
    """The whole catalog as one JSON Schema document."""
    (top,), defs = msgspec.json.schema_components([events.Event], ref_template="#/$defs/{name}")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$comment": f"Generated by {GENERATED_BY}; do not edit.",
        "title": "Clearance events",
        "description": (
            "Every message Clearance publishes on NATS: a JSON object whose `type` "
            "field selects one of the definitions below. Unknown fields must be ignored."
        ),
        **top,
        "$defs": defs,
    }


# ------------------------------------------------------------------------ AsyncAPI

_PARAM_NAMESPACE: Final[dict[str, Any]] = {
    "description": "Namespace token; `_` for cluster-scoped objects. Characters outside "
    "`[A-Za-z0-9_-]` are escaped as `~XX` per UTF-8 byte (see clearance.subjects)."
}
_PARAM_NAME: Final[dict[str, Any]] = {
    "description": "Object name token, escaped like the namespace (`.` → `~2E`)."
}
_PARAM_APPWRAPPER: Final[dict[str, Any]] = {
    "description": "AppWrapper name token, escaped like the namespace."
}


def _address_and_params(cls: type[Any]) -> tuple[str, dict[str, Any]]:
    root = f"{subjects.ROOT}.{{area}}.{subjects.VERSION}"
    family, rest = event_type_of(cls).split(".", 1)
    params: dict[str, Any]
    if family == "kube":
        params = {"namespace": _PARAM_NAMESPACE, "name": _PARAM_NAME}
        if rest == "node":
            params["namespace"] = {
                "enum": [subjects.CLUSTER_SCOPE_TOKEN],
                "description": "Always `_`: nodes are cluster-scoped.",
            }
        return root.format(area="kube") + f".{rest}.{{namespace}}.{{name}}", params
    if family == "cycle":
        params = {"namespace": _PARAM_NAMESPACE, "appwrapper": _PARAM_APPWRAPPER}
        return root.format(area="cycle") + f".{{namespace}}.{{appwrapper}}.{rest}", params
    if family == "alert":
        (severity,) = (f for f in msgspec.structs.fields(cls) if f.name == "severity")
        params = {
            "severity": {
                "enum": list(subjects.SEVERITIES),
                "default": severity.default,
                "description": "Alert severity; pagers usually filter on it.",
            },
            "namespace": _PARAM_NAMESPACE,
            "appwrapper": _PARAM_APPWRAPPER,
        }
        address = root.format(area="alert") + f".{{severity}}.{{namespace}}.{{appwrapper}}.{rest}"
        return address, params
    raise ValueError(f"{cls.__name__}: unknown event family {family!r}")


def _message(cls: type[Any], example: events.Event) -> dict[str, Any]:
    return {
        "name": event_type_of(cls),
        "title": cls.__name__,
        "summary": _first_paragraph(cls),
        "contentType": "application/json",
        "headers": {"$ref": "#/components/schemas/EventHeaders"},
        "payload": {"$ref": f"{SCHEMA_FILE}#/$defs/{cls.__name__}"},
        "examples": [
            {
                "name": "example",
                "headers": {
                    HEADER_MSG_ID: example.msg_id(),
                    HEADER_TRACEPARENT: _TRACEPARENT,
                },
                "payload": msgspec.to_builtins(example),
            }
        ],
    }


def _headers_schema() -> dict[str, Any]:
    return {
        "type": "object",
        "required": [HEADER_MSG_ID],
        "properties": {
            HEADER_MSG_ID: {
                "type": "string",
                "description": (
                    "Deterministic id for JetStream dedup. Cycle and alert events: "
                    "`<aw-uid>:<attempt>:<type>[:<object-uid|step|node>]`; kube events: "
                    "`<uid>:<resourceVersion>`, or `<uid>:DELETED` for deletions."
                ),
            },
            HEADER_TRACEPARENT: {
                "type": "string",
                "pattern": "^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$",
                "description": "W3C trace context of the publishing span.",
            },
            HEADER_TRACESTATE: {"type": "string", "description": "W3C tracestate, if any."},
        },
    }


def _stream_of(cls: type[Any]) -> subjects.StreamSpec:
    return subjects.STREAMS_BY_NAME[cls.stream]


def asyncapi() -> dict[str, Any]:
    """The AsyncAPI 3.0.0 document for every event and stream."""
    channels: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    messages: dict[str, Any] = {}

    def add_operations(channel_id: str, message_name: str, route: Route, summary: str) -> None:
        message_ref = {"$ref": f"#/channels/{channel_id}/messages/{message_name}"}
        channel_ref = {"$ref": f"#/channels/{channel_id}"}
        suffix = channel_id[:1].upper() + channel_id[1:]
        operations[f"{route.writer}Send{suffix}"] = {
            "action": "send",
            "channel": channel_ref,
            "summary": f"{route.writer} publishes: {summary}",
            "messages": [message_ref],
        }
        for reader in route.readers:
            operations[f"{reader}Receive{suffix}"] = {
                "action": "receive",
                "channel": channel_ref,
                "summary": f"{reader} consumes (durable pull consumer, explicit ack).",
                "messages": [message_ref],
            }

    samples = {type(example): example for example in examples()}
    for cls in EVENT_CLASSES:
        name = cls.__name__
        channel_id = _camel(event_type_of(cls))
        address, parameters = _address_and_params(cls)
        stream = _stream_of(cls)
        channels[channel_id] = {
            "address": address,
            "title": event_type_of(cls),
            "description": (
                f"{_first_paragraph(cls)} Stored in JetStream stream `{stream.name}` "
                f"(limits retention, max age {_duration(stream.max_age_seconds)})."
            ),
            "parameters": parameters,
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        messages[name] = _message(cls, samples[cls])
        add_operations(channel_id, name, ROUTES[cls], _first_paragraph(cls))

    channels["deadLetter"] = {
        "address": f"{subjects.ROOT}.dlq.{subjects.VERSION}.{{stream}}",
        "title": "dead letters",
        "description": (
            f"Copies of messages a consumer could not decode; stream `{subjects.DLQ.name}` "
            f"(max age {_duration(subjects.DLQ.max_age_seconds)}). The original message "
            "was terminated, so it is not redelivered."
        ),
        "parameters": {
            "stream": {
                "enum": [s.name for s in subjects.STREAMS if s is not subjects.DLQ],
                "description": "Stream the undecodable message came from.",
            }
        },
        "messages": {"DeadLetter": {"$ref": "#/components/messages/DeadLetter"}},
    }
    messages["DeadLetter"] = {
        "name": "dead-letter",
        "title": "DeadLetter",
        "summary": "The undecodable message, body and headers copied unchanged.",
        "contentType": "application/octet-stream",
        "payload": {"description": "The original payload, byte for byte (may not be JSON)."},
    }
    for writer in DLQ_WRITERS:
        add_operations(
            "deadLetter",
            "DeadLetter",
            Route(writer, ()),
            "a message it could not decode, after terminating it.",
        )
    operations[f"{_CLI}ReceiveDeadLetter"] = {
        "action": "receive",
        "channel": {"$ref": "#/channels/deadLetter"},
        "summary": "Operators inspect dead letters.",
        "messages": [{"$ref": "#/channels/deadLetter/messages/DeadLetter"}],
    }

    return {
        "asyncapi": "3.0.0",
        "info": {
            "title": "Clearance events",
            "version": subjects.VERSION,
            "description": (
                "Events of Clearance, the AppWrapper requeue-storm fix: Kubernetes "
                "snapshots from the watcher, requeue-cycle facts from the dispatcher and "
                "the deletion tracker, and alerts. Payload schemas live in "
                f"`{SCHEMA_FILE}`. Generated by `{GENERATED_BY}`; do not edit."
            ),
        },
        "defaultContentType": "application/json",
        "servers": {
            "local": {
                "host": "127.0.0.1:4222",
                "protocol": "nats",
                "description": "Default `CLEARANCE_NATS_URL`; JetStream enabled.",
            }
        },
        "channels": channels,
        "operations": dict(sorted(operations.items())),
        "components": {
            "schemas": {"EventHeaders": _headers_schema()},
            "messages": messages,
        },
    }


def _duration(seconds: float) -> str:
    if seconds % 86400 == 0 and seconds >= 2 * 86400:
        return f"{int(seconds // 86400)} d"
    return f"{int(seconds // 3600)} h"


class _Dumper(yaml.SafeDumper):
    """Writes shared sub-dicts out in full: no `&id001` anchors in a published document."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# --------------------------------------------------------------------------- files


def render() -> dict[str, bytes]:
    """File name → exact bytes of every generated file."""
    schema = json.dumps(json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    document = yaml.dump(
        asyncapi(),
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=100,
        default_flow_style=False,
    )
    header = f"# Generated by {GENERATED_BY}; do not edit.\n"
    return {
        SCHEMA_FILE: schema.encode("utf-8"),
        ASYNCAPI_FILE: (header + document).encode("utf-8"),
    }


def write(directory: Path) -> list[Path]:
    """Write the catalog into `directory`; returns the files that changed."""
    directory.mkdir(parents=True, exist_ok=True)
    changed: list[Path] = []
    for name, content in render().items():
        path = directory / name
        if not path.exists() or path.read_bytes() != content:
            path.write_bytes(content)
            changed.append(path)
    return changed


def stale(directory: Path) -> list[str]:
    """Names of generated files that are missing or differ in `directory`."""
    return [
        name
        for name, content in render().items()
        if not (directory / name).is_file() or (directory / name).read_bytes() != content
    ]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clearance.catalog",
        description="Generate proto/events.schema.json and proto/asyncapi.yaml.",
    )
    parser.add_argument("directory", type=Path, help="output directory, normally proto")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the files are stale"
    )
    args = parser.parse_args(argv)
    directory: Path = args.directory
    if args.check:
        outdated = stale(directory)
        if outdated:
            print(
                f"{directory}: stale or missing {', '.join(outdated)}; "
                "regenerate with `make schemas` and commit the result",
                file=sys.stderr,
            )
            return 1
        print(f"{directory}: event catalog is up to date")
        return 0
    changed = write(directory)
    for path in changed:
        print(f"wrote {path}")
    if not changed:
        print(f"{directory}: event catalog is up to date")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
