"""Timed waits that never lose a cancellation.

Python 3.11's asyncio.wait_for returns the awaited result when a cancel lands
as that result arrives, and the cancel is lost: a loop that is stopped by
cancelling it runs on, and whoever awaits its end hangs. asyncio.timeout waits
in the caller's own task and tells its own expiry from a cancel, so every timed
wait of the worker and the API goes through it (tests/test_waits.py checks).
"""

import asyncio


async def wait_event(event: asyncio.Event, seconds: float) -> bool:
    """Wait up to `seconds` for `event`; whether it was set."""
    try:
        async with asyncio.timeout(seconds):
            await event.wait()
    except TimeoutError:
        return False
    return True


async def cancel_and_wait(task: asyncio.Task) -> None:
    """Cancel `task` and wait for its end. Awaiting the task and catching
    CancelledError would also swallow a cancel of the caller meanwhile."""
    task.cancel()
    await asyncio.wait([task])
    if not task.cancelled():
        task.result()  # a failure of its own is the caller's
