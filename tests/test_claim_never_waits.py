"""A claimer never waits behind rows another session has locked (SKIP LOCKED):
it takes the next free job at once. The lock is held in an open transaction and
the claimer runs with a lock_timeout, so a claim that waits fails at once instead
of hanging, whatever the machine's load."""

from __future__ import annotations

import pytest

from queue_sql import M, T0, claim, register, submit
from jobfeed.worker import db


@pytest.fixture
async def k(pool):
    await register(pool, "k", lease="1 minute", backoff="{1 minute}")
    return "k"


@pytest.fixture
async def holder(dsn):
    """A session holding row locks in an open transaction."""
    conn = await db.connect(dsn)
    tx = conn.transaction()
    await tx.start()
    yield conn
    await tx.rollback()
    await conn.close()


@pytest.fixture
async def claimer(dsn):
    conn = await db.connect(dsn)
    await conn.execute("set lock_timeout = '200ms'")
    yield conn
    await conn.close()


async def claim_on(conn, limit, now):
    return await conn.fetch("select id from jobfeed.claim(array['k'], $1, 'w2', null, $2)", limit, now)


async def test_a_claim_skips_queued_jobs_locked_by_another_session(pool, k, holder, claimer):
    first = await submit(pool, "a", now=T0)
    second = await submit(pool, "b", now=T0 + 1 * M / 60)
    await holder.execute("select 1 from jobfeed.jobs where id = $1 for update", first)
    rows = await claim_on(claimer, 2, T0 + M)
    assert [r["id"] for r in rows] == [second]
    await holder.execute("rollback; begin")  # the lock gone, the skipped job is claimable
    assert [r["id"] for r in await claim_on(claimer, 2, T0 + M)] == [first]


async def test_a_claim_skips_expired_leases_locked_by_another_session(pool, k, holder, claimer):
    for target in ("a", "b"):
        await submit(pool, target, now=T0)
    stale = await claim(pool, 2, T0)  # both leases end at T0 + 1 minute
    locked, free = sorted(stale, key=lambda r: r["id"])
    # the dead worker's row is being touched by someone else (an admin, the sweeper)
    await holder.execute("select 1 from jobfeed.jobs where id = $1 for update", locked["id"])
    rows = await claim_on(claimer, 2, T0 + 2 * M)
    assert [r["id"] for r in rows] == [free["id"]]


async def test_a_claim_skips_exhausted_expired_jobs_locked_by_another_session(pool, claimer, holder):
    # Jobs past their last attempt are failed by the claim (lease_expired): a
    # locked one is left for later, the claim goes on.
    await register(pool, "k", max_attempts=1, lease="1 minute", backoff="{1 minute}")
    dead = await submit(pool, "dead", now=T0)
    await claim(pool, 1, T0)
    fresh = await submit(pool, "fresh", now=T0)
    await holder.execute("select 1 from jobfeed.jobs where id = $1 for update", dead)
    rows = await claim_on(claimer, 2, T0 + 2 * M)
    assert [r["id"] for r in rows] == [fresh]
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", dead) == "running"
