"""The work queue's delayed adds on the loop the dispatcher runs on (uvloop, its default)."""

from __future__ import annotations

import asyncio

import uvloop

from clearance_dispatcher.workqueue import WorkQueue


async def _an_earlier_timer_wins_and_fires() -> str:
    queue: WorkQueue[str] = WorkQueue(urgent=lambda key: False)
    # uvloop rounds delays to whole milliseconds: this one is a plain Handle, not a TimerHandle
    queue.add_after("aw", 0.0001)
    queue.add_after("aw", 5.0)  # later: the earlier timer stands
    return await asyncio.wait_for(queue.get(), 1.0)


def test_a_sub_millisecond_delay_then_a_later_one_on_uvloop_keeps_the_earlier() -> None:
    assert uvloop.run(_an_earlier_timer_wins_and_fires()) == "aw"


async def test_a_sub_millisecond_delay_then_a_later_one_on_the_standard_loop() -> None:
    assert await _an_earlier_timer_wins_and_fires() == "aw"
