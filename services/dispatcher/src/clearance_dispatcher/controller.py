"""The dispatcher of one leader term, assembled: intake → admission → reconciler → effects.

:class:`Dispatcher` builds the parts around one :class:`~clearance_dispatcher.runtime.Runtime`
and exposes what :mod:`clearance_dispatcher.service` wires to the world (informer callbacks, NATS
handlers, the worker and scan loops, shutdown). It decides nothing itself. The cycle it drives
(DESIGN §4), each transition written before its side effect:

* Queued → (admitted) → **Dispatching** (``attempt`` = N written first) → items created →
  ``dispatched``/``redispatched`` → **Dispatched**.
* Dispatched → too few pods after the wait → **TearingDown** (``tearingDown`` = N, the cycle's
  traceparent) → items deleted → ``requeued`` + ``teardown.started`` → announced.
* ``cleared`` of N (and only of N) → ``clearedAt``, ``tearingDown`` null → Queued; the dispatch
  of N+1 waits ``pauseTimeInSeconds`` from ``clearedAt``.

Safety belt besides ``cleared``: right before creating anything of attempt N+1, a quorum LIST of
the AppWrapper's pods must find none of another attempt, and an item name still held by an older
object blocks creation (never overwritten).
"""

from __future__ import annotations

from clearance_dispatcher.admission import Admission
from clearance_dispatcher.cycles import CycleRoots
from clearance_dispatcher.effects.dispatch import Dispatch
from clearance_dispatcher.effects.monitor import Monitor
from clearance_dispatcher.effects.teardown import Teardown
from clearance_dispatcher.effects.validation import Validation
from clearance_dispatcher.handlers import Handlers
from clearance_dispatcher.intake import Intake
from clearance_dispatcher.reconciler import Reconciler
from clearance_dispatcher.runtime import Runtime


class Dispatcher:
    """State, work queue and reconcile logic of one active dispatcher replica."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        roots = CycleRoots(rt.tracer)
        self.intake = Intake(rt)
        self.admission = Admission(rt)
        teardown = Teardown(rt, roots)
        dispatch = Dispatch(rt, roots, teardown)
        self.reconciler = Reconciler(
            rt,
            admission=self.admission,
            validation=Validation(rt),
            dispatch=dispatch,
            monitor=Monitor(rt, self.intake, teardown),
            teardown=teardown,
        )
        self.handlers = Handlers(rt, roots, self.admission, dispatch)
        # What the service wires up.
        self.state = rt.state
        self.synced = rt.synced
        self.kube = rt.kube
        self.aw_resource = rt.aw_resource
        self.on_appwrapper = self.intake.on_appwrapper
        self.on_appwrapper_deleted = self.intake.on_appwrapper_deleted
        self.on_pod = self.intake.on_pod
        self.on_pod_deleted = self.intake.on_pod_deleted
        self.on_node = self.intake.on_node
        self.on_node_deleted = self.intake.on_node_deleted
        self.relist = self.intake.relist
        self.handle_kube_event = self.intake.handle_kube_event
        self.handle_cleared = self.handlers.handle_cleared
        self.handle_alert = self.handlers.handle_alert
        self.run_workers = self.reconciler.run_workers
        self.run_scanner = self.reconciler.run_scanner
        self.scan = self.admission.scan

    async def stop(self) -> None:
        self.rt.queue.close()
        self.rt.cancel_tasks()
        for entry in self.rt.state.appwrappers.values():
            CycleRoots.end_all(entry.local, outcome="dispatcher stopped")
