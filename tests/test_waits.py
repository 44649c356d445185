"""Timed waits keep every cancellation. With Python 3.11's asyncio.wait_for, a
cancel that landed as the awaited thing finished was dropped: the API's
listener once ran on after its stop() and held a server's shutdown for good
(CI, test_security_streams)."""

from __future__ import annotations

import asyncio

import pytest

from jobfeed.worker import db
from jobfeed.worker.waits import cancel_and_wait, wait_event
from servers import ROOT


async def _steps() -> None:
    """Let the tasks just started run into their waits, whatever they start on the way."""
    for _ in range(3):
        await asyncio.sleep(0)


async def _inside_a_wait(event: asyncio.Event) -> asyncio.Task:
    """A task waiting on `event` for a minute, past its first steps."""
    task = asyncio.create_task(wait_event(event, 60))
    await _steps()
    assert not task.done()
    return task


async def test_a_wait_says_whether_its_event_came():
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 60) is True
    task = await _inside_a_wait(event := asyncio.Event())
    event.set()
    assert await task is True


async def test_a_cancel_that_lands_as_the_event_comes_is_kept():
    event = asyncio.Event()
    task = await _inside_a_wait(event)
    event.set()
    task.cancel()  # in the same step: the event's waiter is done before the cancel is seen
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_listener_stops_when_its_connection_is_lost_as_it_is_stopped(dsn):
    listener = db.Listener(dsn, {"jobfeed_test": lambda channel, payload: None}, health_interval=60.0)
    await listener.start()
    await _steps()
    listener._lost.set()  # what the connection's termination callback does, in the step stop() cancels
    stopping = asyncio.create_task(listener.stop())
    done, _ = await asyncio.wait([stopping], timeout=5)
    assert done, "the listener ran on after its stop"
    assert listener._task is not None and listener._task.cancelled()


async def test_a_cancel_of_whoever_waits_for_a_task_to_end_is_kept():
    """Stopping a task by awaiting it and catching CancelledError also swallowed
    a cancel of the stopper: a shutdown with a deadline could not end it."""
    async def stubborn():
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(60)  # slow to end, as a write in flight is

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    stopper = asyncio.create_task(cancel_and_wait(task))
    await asyncio.sleep(0)
    stopper.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopper
    assert not task.done()  # the stopper left without waiting for it
    task.cancel()
    await asyncio.wait([task])


def test_no_timed_wait_of_the_service_bypasses_waits():
    """asyncio.wait_for is the form that lost cancels: a timed wait in api/ or
    worker/ goes through worker/waits.py instead."""
    found = [f"{path.relative_to(ROOT)}:{number}"
             for path in sorted([*ROOT.glob("api/*.py"), *ROOT.glob("worker/*.py")])
             for number, line in enumerate(path.read_text().splitlines(), 1) if "asyncio.wait_for(" in line]
    assert found == []
