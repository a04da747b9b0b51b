"""Kubernetes Events on AppWrappers, so ``kubectl describe appwrapper`` tells the story.

Every escalation step and every dispatch problem is also recorded as a core/v1 Event on the
AppWrapper: operators who never look at NATS still see "DeletionStuck: pod x on lost node y".
Event names are deterministic per (AppWrapper UID, reason, key) so a retried handler updates
nothing twice: the second create answers 409 and is treated as done.
"""

from __future__ import annotations

import hashlib
import logging
from datetime import UTC, datetime
from typing import Final, Literal

from clearance.events import AppWrapperRef
from clearance.kube import EVENTS, Kube, KubeError

log = logging.getLogger(__name__)

EventType = Literal["Normal", "Warning"]
_MAX_MESSAGE: Final = 1024


def event_name(*, involved_name: str, involved_uid: str, reason: str, key: str) -> str:
    """A stable, DNS-safe name: the same fact always maps to the same Event object."""
    digest = hashlib.sha256(f"{involved_uid}:{reason}:{key}".encode()).hexdigest()[:16]
    head = involved_name[:200].rstrip("-.")  # a DNS label ends alphanumeric
    return f"{head}.{digest}" if head else digest


async def record_event(
    kube: Kube,
    *,
    involved: dict[str, str],
    reason: str,
    message: str,
    type_: EventType = "Warning",
    component: str,
    key: str = "",
    now: datetime | None = None,
) -> bool:
    """Create one Event about ``involved`` (apiVersion, kind, namespace, name, uid).

    Returns False when the Event already existed (a retry) and True when it was created.
    Failures other than 409 are logged and swallowed: an Event is a courtesy, never a reason
    to fail the step that caused it.
    """
    moment = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    namespace = involved["namespace"]
    body = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event_name(
                involved_name=involved["name"], involved_uid=involved["uid"], reason=reason, key=key
            ),
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": involved["apiVersion"],
            "kind": involved["kind"],
            "namespace": namespace,
            "name": involved["name"],
            "uid": involved["uid"],
        },
        "reason": reason,
        "message": message[:_MAX_MESSAGE],
        "type": type_,
        "source": {"component": component},
        "reportingComponent": component,
        "reportingInstance": component,
        "firstTimestamp": moment,
        "lastTimestamp": moment,
        "count": 1,
    }
    try:
        await kube.create(EVENTS, body, namespace=namespace)
    except KubeError as exc:
        if exc.conflict:
            return False
        log.warning(
            "could not record event",
            extra={"reason": reason, "involved": involved["name"], "error": str(exc)},
        )
        return False
    return True


async def record_appwrapper_event(
    kube: Kube,
    appwrapper: AppWrapperRef,
    *,
    api_version: str,
    component: str,
    reason: str,
    message: str,
    type_: EventType = "Warning",
    key: str = "",
) -> bool:
    """:func:`record_event` about ``appwrapper`` (of ``api_version``, the served AppWrapper
    group/version) on behalf of ``component``: the dispatcher's and the tracker's Events."""
    return await record_event(
        kube,
        involved={
            "apiVersion": api_version,
            "kind": "AppWrapper",
            "namespace": appwrapper.namespace,
            "name": appwrapper.name,
            "uid": appwrapper.uid,
        },
        reason=reason,
        message=message,
        type_=type_,
        component=component,
        key=key,
    )
