"""The runner's hot path under trouble: outcomes survive a lost connection,
leases follow what the database granted, kinds share the slots, progress is
coalesced."""

from __future__ import annotations

import asyncio

from jobfeed.worker import db
from test_worker_runner import run, spec  # noqa: F401  (run is a fixture)
from waiting import eventually, wait_state


async def _blocked_pid(pool, needle: str) -> int:
    async def probe():
        return await pool.fetchval(
            "select pid from pg_stat_activity where wait_event_type = 'Lock' and query like $1", f"%{needle}%")
    return await eventually(probe, timeout=10, what=f"a {needle} call waiting on a lock")


async def test_a_completion_whose_connection_dies_is_written_again(queue, pool, dsn, run):
    locker = await db.connect(dsn)
    try:
        async def quick(job, ctx):
            # Hold the row, so the completion's statement waits on it and its
            # connection can be killed mid-call.
            await locker.execute("begin")
            await locker.execute("select 1 from jobfeed.jobs where id = $1 for update", job.id)
            return {"ok": True}

        await run(spec("quick", quick, lease=30.0))
        job_id, _ = await queue.submit("quick", "x")
        pid = await _blocked_pid(pool, "complete_many")
        assert await pool.fetchval("select pg_terminate_backend($1)", pid)
        await locker.execute("rollback")
        assert await wait_state(pool, job_id, "completed", timeout=10) == "completed"
        view = await queue.admin_get_job(job_id)
        assert view["generation"] == 1 and view["result"] == {"ok": True}
    finally:
        await locker.close()
