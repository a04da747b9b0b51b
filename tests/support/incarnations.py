"""DESIGN §5 Incarnations, judged from kubesim's write history (``/kubesim/v1/history``).

An AppWrapper deleted and submitted again under the same name is a new incarnation (new UID).
No object of an incarnation may be created while an object of an earlier incarnation of the same
AppWrapper name still exists. Objects are assigned to an incarnation by their ownerReferences as
committed (an AppWrapper UID, or an owner already assigned: a Job's pods follow their Job), so
the judge needs no label the services write and works on the code before incarnations existed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def incarnation_violations(history: Iterable[Mapping[str, Any]]) -> list[str]:
    """Creations of an object of incarnation U while one of an earlier incarnation existed.

    ``history``: items of ``GET /kubesim/v1/history`` (rv, type, kind, namespace, name, uid,
    owners). Replayed in resourceVersion order."""
    born: dict[str, tuple[tuple[str, str], int]] = {}  # AW uid -> ((ns, name), order)
    of: dict[str, str] = {}  # object uid -> AW uid
    alive: dict[str, str] = {}  # object uid -> "Kind name"
    violations: list[str] = []
    for entry in sorted(history, key=lambda e: int(e["rv"])):
        uid = str(entry["uid"])
        if entry["kind"] == "AppWrapper":
            if entry["type"] == "ADDED":
                born[uid] = ((str(entry["namespace"]), str(entry["name"])), int(entry["rv"]))
            continue
        if uid not in of:
            for owner in entry.get("owners") or ():
                owner = str(owner)
                if owner in born:
                    of[uid] = owner
                    break
                if owner in of:
                    of[uid] = of[owner]
                    break
        aw = of.get(uid)
        if aw is None:
            continue
        if entry["type"] == "ADDED":
            name, order = born[aw]
            older = sorted(
                what
                for other, what in alive.items()
                if born[of[other]][0] == name and born[of[other]][1] < order
            )
            if older:
                violations.append(
                    f"rv {entry['rv']}: {entry['kind']} {entry['name']} of AppWrapper "
                    f"{name[0]}/{name[1]} (uid {aw}) created while {', '.join(older)} of an "
                    "earlier incarnation existed"
                )
            alive[uid] = f"{entry['kind']} {entry['name']}"
        elif entry["type"] == "DELETED":
            alive.pop(uid, None)
    return violations
