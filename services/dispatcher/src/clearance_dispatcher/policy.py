"""Per-AppWrapper policy resolved against the operator defaults (pure).

An AppWrapper may set its requeue wait and its teardown policy in
``spec.schedulingSpec.requeuing`` (parsed and validated in :mod:`clearance_dispatcher.
appwrapper`); whatever it leaves out comes from :class:`~clearance_dispatcher.settings.
DispatcherSettings`. This module is the one place that merges the two: the pause after
``cleared`` (read by admission), the default requeue wait (read by the monitor) and the
:class:`~clearance.events.TeardownPolicy` that travels to the tracker in ``teardown.started``.
"""

from __future__ import annotations

import math

from clearance.events import TeardownPolicy
from clearance_dispatcher.appwrapper import AppWrapperSpec
from clearance_dispatcher.settings import DispatcherSettings


def whole_seconds(value: float) -> int:
    """A settings duration in whole seconds, rounded up (never negative)."""
    return max(0, math.ceil(value))


def pause_seconds(spec: AppWrapperSpec, settings: DispatcherSettings) -> int:
    """The pause between ``cleared`` and the next dispatch."""
    value = spec.requeuing.pause_time_in_seconds
    return whole_seconds(settings.pause_time) if value is None else value


def default_wait(settings: DispatcherSettings) -> int:
    """The requeue wait of an AppWrapper that names none (at least one second)."""
    return whole_seconds(settings.requeue_time) or 1


def teardown_policy(spec: AppWrapperSpec, settings: DispatcherSettings) -> TeardownPolicy:
    """The deadlines of a teardown of ``spec``, as the tracker will apply them."""
    r = spec.requeuing
    return TeardownPolicy(
        stuck_alert_seconds=r.stuck_alert_time_in_seconds
        if r.stuck_alert_time_in_seconds is not None
        else whole_seconds(settings.stuck_alert_time),
        force_deletion_seconds=r.force_deletion_time_in_seconds
        if r.force_deletion_time_in_seconds is not None
        else whole_seconds(settings.force_deletion_time),
        finalizer_removal=r.finalizer_removal or settings.finalizer_removal,
        pause_seconds=pause_seconds(spec, settings),
    )
