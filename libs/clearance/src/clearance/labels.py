"""The labels Clearance stamps on every object it creates (DESIGN §1), and selectors on them.

The MCAD labels are kept so that existing dashboards, RBAC and tooling that select
``appwrapper.mcad.ibm.com=<aw>`` keep working; the ``clearance.dev`` labels add what MCAD
lacked: the namespace of the owning AppWrapper and the attempt that created the object, which
is what lets the tracker tell an old attempt's leftovers from the new attempt's pods.
"""

from __future__ import annotations

from typing import Final

MCAD_APPWRAPPER: Final = "appwrapper.mcad.ibm.com"
CODEFLARE_APPWRAPPER: Final = "workload.codeflare.dev/appwrapper"
NAMESPACE: Final = "clearance.dev/namespace"
ATTEMPT: Final = "clearance.dev/attempt"


def stamp(*, appwrapper: str, namespace: str, attempt: int) -> dict[str, str]:
    """The labels for an object (or pod template) of ``attempt`` of AppWrapper ``appwrapper``."""
    return {
        MCAD_APPWRAPPER: appwrapper,
        CODEFLARE_APPWRAPPER: appwrapper,
        NAMESPACE: namespace,
        ATTEMPT: str(attempt),
    }


def selector_for(appwrapper: str) -> str:
    """Label selector for every object of an AppWrapper, whatever the attempt."""
    return f"{MCAD_APPWRAPPER}={appwrapper}"


ANY_APPWRAPPER: Final = MCAD_APPWRAPPER
"""Selector (label exists) for every object that belongs to some AppWrapper."""


def attempt_of(labels: dict[str, str]) -> int | None:
    """The attempt label as an int; ``None`` when absent or not a number (foreign objects)."""
    value = labels.get(ATTEMPT)
    if value is None or not value.isdigit():
        return None
    return int(value)
