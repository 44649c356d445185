"""Batch writes on overlapping rows, from two sessions, in opposite orders: the
heartbeat (extend_many) against the completion batch (complete_many). Rows are
locked in one global order, so neither waits for the other in a cycle, and every
completion is recorded."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from queue_sql import ATTEMPTS, register, session_waits
from jobfeed.worker import db

N = 300
ROUNDS = 4


async def _running_jobs(pool, n: int) -> list[tuple]:
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k', 't' || g from generate_series(1, $1) g", n)
    rows = await pool.fetch("select id, generation from jobfeed.claim(array['k'], $1, 'w')", n)
    assert len(rows) == n
    return sorted((r["id"], r["generation"]) for r in rows)


async def test_heartbeats_racing_completions_in_opposite_orders_never_deadlock(pool, dsn):
    await register(pool, "k", lease="1 hour")
    beat, done = await db.connect(dsn), await db.connect(dsn)
    try:
        for _ in range(ROUNDS):
            jobs = await _running_jobs(pool, N)
            forward, backward = jobs, jobs[::-1]
            # Half a batch of heartbeats in each direction, overlapping the completions.
            hb = [forward[i::2] for i in range(2)]

            async def heartbeat(hb=hb, forward=forward, backward=backward):
                for part in (hb[0], hb[1][::-1], forward, backward):
                    await beat.fetchval("select jobfeed.extend_many($1, $2)",
                                        [i for i, _ in part], [g for _, g in part])

            async def complete(backward=backward):
                return await done.fetchval(
                    "select jobfeed.complete_many($1, $2, array_fill('{}'::jsonb, array[$3::int]))",
                    [i for i, _ in backward], [g for _, g in backward], N)

            try:
                _, completed = await asyncio.gather(heartbeat(), complete())
            except asyncpg.DeadlockDetectedError as exc:  # pragma: no cover - the bug this guards against
                raise AssertionError(f"deadlock between heartbeat and completions: {exc}") from None
            assert sorted(completed) == [i for i, _ in jobs], "a completion was not recorded"
        assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'completed'") == N * ROUNDS
        assert await pool.fetchval(f"select count(*) from {ATTEMPTS} a where outcome = 'completed'") == N * ROUNDS
    finally:
        await beat.close()
        await done.close()


# Each batch write, called with three running jobs; whether it answers their
# ids (completed) or none (no lease lost) once all three are written.
BATCH_WRITES = {
    "complete_many": ("select jobfeed.complete_many($1, $2, array_fill('{}'::jsonb, array[3]))", True),
    "extend_many": ("select jobfeed.extend_many($1, $2)", False),
}


@pytest.mark.parametrize("write", sorted(BATCH_WRITES))
async def test_a_batch_write_takes_its_rows_in_id_order_whatever_order_it_is_given(pool, dsn, write):
    # Parked on the middle job (another transaction holds its row), a batch
    # write given the jobs highest first holds the lowest and has not touched
    # the highest: its UPDATE's own plan orders the locks.
    sql, answers_ids = BATCH_WRITES[write]
    await register(pool, "k", lease="1 hour")
    low, mid, high = await _running_jobs(pool, 3)
    holder, writer, probe = await db.connect(dsn), await db.connect(dsn), await db.connect(dsn)
    try:
        held = holder.transaction()
        await held.start()
        await holder.execute("select from jobfeed.jobs where id = $1 for update", mid[0])
        given = [high, mid, low]
        writing = asyncio.create_task(writer.fetchval(sql, [i for i, _ in given], [g for _, g in given]))
        await session_waits(pool, f"the {write}", pid=writer.get_server_pid())

        async def locked(job_id) -> bool:
            try:
                await probe.execute("select from jobfeed.jobs where id = $1 for update nowait", job_id)
            except asyncpg.LockNotAvailableError:
                return True
            return False

        assert (await locked(low[0]), await locked(high[0])) == (True, False)
        await held.rollback()
        assert sorted(await writing) == ([low[0], mid[0], high[0]] if answers_ids else [])
    finally:
        for conn in (holder, writer, probe):
            await conn.close()


async def test_batch_submits_racing_over_the_same_targets_in_opposite_orders_never_deadlock(pool, dsn):
    await register(pool, "k", lease="1 hour")
    a, b = await db.connect(dsn), await db.connect(dsn)
    try:
        for round_ in range(ROUNDS):
            targets = [f"r{round_}-{i:04d}" for i in range(2000)]
            sql = "select id, created from jobfeed.submit_many('k', $1)"
            try:
                first, second = await asyncio.gather(a.fetch(sql, targets), b.fetch(sql, targets[::-1]))
            except asyncpg.DeadlockDetectedError as exc:  # pragma: no cover - the bug this guards against
                raise AssertionError(f"deadlock between two batch submits: {exc}") from None
            # one job per target, shared by both batches
            assert [r["id"] for r in first] == [r["id"] for r in second][::-1]
            assert sum(r["created"] for r in first) + sum(r["created"] for r in second) == len(targets)
    finally:
        await a.close()
        await b.close()
