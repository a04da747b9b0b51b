"""`meta.k8s.io/v1 Table` rendering for `kubectl get` (Accept: ...;as=Table).

Column sets follow the real printers for the types kubectl users look at (pods, nodes,
namespaces, jobs, events, deployments, replicasets, statefulsets; pkg/printers/internalversion);
everything else gets the default NAME/AGE table, like CRDs without additionalPrinterColumns.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kubesim.resources import ResourceType


def _age(ts: str | None) -> str:
    if not ts:
        return "<unknown>"
    try:
        then = datetime.fromisoformat(ts.replace("Z", "+00:00"))
    except ValueError:
        return "<unknown>"
    secs = int((datetime.now(UTC) - then).total_seconds())
    if secs < 0:
        secs = 0
    if secs < 120:
        return f"{secs}s"
    mins = secs // 60
    if mins < 10:
        return f"{mins}m{secs % 60}s" if secs % 60 else f"{mins}m"
    if mins < 180:
        return f"{mins}m"
    hours = mins // 60
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def _col(
    name: str, type_: str = "string", fmt: str = "", priority: int = 0, desc: str = ""
) -> dict[str, Any]:
    return {"name": name, "type": type_, "format": fmt, "description": desc, "priority": priority}


def _pod_row(obj: dict[str, Any]) -> list[Any]:
    status = obj.get("status") or {}
    statuses = status.get("containerStatuses") or []
    containers = (obj.get("spec") or {}).get("containers") or []
    ready = sum(1 for s in statuses if s.get("ready"))
    restarts = sum(int(s.get("restartCount") or 0) for s in statuses)
    reason = status.get("reason") or status.get("phase") or "Unknown"
    for s in statuses:
        state = s.get("state") or {}
        if "waiting" in state and state["waiting"].get("reason"):
            reason = state["waiting"]["reason"]
        elif "terminated" in state and state["terminated"].get("reason"):
            reason = state["terminated"]["reason"]
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        reason = "Terminating"
    return [
        obj["metadata"]["name"],
        f"{ready}/{len(containers)}",
        reason,
        str(restarts),
        _age(obj["metadata"].get("creationTimestamp")),
        status.get("podIP") or "<none>",
        (obj.get("spec") or {}).get("nodeName") or "<none>",
    ]


def _node_row(obj: dict[str, Any]) -> list[Any]:
    conds = (obj.get("status") or {}).get("conditions") or []
    ready = next((c for c in conds if c.get("type") == "Ready"), None)
    state = "Unknown"
    if ready is not None:
        state = "Ready" if ready.get("status") == "True" else "NotReady"
    if (obj.get("spec") or {}).get("unschedulable"):
        state += ",SchedulingDisabled"
    version = ((obj.get("status") or {}).get("nodeInfo") or {}).get("kubeletVersion", "")
    labels = (obj.get("metadata") or {}).get("labels") or {}
    roles = sorted(
        k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/") and k[24:]
    )
    if labels.get("kubernetes.io/role"):
        roles.append(labels["kubernetes.io/role"])
    return [
        obj["metadata"]["name"],
        state,
        ",".join(roles) or "<none>",
        _age(obj["metadata"].get("creationTimestamp")),
        version,
    ]


def _job_row(obj: dict[str, Any]) -> list[Any]:
    status = obj.get("status") or {}
    spec = obj.get("spec") or {}
    conds = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
    if conds.get("Complete") == "True":
        state = "Complete"
    elif conds.get("Failed") == "True":
        state = "Failed"
    elif (obj.get("metadata") or {}).get("deletionTimestamp"):
        state = "Terminating"
    elif spec.get("suspend"):
        state = "Suspended"
    else:
        state = "Running"
    completions = spec.get("completions")
    done = f"{status.get('succeeded', 0)}/{completions if completions is not None else 1}"
    return [
        obj["metadata"]["name"],
        state,
        done,
        "",
        _age(obj["metadata"].get("creationTimestamp")),
    ]


def _event_row(obj: dict[str, Any]) -> list[Any]:
    io = obj.get("involvedObject") or {}
    return [
        _age(
            obj.get("lastTimestamp")
            or obj.get("eventTime")
            or obj["metadata"].get("creationTimestamp")
        ),
        obj.get("type", ""),
        obj.get("reason", ""),
        f"{str(io.get('kind', '')).lower()}/{io.get('name', '')}",
        obj.get("message", ""),
    ]


def _apps_row(obj: dict[str, Any], kind: str) -> list[Any]:
    """Deployment NAME READY UP-TO-DATE AVAILABLE AGE; ReplicaSet NAME DESIRED CURRENT READY
    AGE; StatefulSet NAME READY AGE (+ CONTAINERS IMAGES [SELECTOR] with -o wide)."""
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    desired = 1 if spec.get("replicas") is None else int(spec["replicas"])
    ready = int(status.get("readyReplicas") or 0)
    age = _age(obj["metadata"].get("creationTimestamp"))
    containers = ((spec.get("template") or {}).get("spec") or {}).get("containers") or []
    names = ",".join(str(c.get("name", "")) for c in containers)
    images = ",".join(str(c.get("image", "")) for c in containers)
    selector = ",".join(
        f"{k}={v}" for k, v in ((spec.get("selector") or {}).get("matchLabels") or {}).items()
    )
    if kind == "deployments":
        return [
            obj["metadata"]["name"],
            f"{ready}/{desired}",
            int(status.get("updatedReplicas") or 0),
            int(status.get("availableReplicas") or 0),
            age,
            names,
            images,
            selector,
        ]
    if kind == "replicasets":
        return [
            obj["metadata"]["name"],
            desired,
            int(status.get("replicas") or 0),
            ready,
            age,
            names,
            images,
            selector,
        ]
    return [obj["metadata"]["name"], f"{ready}/{desired}", age, names, images]


_APPS_COLUMNS: dict[str, list[tuple[str, str, int]]] = {
    "deployments": [
        ("Ready", "string", 0),
        ("Up-to-date", "integer", 0),
        ("Available", "integer", 0),
        ("Age", "string", 0),
        ("Containers", "string", 1),
        ("Images", "string", 1),
        ("Selector", "string", 1),
    ],
    "replicasets": [
        ("Desired", "integer", 0),
        ("Current", "integer", 0),
        ("Ready", "integer", 0),
        ("Age", "string", 0),
        ("Containers", "string", 1),
        ("Images", "string", 1),
        ("Selector", "string", 1),
    ],
    "statefulsets": [
        ("Ready", "string", 0),
        ("Age", "string", 0),
        ("Containers", "string", 1),
        ("Images", "string", 1),
    ],
}


def _printer_cell(obj: dict[str, Any], json_path: str, type_: str) -> Any:
    """The JSONPath subset additionalPrinterColumns use: `.status.state`, `.a[0].b`, and the
    `[-1:]` slice (`.status.conditions[-1:].type`, the last element)."""
    cur: Any = obj
    for part in json_path.strip().lstrip(".").split("."):
        if not part:
            continue
        name, _, index = part.partition("[")
        if name:
            cur = cur.get(name) if isinstance(cur, dict) else None
        if index and cur is not None:
            spec = index.rstrip("]")
            if not isinstance(cur, list):
                cur = None
            elif spec == "-1:":
                cur = cur[-1] if cur else None
            else:
                try:
                    cur = cur[int(spec)]
                except (ValueError, IndexError):
                    cur = None
        if cur is None:
            break
    if cur is None:
        return None
    if type_ == "date":
        return _age(str(cur))
    return cur


def table(
    rt: ResourceType, items: list[dict[str, Any]], meta: dict[str, Any], include: str
) -> dict[str, Any]:
    key = (rt.group, rt.plural)
    if key == ("", "pods"):
        cols = [
            _col("Name", fmt="name"),
            _col("Ready"),
            _col("Status"),
            _col("Restarts", "string"),
            _col("Age"),
            _col("IP", priority=1),
            _col("Node", priority=1),
        ]
        rows = [_pod_row(o) for o in items]
    elif key == ("", "nodes"):
        cols = [
            _col("Name", fmt="name"),
            _col("Status"),
            _col("Roles"),
            _col("Age"),
            _col("Version"),
        ]
        rows = [_node_row(o) for o in items]
    elif key == ("", "namespaces"):
        cols = [_col("Name", fmt="name"), _col("Status"), _col("Age")]
        rows = [
            [
                o["metadata"]["name"],
                (o.get("status") or {}).get("phase", ""),
                _age(o["metadata"].get("creationTimestamp")),
            ]
            for o in items
        ]
    elif key == ("batch", "jobs"):
        cols = [
            _col("Name", fmt="name"),
            _col("Status"),
            _col("Completions"),
            _col("Duration"),
            _col("Age"),
        ]
        rows = [_job_row(o) for o in items]
    elif key == ("", "events"):
        cols = [_col("Last Seen"), _col("Type"), _col("Reason"), _col("Object"), _col("Message")]
        rows = [_event_row(o) for o in items]
    elif rt.group == "apps" and rt.plural in _APPS_COLUMNS:
        cols = [_col("Name", fmt="name")] + [
            _col(name, type_, priority=prio) for name, type_, prio in _APPS_COLUMNS[rt.plural]
        ]
        rows = [_apps_row(o, rt.plural) for o in items]
    elif rt.printer_columns:
        cols = [_col("Name", fmt="name")] + [
            _col(name, type_, priority=prio) for name, type_, _, prio in rt.printer_columns
        ]
        rows = [
            [o["metadata"]["name"]]
            + [_printer_cell(o, path, type_) for _, type_, path, _ in rt.printer_columns]
            for o in items
        ]
    else:
        cols = [_col("Name", fmt="name"), _col("Age", "date")]
        rows = [
            [o["metadata"]["name"], _age(o["metadata"].get("creationTimestamp"))] for o in items
        ]
    out_rows: list[dict[str, Any]] = []
    if include not in ("None", "Object"):
        include = "Metadata"
    for obj, cells in zip(items, rows, strict=True):
        row: dict[str, Any] = {"cells": cells}
        if include == "Object":
            row["object"] = {"kind": rt.kind, "apiVersion": rt.api_version, **obj}
        elif include == "Metadata":
            row["object"] = {
                "kind": "PartialObjectMetadata",
                "apiVersion": "meta.k8s.io/v1",
                "metadata": obj.get("metadata", {}),
            }
        out_rows.append(row)
    return {
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {
            k: v
            for k, v in meta.items()
            if k in ("resourceVersion", "continue", "remainingItemCount")
        },
        "columnDefinitions": cols,
        "rows": out_rows,
    }
