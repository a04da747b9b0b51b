"""The tracker's record writes are fenced by its heartbeat term, like its API writes: a replica
frozen past ``owner_timeout`` cannot create, rewrite or delete a teardown record another
replica has taken over (judged from the KV bucket itself, on a real nats-server)."""

from __future__ import annotations

import pytest
from nats.js import JetStreamContext
from tests.conftest import Names
from tracker_builders import record, tracked

from clearance.fencing import Fenced, Term
from clearance_tracker.store import TeardownStore


async def _store(js: JetStreamContext, names: Names) -> tuple[TeardownStore, Term, list[float]]:
    kv = await js.create_key_value(bucket=names.bucket, history=5)
    now = [100.0]
    term = Term(name="tracker-owner", duration=5.0, clock=lambda: now[0])
    store = TeardownStore(kv)
    store.fence = term
    return store, term, now


async def test_a_replica_inside_its_term_writes_records(
    js: JetStreamContext, unique_names: Names
) -> None:
    store, term, now = await _store(js, unique_names)
    term.began(sent_at=now[0])
    created = await store.create(record(tracked("w-0", "u1")))
    assert created is not None
    assert await store.get(created.record.key) is not None


async def test_a_replica_past_its_term_cannot_create_write_or_delete_a_record(
    js: JetStreamContext, unique_names: Names
) -> None:
    store, term, now = await _store(js, unique_names)
    term.began(sent_at=now[0])
    created = await store.create(record(tracked("w-0", "u1")))
    assert created is not None
    now[0] += 10.0  # frozen past the heartbeat term
    with pytest.raises(Fenced):
        await store.create(record(tracked("w-1", "u2"), attempt=2))
    with pytest.raises(Fenced):
        await store.write(created, record(tracked("w-0", "u1", confirmed=True)))
    with pytest.raises(Fenced):
        await store.delete(created.record.key, created.revision)
    kept = await store.get(created.record.key)
    assert kept is not None and kept.revision == created.revision
