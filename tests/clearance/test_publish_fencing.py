"""Publish fencing against a real nats-server (DESIGN §5, Fencing): an event that makes another
service act (``teardown.started``, ``cleared``) goes out only inside the publisher's term, so a
replica woken from a freeze cannot make the tracker tear down, or the dispatcher redispatch, on
stale state. The stream itself is the judge: nothing of a fenced publish is stored."""

from __future__ import annotations

import pytest
from nats.js import JetStreamContext
from tests.conftest import Names

from clearance import bus
from clearance.bus import FencedPublish, RetryPolicy, ensure_stream, publish
from clearance.fencing import Fenced, Term

NO_RETRY = RetryPolicy(attempts=1, initial=0.01, maximum=0.01)


def _clock() -> list[float]:
    return [100.0]


async def _stored(js: JetStreamContext, stream: str) -> int:
    return (await js.stream_info(stream)).state.messages


async def test_a_publish_inside_the_term_is_stored(
    js: JetStreamContext, unique_names: Names
) -> None:
    await ensure_stream(js, unique_names.stream_spec())
    now = _clock()
    term = Term(name="lease test", duration=5.0, clock=lambda: now[0])
    term.began(sent_at=now[0])
    await publish(js, unique_names.subject("a"), b"{}", msg_id="m1", fence=term, retry=NO_RETRY)
    assert await _stored(js, unique_names.stream) == 1


async def test_a_publish_after_the_term_expired_is_refused_and_nothing_is_stored(
    js: JetStreamContext, unique_names: Names
) -> None:
    await ensure_stream(js, unique_names.stream_spec())
    now = _clock()
    term = Term(name="lease test", duration=5.0, clock=lambda: now[0])
    term.began(sent_at=now[0])
    now[0] += 10.0  # frozen past the lease: the monotonic clock kept running
    with pytest.raises(FencedPublish, match="lease test"):
        await publish(js, unique_names.subject("a"), b"{}", msg_id="m1", fence=term, retry=NO_RETRY)
    assert await _stored(js, unique_names.stream) == 0


async def test_a_fenced_publish_is_both_a_bus_error_and_a_fencing_refusal(
    js: JetStreamContext, unique_names: Names
) -> None:
    await ensure_stream(js, unique_names.stream_spec())
    term = Term(name="lease test", duration=5.0)  # never began
    with pytest.raises(bus.BusError) as caught:
        await publish(js, unique_names.subject("a"), b"{}", msg_id="m1", fence=term, retry=NO_RETRY)
    assert isinstance(caught.value, Fenced)
