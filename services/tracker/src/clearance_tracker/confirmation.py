"""Pure rules: which objects a teardown tracks, and what counts as proof that one is gone.

Membership (DESIGN §1 "teardown"): an object belongs to the teardown of attempt N of
AppWrapper `aw` when it is in the AppWrapper's namespace and

* it carries the AppWrapper label (`appwrapper.mcad.ibm.com` or
  `workload.codeflare.dev/appwrapper` = `aw`) with an attempt label ≤ N, or with no
  attempt label at all (conservative: an unlabelled leftover must not be ignored), and no
  ownerReference to a *different* AppWrapper UID (a re-created AppWrapper of the same name); or
* it is owned (ownerReferences) by an object the teardown already tracks (a pod a
  controller creates during teardown, even without labels).

Proof of disappearance, and nothing else: a DELETED event with the UID; a GET answering
404; a fresh read (GET or quorum LIST, never a possibly stale event) showing the same
kind/namespace/name with another UID (the name was reused, so the old object no longer
exists). A `deletionTimestamp` is never proof, and neither is absence from a LIST.

The `cleared` rule (DESIGN §1) lives here too, beside the proofs it rests on: a teardown is
cleared when every tracked UID is confirmed gone *and* a verification — a fresh quorum LIST
whose members were just merged into the record, then GETs of what it did not show — leaves
nothing open, its reads taken after every deletion the record has confirmed (a read that still
shows an object the record holds as gone is older than that deletion, and cannot show what the
object created meanwhile). :func:`apply_verification` is the only code that sets `clearing`.

Every function here returns a new record plus the list of objects it confirmed; the caller
does the I/O (reads, CAS write, spans, events), so the rules can be driven by plain calls with
an explicit ``now`` (duplicated, reordered or replayed facts included).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

import msgspec

from clearance import labels, testfaults
from clearance.events import ItemObject, ObjectMeta, PodObject
from clearance_tracker.teardown import Clearing, ConfirmHow, Source, Teardown, TrackedObject

Snapshot = PodObject | ItemObject

_AW_LABELS = (labels.MCAD_APPWRAPPER, labels.CODEFLARE_APPWRAPPER)


@dataclass(frozen=True, slots=True)
class Confirmation:
    """An object newly confirmed gone, and how."""

    object: TrackedObject
    how: ConfirmHow


@dataclass(frozen=True, slots=True)
class Outcome:
    record: Teardown
    confirmed: tuple[Confirmation, ...] = ()
    added: tuple[TrackedObject, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.confirmed or self.added)


# ---------------------------------------------------------------------------- membership


def labelled_attempt(meta: ObjectMeta, *, appwrapper: str) -> tuple[bool, int | None]:
    """(carries this AppWrapper's label, attempt label or None); long names are hashed in
    labels (:func:`clearance.labels.value_for`), so the label is compared with that."""
    value = labels.value_for(appwrapper)
    if not any(meta.labels.get(key) == value for key in _AW_LABELS):
        return False, None
    return True, labels.attempt_of(meta.labels)


def belongs(record: Teardown, meta: ObjectMeta) -> Source | None:
    """How `meta` joins the teardown (`watch`-style label match or `owner`), or None."""
    aw = record.appwrapper
    if meta.namespace != aw.namespace:
        return None
    if any(ref.uid in record.objects for ref in meta.owner_references):
        return "owner"
    labelled, attempt = labelled_attempt(meta, appwrapper=aw.name)
    if not labelled:
        return None
    if attempt is not None and attempt > record.attempt:
        return None
    incarnation = labels.incarnation_of(meta.labels)
    if incarnation is not None and incarnation != labels.value_for(aw.uid):
        return None  # a resubmitted AppWrapper of the same name (its Job's pods, too)
    for ref in meta.owner_references:
        if ref.kind == "AppWrapper" and ref.uid != aw.uid:
            return None  # another AppWrapper that happens to have the same name
    return "watch"


def _snapshot_fields(snapshot: Snapshot) -> dict[str, object]:
    meta = snapshot.metadata
    node = snapshot.spec.node_name if isinstance(snapshot, PodObject) else None
    return {
        "node": node,
        "finalizers": meta.finalizers,
        "deletion_timestamp": meta.deletion_timestamp,
        "owner_uids": tuple(ref.uid for ref in meta.owner_references),
        "attempt": labels.attempt_of(meta.labels),
    }


def track(snapshot: Snapshot, *, source: Source, now: datetime) -> TrackedObject:
    meta = snapshot.metadata
    return TrackedObject(
        kind=snapshot.kind,
        api_version=snapshot.api_version,
        namespace=meta.namespace,
        name=meta.name,
        uid=meta.uid,
        source=source,
        first_seen=now,
        **_snapshot_fields(snapshot),  # type: ignore[arg-type]
    )


def _refresh(obj: TrackedObject, snapshot: Snapshot) -> TrackedObject:
    if obj.gone:
        # A UID, once deleted, never exists again: a read showing it alive was taken before
        # the confirmation (a LIST applied after a DELETED), or the event is a redelivery.
        return obj
    fields = _snapshot_fields(snapshot)
    if obj.attempt is not None:
        fields.pop("attempt")
    return msgspec.structs.replace(obj, **fields)


NameKey = tuple[str, str, str | None, str]
"""(kind, API group, namespace, name): what "the same name" means for two objects."""


def _name_of(obj: TrackedObject) -> NameKey:
    return (obj.kind, obj.api_version.split("/")[0], obj.namespace, obj.name)


def _snapshot_name(snapshot: Snapshot) -> NameKey:
    meta = snapshot.metadata
    return (snapshot.kind, snapshot.api_version.split("/")[0], meta.namespace, meta.name)


# -------------------------------------------------------------------------- applying facts


class _Builder:
    """Accumulates changes to one record (pure; no I/O)."""

    def __init__(self, record: Teardown) -> None:
        self.record = record
        self.objects = dict(record.objects)
        self.confirmed: list[Confirmation] = []
        self.added: list[TrackedObject] = []
        self.touched = False
        self._by_name: dict[NameKey, set[str]] | None = None

    def _named(self, snapshot: Snapshot) -> set[str]:
        """UIDs of tracked objects with the snapshot's kind/namespace/name (an index built at
        the first fresh read, so a LIST of n objects costs O(n), not O(n x tracked))."""
        if self._by_name is None:
            self._by_name = {}
            for obj in self.objects.values():
                self._by_name.setdefault(_name_of(obj), set()).add(obj.uid)
        return self._by_name.get(_snapshot_name(snapshot), set())

    def _track(self, obj: TrackedObject) -> None:
        self.objects[obj.uid] = obj
        if self._by_name is not None:
            self._by_name.setdefault(_name_of(obj), set()).add(obj.uid)

    def confirm(self, uid: str, how: ConfirmHow, now: datetime) -> None:
        obj = self.objects.get(uid)
        if obj is None or obj.gone:
            return
        done = msgspec.structs.replace(obj, confirmed_at=now, confirmed_how=how)
        self.objects[uid] = done
        self.confirmed.append(Confirmation(done, how))
        self.touched = True

    def seen(self, snapshot: Snapshot, now: datetime, *, fresh: bool) -> None:
        """An object exists (event ADDED/MODIFIED; `fresh` for a GET or quorum LIST)."""
        meta = snapshot.metadata
        if fresh:
            # A fresh read shows the name under another UID: the tracked one is gone (name
            # reused). Only fresh reads prove it: a stale or redelivered event about an
            # older object of the same name must not "confirm" the current one.
            for uid in sorted(self._named(snapshot)):
                other = self.objects[uid]
                if other.uid != meta.uid and not other.gone:
                    self.confirm(other.uid, "uid_changed", now)
        current = self.objects.get(meta.uid)
        if current is not None:
            if not fresh:
                # Watch events only add members and prove deletions; the snapshot fields
                # (node, finalizers, deletionTimestamp) are refreshed by verification reads,
                # and the diagnosis GETs afresh anyway. Saves a KV write per MODIFIED.
                return
            refreshed = _refresh(current, snapshot)
            if refreshed != current:
                self.objects[meta.uid] = refreshed
                self.touched = True
            return
        source = belongs(self.record, meta)
        if source is None:
            return
        obj = track(snapshot, source=source, now=now)
        self._track(obj)
        self.added.append(obj)
        self.touched = True

    def deleted(self, snapshot: Snapshot, now: datetime) -> None:
        meta = snapshot.metadata
        if meta.uid in self.objects:
            self.confirm(meta.uid, "watch_deleted", now)
            return
        # A DELETED of a member we never saw alive: record it as tracked-and-confirmed
        # so `cleared` lists it (and a late ADDED replay cannot resurrect it unnoticed).
        source = belongs(self.record, meta)
        if source is None:
            return
        obj = msgspec.structs.replace(
            track(snapshot, source=source, now=now),
            confirmed_at=now,
            confirmed_how="watch_deleted",
        )
        self._track(obj)
        self.added.append(obj)
        self.confirmed.append(Confirmation(obj, "watch_deleted"))
        self.touched = True

    def outcome(self, **extra: object) -> Outcome:
        record = self.record
        if self.touched or extra:
            record = msgspec.structs.replace(record, objects=self.objects, **extra)
        return Outcome(record, tuple(self.confirmed), tuple(self.added))


def apply_event(record: Teardown, *, action: str, snapshot: Snapshot, now: datetime) -> Outcome:
    """A kube watch event (ADDED/MODIFIED/DELETED) for a pod or item."""
    builder = _Builder(record)
    if action == "DELETED":
        builder.deleted(snapshot, now)
    else:
        builder.seen(snapshot, now, fresh=False)
    return builder.outcome()


@dataclass(frozen=True, slots=True)
class Missing:
    """A GET that answered 404 for a tracked object."""

    uid: str


GetResult = Snapshot | Missing


def apply_get(record: Teardown, *, uid: str, result: GetResult, now: datetime) -> Outcome:
    """The answer to GET of tracked object `uid` (by its kind/namespace/name)."""
    builder = _Builder(record)
    if isinstance(result, Missing):
        builder.confirm(uid, "get_404", now)
    elif result.metadata.uid != uid:
        builder.confirm(uid, "uid_changed", now)
        builder.seen(result, now, fresh=True)
    else:
        builder.seen(result, now, fresh=True)
    return builder.outcome()


def apply_list(
    record: Teardown, *, items: Iterable[Snapshot], now: datetime
) -> tuple[Outcome, list[Snapshot]]:
    """A quorum LIST by the AppWrapper label: members found join (or refresh) the record.

    Returns the outcome and the members found (attempt ≤ N), i.e. what keeps the teardown
    from being cleared. Absence from a LIST is *not* proof (labels can change); the caller
    GETs tracked objects the LIST did not show.
    """
    builder = _Builder(record)
    members: list[Snapshot] = []
    for snapshot in items:
        builder.seen(snapshot, now, fresh=True)
        if snapshot.metadata.uid in builder.objects:
            members.append(snapshot)
    return builder.outcome(), members


def mark_verified(record: Teardown, now: datetime) -> Teardown:
    return msgspec.structs.replace(record, last_verified_at=now)


def unseen(record: Teardown, listed_uids: Sequence[str]) -> list[TrackedObject]:
    """Open objects a verification LIST did not show: they need a GET."""
    listed = set(listed_uids)
    return [o for o in record.open_objects if o.uid not in listed]


# ----------------------------------------------------------------------- the cleared rule


def decide_cleared(record: Teardown, *, now: datetime, by: str) -> Teardown:
    """The cleared rule: `clearing` fixed at ``now`` once every tracked UID is confirmed.

    Call it only on a record that a fresh verification was just merged into (that is what
    makes "all confirmed" mean "nothing of attempts ≤ N is left"); an earlier `clearing` is
    never moved.
    """
    if record.clearing is not None:
        return record
    if not record.all_confirmed and not _clears_early(record):
        return record
    return msgspec.structs.replace(record, clearing=Clearing(cleared_at=now, by=by))


def _clears_early(record: Teardown) -> bool:
    """The ``cleared-early`` broken build (tests only): one object may still be open."""
    return testfaults.active("cleared-early") and len(record.open_objects) <= 1


def apply_verification(
    record: Teardown,
    *,
    listed: Sequence[Snapshot],
    gets: Sequence[tuple[str, GetResult]],
    now: datetime,
    by: str,
) -> Outcome | None:
    """One verification by replica `by`: the quorum LIST, then the GETs (uid → answer) of the
    open objects it did not show, then the cleared rule. None when `clearing` is already set
    (nothing a later read shows can undo it)."""
    if record.clearing is not None:
        return None
    stale = reads_predate_a_deletion(record, listed=listed, gets=gets)
    outcome, _ = apply_list(record, items=listed, now=now)
    confirmed = list(outcome.confirmed)
    added = list(outcome.added)
    new = outcome.record
    for uid, result in gets:
        step = apply_get(new, uid=uid, result=result, now=now)
        confirmed.extend(step.confirmed)
        added.extend(step.added)
        new = step.record
    new = mark_verified(new, now)
    if not stale:
        new = decide_cleared(new, now=now, by=by)
    return Outcome(new, tuple(confirmed), tuple(added))


def reads_predate_a_deletion(
    record: Teardown, *, listed: Sequence[Snapshot], gets: Sequence[tuple[str, GetResult]]
) -> bool:
    """Did a read of this verification show alive an object `record` holds as gone?

    Then the reads were taken before that deletion was confirmed (its DELETED was committed
    while the LIST and GETs were under way), and whatever that object created after them — a
    controller's pod, whose ADDED may still be on its way — cannot be in them. Such a
    verification still merges what it proves but cannot decide `cleared`; the next one, whose
    reads follow every confirmation the record holds, can.
    """
    shown = [s.metadata.uid for s in listed]
    shown += [uid for uid, r in gets if not isinstance(r, Missing) and r.metadata.uid == uid]
    return any((obj := record.objects.get(uid)) is not None and obj.gone for uid in shown)
