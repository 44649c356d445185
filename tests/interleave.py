"""Two transactions made to interleave: one side's statement runs in a
transaction left open while the other side's runs, until that one is done or
waits on a lock; then the first commits. The races of waiting jobs (a
dependency finishing while its dependent is submitted, waited for, or
retried) are each tested both ways round with it."""

from __future__ import annotations

import asyncio
from typing import Any

from jobfeed.worker import db


async def blocked_or_done(pool, pid: int, task: asyncio.Task) -> None:
    """Until the task is done or its session waits on a lock."""
    for _ in range(200):
        if task.done() or await pool.fetchval(
                "select wait_event_type = 'Lock' from pg_stat_activity where pid = $1", pid):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("neither done nor waiting on a lock")


async def one_inside_the_other(dsn: str, pool, first: tuple, second: tuple) -> tuple[Any, Any]:
    """Run `first` (a query and its arguments) in a transaction on a connection
    of its own, then `second` on another while it is open, commit the first
    once the second is done or blocked; -> both statements' values."""
    c1, c2 = await db.connect(dsn), await db.connect(dsn)
    try:
        tx = c1.transaction()
        await tx.start()
        one = await c1.fetchval(*first)
        other = asyncio.create_task(c2.fetchval(*second))
        await blocked_or_done(pool, c2.get_server_pid(), other)
        await tx.commit()
        return one, await other
    finally:
        await c1.close()
        await c2.close()
