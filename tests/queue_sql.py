"""Helpers for the tests that call the queue's SQL functions directly, with time
as a parameter (p_now): a fixed clock, thin calls, and a notification collector."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import asyncpg
import pytest

T0 = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
S = dt.timedelta(seconds=1)
M = dt.timedelta(minutes=1)


async def register(pool, kind, *, max_attempts=5, lease="5 minutes",
                   backoff="{1 minute,5 minutes,15 minutes,60 minutes}", jitter=0.0):
    await pool.execute("select jobfeed.register_kind($1, $2, $3::text::interval, $4::text::interval[], $5, '')",
                       kind, max_attempts, lease, backoff, jitter)


async def submit(pool, target="t", kind="k", now=T0, payload="{}"):
    r = await pool.fetchrow("select * from jobfeed.submit($1, $2, $3::jsonb, null, 65536, $4)",
                            kind, target, payload, now)
    return r["id"]


async def claim(pool, limit=1, now=T0, kinds=("k",), worker="w", lease=None):
    return await pool.fetch("select * from jobfeed.claim($1, $2, $3, $4, $5)", list(kinds), limit, worker, lease, now)


async def claim_one(pool, now=T0, **kw):
    rows = await claim(pool, 1, now, **kw)
    assert len(rows) == 1, rows
    return rows[0]


async def job(pool, job_id):
    return await pool.fetchrow("select * from jobfeed.jobs where id = $1", job_id)


async def public(pool, job_id):
    return json.loads(await pool.fetchval("select jobfeed.get_job($1)::text", job_id))


# Every ended attempt, as admins see them: the log, and each completed job's
# last attempt, which its row holds (jobfeed.ended_attempts).
ATTEMPTS = "(select e.* from jobfeed.jobs j, jobfeed.ended_attempts(j) e)"


async def log(pool, job_id):
    return await pool.fetch(f"select * from {ATTEMPTS} a where job_id = $1 order by generation", job_id)


async def fail_transient(pool, r, code="boom", now=T0, retry_after=None):
    return await pool.fetchval("select jobfeed.fail_transient($1, $2, $3, 'msg ' || $3, $4, $5)",
                               r["id"], r["generation"], code, retry_after, now)


async def park_at(pool, trigger: str, lock: int) -> None:
    """A trigger (`trigger`: the rest of its CREATE TRIGGER, name to level) that,
    in a session with test.park = 'on', waits on advisory lock `lock` (which the
    test holds) before the statement goes on: the test parks a session exactly
    there, does what must happen meanwhile, then unlocks."""
    await pool.execute(f"""
        create or replace function public.park_{lock}() returns trigger language plpgsql as $$
        begin
            if current_setting('test.park', true) = 'on' then
                perform pg_advisory_lock({lock});
                perform pg_advisory_unlock({lock});
            end if;
            return coalesce(new, old);  -- old: a DELETE's row, which null would skip
        end $$;
        create trigger {trigger} execute function public.park_{lock}();
    """)


class Listen:
    """A dedicated connection collecting notifications (a pooled one would UNLISTEN)."""

    def __init__(self, conn):
        self.conn = conn
        self.got: list[tuple[str, str]] = []
        self.event = asyncio.Event()

    @classmethod
    async def open(cls, dsn, channels=("jobfeed_changed", "jobfeed_due")):
        self = cls(await asyncpg.connect(dsn))
        for ch in channels:
            await self.conn.add_listener(ch, self._on)
        return self

    def _on(self, _conn, _pid, channel, payload):
        self.got.append((channel, payload))
        self.event.set()

    async def take(self, settle=0.1):
        """All notifications so far, after a short quiet period (delivery is async)."""
        await self.conn.execute("select 1")  # round trip: anything sent before is in
        await asyncio.sleep(settle)
        got, self.got = self.got, []
        return got


async def session_waits(pool, what: str, *, pid: int | None = None, column: str = "wait_event_type",
                        value: str = "Lock") -> None:
    """Until a session (`pid`, else any) shows `value` in pg_stat_activity's
    `column` (default: waiting for a lock): the server's own view of it, an
    instant read, no clock. Fails the test after ~5 s."""
    for _ in range(500):
        if await pool.fetchval(f"select exists (select from pg_stat_activity where {column} = $1 "
                               "and ($2::int is null or pid = $2))", value, pid):
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"{what}: never {column} = {value}")


async def jobs_pages(pool) -> int:
    """Pages of the jobs table: what a scan of it reads."""
    return await pool.fetchval("select pg_relation_size('jobfeed.jobs') / 8192")


async def pages_of(conn, sql: str, *args) -> int:
    """Pages a statement touched, those of the functions it called included."""
    plan = await conn.fetchval("explain (analyze, buffers, format json) " + sql, *args)
    top = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"]


async def value_and_index_entries_read(pool, sql: str):
    """sql's value (fetchval), and the index entries of jobfeed.jobs it read,
    on a connection of the pool."""
    async with pool.acquire() as conn:
        return await value_and_index_entries_read_on(conn, sql)


async def value_and_index_entries_read_on(conn, sql: str):
    """As value_and_index_entries_read, on this connection (under the plans it
    kept)."""
    return await value_and_count_around(conn, sql, "select sum(pg_stat_get_xact_tuples_returned(i.indexrelid))::bigint "
                                                   "from pg_index i where i.indrelid = 'jobfeed.jobs'::regclass")


async def value_and_count_around(conn, sql: str, counter: str):
    """sql's value (fetchval), and how far `counter`, a query of the
    connection's pending statistics, moved around it in one transaction (they
    may hold what earlier transactions on the connection read)."""
    async with conn.transaction():
        before = await conn.fetchval(counter)
        value = await conn.fetchval(sql)
        return value, await conn.fetchval(counter) - before


async def explained(conn, sql: str, *args, analyze: bool = False, buffers: bool = False):
    """The call's rows, and the plans of every statement it runs, nested ones
    included (with the rows each node read, when `analyze`; the pages, when
    `buffers` too), shown by auto_explain."""
    notes: list[str] = []

    def heard(_conn, message):
        if "jobfeed.jobs" in message.message:  # not asyncpg's own type look-ups
            notes.append(message.message)

    await conn.execute("load 'auto_explain'")
    await conn.execute("set auto_explain.log_min_duration = 0; set auto_explain.log_nested_statements = on; "
                       "set auto_explain.log_level = 'notice'; set client_min_messages = 'notice'")
    await conn.execute(f"set auto_explain.log_analyze = {'on' if analyze else 'off'}; "
                       f"set auto_explain.log_buffers = {'on' if buffers else 'off'}")
    conn.add_log_listener(heard)
    try:
        rows = await conn.fetch(sql, *args)
    finally:
        conn.remove_log_listener(heard)
        await conn.execute("set auto_explain.log_min_duration = -1")
    return rows, "\n".join(notes)
