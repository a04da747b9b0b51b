"""Span attribute names shared by the three services: OpenTelemetry semantic conventions where
they have a name, one ``clearance.*`` namespace for everything of our own.

The semconv names come from the ``opentelemetry-semantic-conventions`` package (stable
``k8s.*`` attributes; ``messaging.*`` is still incubating there, so it is imported from the
package's ``_incubating`` module rather than spelled out by hand). An AppWrapper's namespace
is ``k8s.namespace.name`` (every object Clearance creates lives in it); the AppWrapper itself has
no semconv name, so it is ``clearance.aw.*``. Keep this module small and stable: it is the
vocabulary the e2e tests check, so a name, once published, keeps its meaning; add names, do not
rename them.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.semconv._incubating.attributes import messaging_attributes as _messaging
from opentelemetry.semconv.attributes import k8s_attributes as _k8s

# -- OpenTelemetry semantic conventions ----------------------------------------------------

K8S_NAMESPACE_NAME: Final = _k8s.K8S_NAMESPACE_NAME
"""Namespace of the object (for AppWrapper-level spans: the AppWrapper's namespace)."""
K8S_POD_NAME: Final = _k8s.K8S_POD_NAME
K8S_POD_UID: Final = _k8s.K8S_POD_UID
K8S_NODE_NAME: Final = _k8s.K8S_NODE_NAME
MESSAGING_SYSTEM: Final = _messaging.MESSAGING_SYSTEM
MESSAGING_DESTINATION_NAME: Final = _messaging.MESSAGING_DESTINATION_NAME

# -- Clearance's own -----------------------------------------------------------------------

AW_NAME: Final = "clearance.aw.name"
"""Name of the AppWrapper the span is about."""
AW_UID: Final = "clearance.aw.uid"
"""UID of that AppWrapper (one incarnation of the name)."""
ATTEMPT: Final = "clearance.attempt"
"""The attempt the span is about: the torn-down attempt for a cycle root and its teardown
spans, the new attempt for ``dispatch``/``redispatch`` (as ``attempt`` in the events)."""
REASON: Final = "clearance.reason"
"""Why: a requeue/failure reason (``MinPodsNotRunning`` …) or the step (``dispatch`` …)."""
OUTCOME: Final = "clearance.outcome"
"""How a cycle root ended: ``redispatched``, ``failed``, ``appwrapper deleted`` …"""
RECOVERED: Final = "clearance.recovered"
"""True on a cycle root re-created after a restart (same ids, original start time)."""

SEMCONV: Final = frozenset(
    {
        K8S_NAMESPACE_NAME,
        K8S_POD_NAME,
        K8S_POD_UID,
        K8S_NODE_NAME,
        MESSAGING_SYSTEM,
        MESSAGING_DESTINATION_NAME,
    }
)
"""The semantic-convention names used by Clearance (every other attribute is ``clearance.*``)."""


def is_conventional(name: str) -> bool:
    """Is ``name`` a semconv name or in Clearance's own ``clearance.*`` namespace?"""
    return name in SEMCONV or name.startswith("clearance.") or name.startswith("messaging.")
