"""Ending background tasks: their cancellation is consumed, the caller's never is; a crash is
watched."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from clearance.stopping import pending_waits
from clearance.tasks import CrashWatch, cancel_and_wait, raise_if_cancelling, wait_any, wait_set


async def slow_to_stop() -> None:
    try:
        await asyncio.sleep(60)
    finally:
        await asyncio.sleep(0.2)  # a cleanup that takes a while (closing a watch)


async def test_a_caller_cancelled_while_it_waits_stays_cancelled() -> None:
    looping = True

    async def supervisor() -> None:
        while looping:  # a loop meant to end when it is cancelled
            child = asyncio.create_task(slow_to_stop())
            await asyncio.sleep(0)
            await cancel_and_wait(child)

    task = asyncio.create_task(supervisor())
    await asyncio.sleep(0.05)  # inside cancel_and_wait, the child still cleaning up
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=2)
    looping = False  # a swallowed cancellation leaves the loop running: end it for teardown
    assert task in done and task.cancelled()


async def test_the_tasks_cancellation_and_failures_are_consumed() -> None:
    async def fails() -> None:
        await asyncio.sleep(0)
        raise RuntimeError("boom")

    failing = asyncio.create_task(fails())
    await asyncio.sleep(0.01)
    sleeping = asyncio.create_task(slow_to_stop())
    await asyncio.sleep(0)
    await cancel_and_wait(failing, sleeping)
    assert sleeping.cancelled() and isinstance(failing.exception(), RuntimeError)


async def test_the_shutdown_watchdog_names_where_each_task_waits() -> None:
    stuck = asyncio.Event()
    task = asyncio.create_task(stuck.wait(), name="session-stop")
    await asyncio.sleep(0)
    loop = asyncio.get_running_loop()
    waits = await asyncio.to_thread(pending_waits, loop)  # as the watchdog thread reads it
    assert any(w.startswith("session-stop: wait (locks.py:") for w in waits), waits
    await cancel_and_wait(task)


async def _follow(queue: asyncio.Queue[int], *, checked: bool) -> None:
    """A follower loop as nats-py's ``next_msg`` makes one: ``wait_for`` with a timeout."""
    while True:
        if checked:
            raise_if_cancelling()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(queue.get(), 1.0)


async def _cancelled_as_a_message_arrives(*, checked: bool) -> asyncio.Task[None]:
    queue: asyncio.Queue[int] = asyncio.Queue()
    follower = asyncio.create_task(_follow(queue, checked=checked))
    await asyncio.sleep(0.01)
    queue.put_nowait(1)  # the get completes in the turn the cancel is delivered:
    follower.cancel()  # on Python 3.11 wait_for returns the item and drops the cancel
    await asyncio.wait({follower}, timeout=0.3)
    return follower


async def test_a_loop_that_checks_ends_when_wait_for_swallowed_its_cancel() -> None:
    follower = await _cancelled_as_a_message_arrives(checked=True)
    assert follower.cancelled()


async def test_without_the_check_the_same_loop_runs_on_after_its_cancel() -> None:
    # What the check is for (and the proof the first test can fail): Python 3.11's wait_for.
    follower = await _cancelled_as_a_message_arrives(checked=False)
    try:
        assert not follower.done() and follower.cancelling() == 1
    finally:
        await cancel_and_wait(follower)


async def test_wait_set_says_whether_the_event_came_before_the_timeout() -> None:
    event = asyncio.Event()
    assert not await wait_set(event, timeout=0.01)
    asyncio.get_running_loop().call_later(0.01, event.set)
    assert await wait_set(event, timeout=5)


async def test_a_cancelled_wait_set_raises_even_as_the_event_fires() -> None:
    event = asyncio.Event()
    waiter = asyncio.create_task(wait_set(event, timeout=5))
    await asyncio.sleep(0)
    event.set()  # the wake-up and the cancel arrive in the same turn
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter


async def test_crash_watch_counts_a_task_that_ended_with_an_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    crashes = CrashWatch()

    async def fail() -> None:
        raise RuntimeError("boom")

    task = crashes.watch(asyncio.create_task(fail(), name="worker"))
    await asyncio.wait({task})
    await asyncio.sleep(0)  # done callbacks run on the next turn
    assert crashes.crashed.is_set()
    assert crashes.names == ["worker"]
    assert [r.getMessage() for r in caplog.records] == ["background task crashed"]


async def test_crash_watch_ignores_a_task_cancelled_or_returned() -> None:
    crashes = CrashWatch()
    returned = crashes.watch(asyncio.create_task(asyncio.sleep(0), name="returned"))
    cancelled = crashes.watch(asyncio.create_task(asyncio.sleep(10), name="cancelled"))
    await cancel_and_wait(cancelled)
    await asyncio.wait({returned})
    await asyncio.sleep(0)
    assert not crashes.crashed.is_set()
    assert crashes.names == []


async def test_wait_any_returns_when_one_event_is_set_and_ends_its_waiters() -> None:
    first, second = asyncio.Event(), asyncio.Event()
    before = len(asyncio.all_tasks())
    asyncio.get_running_loop().call_later(0.01, second.set)
    await asyncio.wait_for(wait_any(first, second), timeout=1.0)
    assert second.is_set() and not first.is_set()
    assert len(asyncio.all_tasks()) == before  # no waiter left behind
