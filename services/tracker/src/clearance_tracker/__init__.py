"""clearance-tracker: confirms each teardown by UID, escalates when objects outlive their
deadlines, and emits `cleared` (the dispatcher's only redispatch gate). The teardown record
(:mod:`.teardown`, opened from `teardown.started` by :mod:`.inventory`) lives in the tracker's
KV bucket (:mod:`.store`), written by compare-and-swap with group commit (:mod:`.commits`) and
kept current in memory by :mod:`.view`; :mod:`.ownership` says which replica acts for which
teardown; :mod:`.handlers` applies cycle and kube events; :mod:`.confirmation` (pure) and
:mod:`.verification` (fresh reads, :mod:`.reads`) decide that every object is gone;
:mod:`.diagnosis` and :mod:`.escalation` (pure) say why an object is stuck and what is due, and
:mod:`.ladder` does it; :mod:`.reporting` tells the world; :mod:`.tracking` wires one replica and
:mod:`.service` one process.
"""
