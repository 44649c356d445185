"""Waiting for a condition in tests: poll briefly, fail with what was last seen."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable

from jobfeed.worker.waits import wait_event


async def eventually(probe: Callable[[], Awaitable[Any]], *, timeout: float = 15.0, interval: float = 0.05,
                     what: str = "condition") -> Any:
    """Call probe until it returns something truthy; return that value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last seen: {last!r}")


async def job_state(pool, job_id) -> str | None:
    return await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job_id)


async def wait_state(pool, job_id, *states: str, timeout: float = 15.0) -> str:
    """Wait for the job to reach one of the states: woken by the job's own
    notifications (every state change sends one), re-checked on each, with a
    slow poll only as a safety net."""
    changed = asyncio.Event()
    prefix = f"{job_id}:"

    def on_changed(_conn, _pid, _channel, payload: str) -> None:
        if prefix in payload:
            changed.set()

    deadline = time.monotonic() + timeout
    last = None
    async with pool.acquire() as conn:
        await conn.add_listener("jobfeed_changed", on_changed)
        try:
            while True:
                changed.clear()
                last = await job_state(pool, job_id)
                if last in states:
                    return last
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                await wait_event(changed, min(left, 1.0))
        finally:
            await conn.remove_listener("jobfeed_changed", on_changed)
    raise AssertionError(f"timed out after {timeout}s waiting for job {job_id} in {states}; last seen: {last!r}")
