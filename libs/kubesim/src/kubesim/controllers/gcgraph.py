"""Which changes to the cached objects can change the garbage collector's plan.

A GC pass (`garbagecollector.plan_collection`) reads every cached object of every monitored
resource (~5-10 ms at 4,000 pods), and it ran after every event of every informer (pod status
writes, Lease renewals): a third of kubesim's time in the 64-node, 4,000-pod rack-loss setup.
:class:`GraphView` keeps, from the same events, what a pass reads of each object (uid, owner
uids and references, being deleted, finalizers), which uids are owners of some cached object and
which cached uids are being deleted, and answers whether one change can make the plan differ.

It cannot when, before and after, the object is nobody's owner, carries neither the `orphan`
nor the `foregroundDeletion` finalizer, and each of its owners is cached, not being deleted
and itself owned only by cached objects not being deleted: such an object produces no GC work
of its own (all owners solid) and plays no part in another's. (The last clause: an owner that
is itself GC work is deleted with a policy that depends on whether it has dependents, so a
dependent that comes or goes changes that owner's plan.) Anything else wakes the collector up,
as every event did before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Mapping
from typing import Any

__all__ = ["GraphView", "Record", "record_of"]

_POLICY_FINALIZERS = frozenset({"orphan", "foregroundDeletion"})

Record = tuple[str, tuple[str, ...], str, bool, tuple[str, ...]]
"""(uid, owner uids, owner references as text, being deleted, finalizers)."""


def record_of(obj: Mapping[str, Any]) -> Record:
    """What `plan_collection` reads of one object."""
    meta = obj.get("metadata") or {}
    refs = meta.get("ownerReferences") or []
    return (
        str(meta.get("uid")),
        tuple(str(ref.get("uid")) for ref in refs),
        repr(refs),
        bool(meta.get("deletionTimestamp")),
        tuple(str(f) for f in meta.get("finalizers") or ()),
    )


class GraphView:
    """The graph's parts a pass reads, by cache key; see the module docstring."""

    def __init__(self) -> None:
        self._records: dict[Hashable, Record] = {}
        self._deleting: dict[str, bool] = {}  # uid of a cached object -> being deleted
        self._owners: Counter[str] = Counter()  # uid -> references to it from cached objects
        self._owners_of: dict[str, tuple[str, ...]] = {}  # uid of a cached object -> its owners

    def change(self, key: Hashable, obj: Mapping[str, Any] | None) -> bool:
        """The cached object at `key` is now `obj` (None: gone). Whether a pass is needed."""
        old = self._records.get(key)
        new = record_of(obj) if obj is not None else None
        if old == new:
            return False
        if old is not None:
            self._deleting.pop(old[0], None)
            self._owners_of.pop(old[0], None)
            self._owners.subtract(old[1])
            for uid in old[1]:
                if self._owners[uid] <= 0:
                    del self._owners[uid]
            del self._records[key]
        if new is not None:
            self._records[key] = new
            self._deleting[new[0]] = new[3]
            self._owners_of[new[0]] = new[1]
            self._owners.update(new[1])
        return self._matters(old) or self._matters(new)

    def _matters(self, record: Record | None) -> bool:
        if record is None:
            return False
        uid, owners, _, _, finalizers = record
        if uid in self._owners or _POLICY_FINALIZERS.intersection(finalizers):
            return True
        # An owner not cached (gone, or of a kind not watched) or being deleted: GC work.
        if any(self._deleting.get(owner, True) for owner in owners):
            return True
        # An owner that is GC work itself: its plan depends on its dependents.
        return any(
            self._deleting.get(grand, True)
            for owner in owners
            for grand in self._owners_of.get(owner, ())
        )
