"""A long history of finished jobs must not make claims dearer as jobs go by.
A claimed job's entry stays, dead, in the queue's partial indexes until VACUUM
removes it, ahead of every live entry, so each claim's pick steps over all
the jobs claimed since the last vacuum. The jobs table's autovacuum settings
(migration 0014) must clear them while the dead are a small part of a large
table: PostgreSQL's defaults wait for a fifth of the table, and then skip the
indexes when the dead sit on few of its pages."""

from __future__ import annotations

import asyncio
import re

import asyncpg
import pytest

from queue_sql import explained, register

HISTORY = 600_000  # finished jobs: the dead below sit on well under 2 % of the table's pages
CHURN = 4_000  # jobs submitted, claimed and completed: 8,000 dead rows, past the settings' ~6,200

PLANT = """
insert into jobfeed.jobs (id, kind, target, state, attempts, generation, run_after, created_at, updated_at,
                          finished_at)
select ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'k', 'h' || g, 'completed', 1, 1,
       now(), now(), now(), now()
  from generate_series(1, $1::int) g
"""
QUEUE = "insert into jobfeed.jobs (kind, target) select 'k', $1 || g from generate_series(1, $2::int) g"
_PICK = re.compile(r"Index Scan using jobs_queued_priority .*\n(?:(?!.*->).*\n)*?\s*Buffers: shared ([^\n]*)")


@pytest.fixture
async def autovacuum_every_second(pg_admin_url):
    """Autovacuum looks at each database every second (a minute by default)."""
    admin = await asyncpg.connect(pg_admin_url)
    try:
        yield lambda: _naptime(admin, "'1s'")
    finally:
        await _naptime(admin, "default")
        await admin.close()


async def _naptime(admin, value: str) -> None:
    await admin.execute(f"alter system set autovacuum_naptime = {value}")
    await admin.execute("select pg_reload_conf()")


async def _pick_pages(pool) -> int:
    """Pages the claim's pick read to find one live job behind the dead, seen
    by auto_explain inside claim_v3."""
    await pool.execute(QUEUE, "live", 1)
    async with pool.acquire() as conn:
        rows, plans = await explained(conn, "select * from jobfeed.claim_v3(array['k'], 1, 'w')",
                                      analyze=True, buffers=True)
    assert len(rows) == 1 and rows[0]["target"] == "live1", rows
    await pool.execute("update jobfeed.jobs set state = 'completed', finished_at = now() where target = 'live1'")
    found = _PICK.search(plans)
    assert found, plans
    return sum(int(n) for n in re.findall(r"=(\d+)", found.group(1)))


async def test_autovacuum_clears_the_claimed_jobs_from_the_claims_path(pool, queue, autovacuum_every_second):
    await register(pool, "k")
    # Autovacuum held off while the history is planted and the jobs go by, so
    # that it first runs on all of their dead rows.
    await pool.execute("alter table jobfeed.jobs set (autovacuum_enabled = off)")
    await pool.execute(PLANT, HISTORY)
    await pool.execute("vacuum analyze jobfeed.jobs")  # as a week of autovacuum has left a history
    await pool.execute(QUEUE, "c", CHURN)
    while jobs := await queue.claim(["k"], 500, "w"):
        assert await queue.complete_many([(j.id, j.generation, None) for j in jobs])
    piled = await _pick_pages(pool)
    assert piled > 20, piled  # the dead in the way: this test measures something

    done_at = await pool.fetchval("select now()")
    await pool.execute("alter table jobfeed.jobs reset (autovacuum_enabled)")
    await autovacuum_every_second()
    for _ in range(600):
        last = await pool.fetchval("select last_autovacuum from pg_stat_user_tables "
                                   "where relid = 'jobfeed.jobs'::regclass")
        if last is not None and last > done_at:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("autovacuum never vacuumed jobs: 8,000 dead rows are under its thresholds")
    assert await _pick_pages(pool) <= 4  # root, leaf, the job's heap page
