"""The dispatcher's effects: small modules that only do I/O, in the order a transition allows.

Each effect writes its transition (:mod:`clearance_dispatcher.transitions`, through
:meth:`~clearance_dispatcher.runtime.Runtime.write`) *before* the side effect it permits, and
every side effect is idempotent (a create answering 409 of the same attempt, a delete answering
404, a publish with the same ``Nats-Msg-Id``), so a ``kill -9`` anywhere resumes at the step it
was in: :mod:`.dispatch` (create the items of an attempt), :mod:`.monitor` (count pods, poll
completion, decide), :mod:`.teardown` (open the cycle, delete, announce), :mod:`.validation`
(refuse a spec that cannot be dispatched).
"""
