"""clearance-dispatcher: an MCAD-v1-compatible AppWrapper dispatcher.

It never dispatches attempt N+1 before the tracker's ``cleared`` of attempt N; how its modules
fit together is in :mod:`clearance_dispatcher.controller`.
"""
