"""The labels Clearance stamps on every object it creates (DESIGN §1), and selectors on them.

The MCAD labels are kept so that existing dashboards, RBAC and tooling that select
``appwrapper.mcad.ibm.com=<aw>`` keep working; the ``clearance.dev`` labels add what MCAD
lacked: the namespace of the owning AppWrapper and the attempt that created the object, which
is what lets the tracker tell an old attempt's leftovers from the new attempt's pods.
"""

from __future__ import annotations

import hashlib
import re
from typing import Final

MCAD_APPWRAPPER: Final = "appwrapper.mcad.ibm.com"
CODEFLARE_APPWRAPPER: Final = "workload.codeflare.dev/appwrapper"
NAMESPACE: Final = "clearance.dev/namespace"
ATTEMPT: Final = "clearance.dev/attempt"
APPWRAPPER_UID: Final = "clearance.dev/appwrapper-uid"
"""The UID of the AppWrapper incarnation that created the object (a resubmitted AppWrapper of
the same name is another incarnation, with another UID): pods of a wrapped Job carry it too,
though their owner is the Job, so no teardown mistakes them for an earlier incarnation's."""


MAX_VALUE: Final = 63
"""A label value is at most 63 characters (Kubernetes validation.IsValidLabelValue)."""
_VALID_VALUE: Final = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_HASH_CHARS: Final = 10


def value_for(name: str) -> str:
    """The label value standing for ``name`` (an AppWrapper or namespace name).

    A name that is a valid label value is used as is, so short names stay readable and
    compatible with MCAD's selectors. A longer one (AppWrapper names may have 253 characters)
    becomes its first characters, a dash and 10 hex digits of its SHA-256 — what Kubernetes
    controllers do when a derived name outgrows its limit. The mapping is deterministic, so
    every service derives the same value for a name and selects with it.
    """
    if len(name) <= MAX_VALUE and _VALID_VALUE.match(name):
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:_HASH_CHARS]
    head = re.sub(r"[^-A-Za-z0-9_.]", "-", name)[: MAX_VALUE - _HASH_CHARS - 1]
    head = head.rstrip("-_.")
    while head and not head[0].isalnum():
        head = head[1:]
    return f"{head}-{digest}" if head else digest


def stamp(
    *, appwrapper: str, namespace: str, attempt: int, uid: str | None = None
) -> dict[str, str]:
    """The labels for an object (or pod template) of ``attempt`` of AppWrapper ``appwrapper``
    (incarnation ``uid``, when given)."""
    value = value_for(appwrapper)
    stamped = {
        MCAD_APPWRAPPER: value,
        CODEFLARE_APPWRAPPER: value,
        NAMESPACE: value_for(namespace),
        ATTEMPT: str(attempt),
    }
    if uid:
        stamped[APPWRAPPER_UID] = value_for(uid)
    return stamped


def incarnation_of(labels: dict[str, str]) -> str | None:
    """The AppWrapper UID label (None on objects stamped before it existed, or foreign)."""
    return labels.get(APPWRAPPER_UID) or None


def selector_for(appwrapper: str, *, namespace: str | None = None) -> str:
    """Label selector for every object of an AppWrapper, whatever the attempt."""
    selector = f"{MCAD_APPWRAPPER}={value_for(appwrapper)}"
    if namespace is not None:
        selector += f",{NAMESPACE}={value_for(namespace)}"
    return selector


ANY_APPWRAPPER: Final = MCAD_APPWRAPPER
"""Selector (label exists) for every object that belongs to some AppWrapper."""


def attempt_of(labels: dict[str, str]) -> int | None:
    """The attempt label as an int; ``None`` when absent or not a number (foreign objects)."""
    value = labels.get(ATTEMPT)
    if value is None or not value.isdigit():
        return None
    return int(value)
