"""Per-AppWrapper teardown policy given by annotations (pure).

Clearance's teardown fields live in ``spec.schedulingSpec.requeuing`` (``pauseTimeInSeconds``,
``forceDeletionTimeInSeconds``, ``stuckAlertTimeInSeconds``, ``finalizerRemoval``). MCAD v1's
upstream CRD does not declare them, so the API server prunes them; the same policy can then be
given by annotations on the AppWrapper, which no schema prunes:

=========================================================  ======================  ===============
annotation                                                 value                   range
=========================================================  ======================  ===============
``clearance.dev/pause-time-in-seconds``                    whole seconds           0s..30d
``clearance.dev/force-deletion-time-in-seconds``           whole seconds, <=0 off  -30d..30d
``clearance.dev/stuck-alert-time-in-seconds``              whole seconds           0s..30d
``clearance.dev/finalizer-removal``                        Never|AfterForceDeletion
=========================================================  ======================  ===============

A field present in the spec wins; an annotation applies only where the spec has no value (it was
never set, or the schema dropped it). A malformed or out-of-range annotation is refused like a
bad spec field (a Failed condition naming the annotation and the range, ``clearance.bounds``),
never clamped silently. Operator-wide defaults stay settings.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from clearance.bounds import Range

PREFIX: Final = "clearance.dev/"
ANNOTATION_OF_FIELD: Final[dict[str, str]] = {
    "pauseTimeInSeconds": f"{PREFIX}pause-time-in-seconds",
    "forceDeletionTimeInSeconds": f"{PREFIX}force-deletion-time-in-seconds",
    "stuckAlertTimeInSeconds": f"{PREFIX}stuck-alert-time-in-seconds",
    "finalizerRemoval": f"{PREFIX}finalizer-removal",
}
FINALIZER_REMOVALS: Final = ("Never", "AfterForceDeletion")


def policy_fields(
    annotations: Mapping[str, Any],
    requeuing: Mapping[str, Any],
    *,
    ranges: Mapping[str, Range],
) -> tuple[dict[str, Any], list[tuple[bool, str]]]:
    """The requeuing fields the annotations supply where ``requeuing`` has none (each value
    within ``ranges[field]``, the spec's own bounds), and the problems: (out of range?,
    message naming the annotation)."""
    fields: dict[str, Any] = {}
    problems: list[tuple[bool, str]] = []
    for field_name, annotation in ANNOTATION_OF_FIELD.items():
        value = annotations.get(annotation)
        if value is None or requeuing.get(field_name) is not None:
            continue
        if not isinstance(value, str):
            problems.append((False, f"metadata.annotations[{annotation}]: expected a string"))
            continue
        if field_name == "finalizerRemoval":
            if value not in FINALIZER_REMOVALS:
                problems.append(
                    (
                        False,
                        f"metadata.annotations[{annotation}]: expected Never or "
                        f"AfterForceDeletion, got {value[:64]!r}",
                    )
                )
                continue
            fields[field_name] = value
            continue
        try:
            seconds = int(value.strip())
        except ValueError:
            problems.append(
                (
                    False,
                    f"metadata.annotations[{annotation}]: expected whole seconds, "
                    f"got {value[:64]!r}",
                )
            )
            continue
        problem = ranges[field_name].problem(seconds)
        if problem is not None:
            problems.append((True, f"metadata.annotations[{annotation}]: {problem}"))
            continue
        fields[field_name] = seconds
    return fields, problems


QUOTA_PREFIXES: Final = ("quota_", "mcad.ibm.com/quota", "workload.codeflare.dev/quota")
"""MCAD v1's quota management keys (labels ``quota_context``/``quota_service`` of its quota
tree, and annotations users copy from its examples). Clearance has no quota manager."""


def quota_keys(metadata: Mapping[str, Any]) -> list[str]:
    """The quota labels and annotations of an AppWrapper, which Clearance ignores (noted)."""
    keys = []
    for where in ("labels", "annotations"):
        values = metadata.get(where)
        if isinstance(values, Mapping):
            keys += [f"{where}[{k}]" for k in values if str(k).startswith(QUOTA_PREFIXES)]
    return sorted(keys)
