"""clearance-watcher: lists and watches AppWrappers, pods, nodes and the kinds AppWrappers wrap,
and publishes every change as a slim kube event on the CLEARANCE_KUBE stream, never losing a
deletion (a relist infers the tombstones a broken watch missed). One replica publishes at a time
(:mod:`.service`, leader election); each informer (:mod:`.watching`, on the shared
list-then-watch loop of :mod:`clearance.informing`) resumes from what was published before
(:mod:`.seeding`, :mod:`.resuming`), decodes raw JSON into snapshots (:mod:`.decoding`,
:mod:`.salvage`, :mod:`.oversize`) and hands the events to the ordered, bounded publisher
(:mod:`.publishing`); :mod:`.kinds` starts and stops the informers of wrapped kinds and
:mod:`.cycles` joins the events of a teardown to its requeue-cycle trace.
"""
