"""How a fault-bench handler records its run: one row in the bench's own table,
`bench_runs (key, pid, at)`, written once the handler's work is done and before
it returns. A job whose run is recorded twice ran to its end twice.

Imported by every driver's handler (asyncpg where the system has it, else
psycopg), so the record is made the same way for every system. The write retries
until it lands (up to a minute): a fault then costs the queue's machinery, never
a handler failing its own write."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

TABLE = """
create table if not exists bench_runs (
    run text primary key,
    key bigint not null,
    pid integer not null,
    at  timestamptz not null default clock_timestamp()
);
create index if not exists bench_runs_key on bench_runs (key);
"""
# A retried write of one run (its commit's answer lost with the connection) must
# not count as a second run: each run has an id of its own.
INSERT = "insert into bench_runs (run, key, pid) values ({0}, {1}, {2}) on conflict (run) do nothing"
RETRY_FOR = 60.0


class Recorder:
    """Sleeps `work_ms` (the job's work), then records the run on a small pool of
    its own, opened on first use."""

    def __init__(self, dsn: str, work_ms: float, pool_size: int = 4):
        self.dsn = dsn
        self.work = work_ms / 1000
        self.pool_size = pool_size
        self._pool = None
        self._lock = asyncio.Lock()
        self._pid = os.getpid()

    async def _get_pool(self):
        async with self._lock:
            if self._pool is None:
                try:
                    import asyncpg
                    self._pool = await asyncpg.create_pool(self.dsn, min_size=1, max_size=self.pool_size)
                    self._kind = "asyncpg"
                except ImportError:
                    from psycopg_pool import AsyncConnectionPool
                    self._pool = AsyncConnectionPool(self.dsn, min_size=1, max_size=self.pool_size, open=False,
                                                     kwargs={"autocommit": True})
                    await self._pool.open()
                    self._kind = "psycopg"
            return self._pool

    async def _insert(self, run: str, key: int) -> None:
        pool = await self._get_pool()
        if self._kind == "asyncpg":
            await pool.execute(INSERT.format("$1", "$2", "$3"), run, key, self._pid)
        else:
            async with pool.connection() as conn:
                await conn.execute(INSERT.format("%s", "%s", "%s"), (run, key, self._pid))

    async def run(self, key: int) -> None:
        if self.work > 0:
            await asyncio.sleep(self.work)
        give_up = time.monotonic() + RETRY_FOR
        run = uuid.uuid4().hex
        while True:
            try:
                await self._insert(run, int(key))
                return
            except Exception:
                if time.monotonic() > give_up:
                    raise
                await asyncio.sleep(0.2)


def from_env() -> Recorder | None:
    """BENCH_RECORD_DSN (and BENCH_WORK_MS) set by the fault bench; else None."""
    dsn = os.environ.get("BENCH_RECORD_DSN")
    return Recorder(dsn, float(os.environ.get("BENCH_WORK_MS", "0"))) if dsn else None
