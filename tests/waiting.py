"""Waiting for a condition in tests: poll briefly, fail with what was last seen."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable


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
    async def probe():
        s = await job_state(pool, job_id)
        return s if s in states else None
    return await eventually(probe, timeout=timeout, what=f"job {job_id} in {states}")
