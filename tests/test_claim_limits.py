"""A claim never hands out more jobs than asked, also when it reclaims expired
leases and takes due queued jobs in the same call."""

from __future__ import annotations

from queue_sql import M, T0, claim, register, submit


async def test_reclaimed_and_queued_jobs_together_stay_within_the_limit(pool):
    await register(pool, "k", lease="1 minute", backoff="{1 minute}")
    for target in ("dead-1", "dead-2"):
        await submit(pool, target, now=T0)
    dead = {r["id"] for r in await claim(pool, 2, T0)}  # their leases end at T0 + 1 minute
    fresh = [await submit(pool, f"fresh-{i}", now=T0 + i * M / 60) for i in range(3)]
    rows = await claim(pool, 3, T0 + 2 * M, worker="w2")
    assert len(rows) == 3
    ids = [r["id"] for r in rows]
    assert set(ids) >= dead  # the longest-waiting (expired) first, then the oldest due
    assert set(ids) - dead == {fresh[0]}
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'running'") == 3


async def test_a_limit_below_the_expired_leases_takes_only_that_many(pool):
    await register(pool, "k", lease="1 minute", backoff="{1 minute}")
    for i in range(4):
        await submit(pool, f"dead-{i}", now=T0)
    await claim(pool, 4, T0)
    await submit(pool, "fresh", now=T0)
    rows = await claim(pool, 2, T0 + 2 * M, worker="w2")
    assert len(rows) == 2 and all(r["generation"] == 2 for r in rows)
