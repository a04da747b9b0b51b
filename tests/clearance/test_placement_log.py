"""The placement log: a first leader is INFO, a fail-over (a known leader replaced) WARNING."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from nats.js import api

from clearance.bus.placement import note_placement, reset_placements


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    reset_placements()
    yield
    reset_placements()


def info(leader: str | None) -> api.StreamInfo:
    return api.StreamInfo(
        config=api.StreamConfig(name="CLEARANCE_CYCLE", num_replicas=3),
        state=api.StreamState(messages=0, bytes=0, first_seq=0, last_seq=0, consumer_count=0),
        cluster=api.ClusterInfo(leader=leader, name="c", replicas=[]),
    )


def levels(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if r.name.endswith("placement")]


def test_a_first_leader_after_none_is_logged_at_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    note_placement(info(None))
    note_placement(info("n1"))
    assert levels(caplog) == [
        (logging.INFO, "stream placement"),
        (logging.INFO, "stream leader elected"),
    ]


def test_a_known_leader_replaced_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    note_placement(info("n1"))
    note_placement(info("n2"))
    assert levels(caplog)[-1] == (logging.WARNING, "stream leader changed")
