"""The work queue's lanes: first looks before (and beside) dispatches, then the rest."""

from __future__ import annotations

import asyncio

from clearance_dispatcher.workqueue import WorkQueue


async def test_an_urgent_key_is_served_before_normal_ones_queued_earlier() -> None:
    urgent = {"bad"}
    queue: WorkQueue[str] = WorkQueue(urgent=lambda key: key in urgent)
    for key in ("big-1", "big-2", "bad"):
        queue.add(key)
    assert [await queue.get() for _ in range(3)] == ["bad", "big-1", "big-2"]


async def test_an_urgent_only_getter_takes_only_urgent_keys() -> None:
    urgent = {"bad"}
    queue: WorkQueue[str] = WorkQueue(urgent=lambda key: key in urgent)
    queue.add("big")
    waiting = asyncio.create_task(queue.get(urgent_only=True))
    await asyncio.sleep(0)
    assert not waiting.done()
    queue.add("bad")
    assert await asyncio.wait_for(waiting, 1) == "bad"
    assert await queue.get() == "big"


async def test_a_key_queued_normal_moves_to_the_urgent_lane_when_it_becomes_urgent() -> None:
    urgent: set[str] = set()
    queue: WorkQueue[str] = WorkQueue(urgent=lambda key: key in urgent)
    queue.add("a")
    queue.add("b")
    urgent.add("b")
    queue.add("b")
    assert len(queue) == 2
    assert await queue.get(urgent_only=True) == "b"
    assert await queue.get() == "a"


async def test_an_urgent_key_wakes_the_urgent_only_getter_first() -> None:
    queue: WorkQueue[str] = WorkQueue(urgent=lambda key: key == "bad")
    general = asyncio.create_task(queue.get())
    intake = asyncio.create_task(queue.get(urgent_only=True))
    await asyncio.sleep(0)
    queue.add("bad")
    assert await asyncio.wait_for(intake, 1) == "bad"
    assert not general.done()
    queue.add("big")
    assert await asyncio.wait_for(general, 1) == "big"


async def test_a_key_is_never_handed_out_twice_at_once_across_lanes() -> None:
    urgent: set[str] = set()
    queue: WorkQueue[str] = WorkQueue(urgent=lambda key: key in urgent)
    queue.add("a")
    assert await queue.get() == "a"
    urgent.add("a")
    queue.add("a")  # while processing: dirty, not queued
    assert len(queue) == 0
    queue.done("a")
    assert await asyncio.wait_for(queue.get(urgent_only=True), 1) == "a"


async def test_a_cancelled_woken_getter_passes_the_key_on() -> None:
    queue: WorkQueue[str] = WorkQueue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("k")  # wakes the first getter
    first.cancel()
    assert await asyncio.wait_for(second, 1) == "k"


async def test_a_soon_key_is_served_after_urgent_ones_and_before_normal_ones() -> None:
    queue: WorkQueue[str] = WorkQueue(
        urgent=lambda key: key == "bad", soon=lambda key: key.startswith("cleared")
    )
    for key in ("teardown-1", "cleared-1", "teardown-2", "bad", "cleared-2"):
        queue.add(key)
    assert [await queue.get() for _ in range(5)] == [
        "bad",
        "cleared-1",
        "cleared-2",
        "teardown-1",
        "teardown-2",
    ]


async def test_a_normal_key_moves_to_the_soon_lane_when_it_becomes_soon() -> None:
    soon: set[str] = set()
    queue: WorkQueue[str] = WorkQueue(soon=lambda key: key in soon)
    queue.add("a")
    queue.add("b")
    soon.add("b")
    queue.add("b")
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["b", "a"]


async def test_an_urgent_only_getter_never_takes_a_soon_key() -> None:
    queue: WorkQueue[str] = WorkQueue(soon=lambda key: True)
    waiting = asyncio.create_task(queue.get(urgent_only=True))
    queue.add("cleared")
    await asyncio.sleep(0)
    assert not waiting.done()
    assert await queue.get() == "cleared"
    waiting.cancel()
