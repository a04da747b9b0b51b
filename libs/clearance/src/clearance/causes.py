"""The words for a diagnosis cause (why an object outlived its teardown deadline), one
phrase per :data:`clearance.events.Cause`, shared by every screen that shows one:
``clearance explain`` and ``clearance events``.
"""

from __future__ import annotations

from clearance import events


def cause_text(cause: events.Cause) -> str:
    """One diagnosis cause in words."""
    match cause:
        case events.NodeMissing(node=node):
            return f"node {node} is gone"
        case events.NodeNotReady(node=node, status=status):
            return f"node {node} not ready ({status or 'no Ready condition'})"
        case events.NodeUnreachable(node=node):
            return f"node {node} unreachable"
        case events.NodeOutOfService(node=node):
            return f"node {node} out of service"
        case events.Finalizers(finalizers=names):
            return "held by finalizer " + ", ".join(names)
        case events.InGracePeriod(seconds_left=left):
            return f"in its grace period ({left:.0f}s left)"
        case events.ControllerRecreating():
            return "a controller keeps recreating it"
        case events.UnknownCause(detail=detail):
            return detail or "no known cause"
    return "no known cause"
