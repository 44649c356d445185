"""The history scenario's probes (bench/history.py) are polled while a worker
drains: each must read the jobs it counts, not the history beside them. One
that scanned the jobs table cost a few milliseconds on the empty side and a
parallel scan of 10,000,000 rows on the history's, taking the drain's cores
on one side only: the scenario measured its own probe."""

from __future__ import annotations

import sys
from pathlib import Path

from queue_sql import jobs_pages, pages_of, register

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import history  # noqa: E402

HISTORY = 50_000
DRAIN = 400


async def test_the_history_scenarios_probes_read_this_runs_jobs_not_the_history(pool, queue):
    await register(pool, "noop")
    await pool.execute(history.PLANT, HISTORY, HISTORY // 10)
    await pool.execute("vacuum analyze jobfeed.jobs")
    since = await pool.fetchval(history.NOW_SQL)
    await queue.submit_many("noop", [(f"t{i}", None) for i in range(DRAIN)])
    jobs = await queue.claim(["noop"], DRAIN // 2, "w")
    assert len(await queue.complete_many([(j.id, j.generation, None) for j in jobs])) == DRAIN // 2
    last = await pool.fetchval("select extract(epoch from max(finished_at))::float8 from jobfeed.jobs "
                               "where target like 't%'")
    pages = await jobs_pages(pool)
    assert pages > 1_000, pages  # the history: what a scan would read
    probes = {history.OPEN_SQL: DRAIN // 2, "select count(*) " + history.DONE_SINCE.format(since): DRAIN // 2,
              history.LAST_DONE_SQL.format(since): last}
    async with pool.acquire() as conn:
        for sql, expected in probes.items():
            assert await conn.fetchval(sql) == expected, sql
            assert await pages_of(conn, sql) < 60, sql
