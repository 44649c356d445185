"""The admin's bulk retry and cancel on a long history: each batch picks by
the filter given, under plans a session kept from a young table, and goes on
where the last ended, so a filter's batches read its jobs once in all, and a
kind's few jobs without walking every job."""

from __future__ import annotations

import pytest

from plan_reads import finished, planned_small_then_grown, rows_of
from queue_sql import ATTEMPTS, explained, register
from jobfeed.worker import db
from jobfeed.worker.sql import query


async def test_bulk_batches_pick_by_their_filter_after_the_table_grew_under_kept_plans(pool, dsn):
    # An admin session's bulk cancels and retries, planned on a young table:
    # the kept plan of a pick written for every filter read every finished
    # job at each batch once the history grew, whatever the filter named.
    await register(pool, "k")
    job: list = []
    calls = {"bulk_cancel": (query("bulk_cancel"), lambda: (None, None, None, job, None, 500)),
             "bulk_retry": (query("bulk_retry"), lambda: (None, None, None, job, None, 500))}

    def took(name: str, rows) -> None:
        assert (rows[0]["changed"], rows[0]["picked"]) == (1, 1), name

    async def one_job(target: str) -> None:
        job[:] = [await pool.fetchval("insert into jobfeed.jobs (kind, target) values ('k', $1) returning id", target)]

    async def grow() -> None:
        await finished(pool)
        await pool.execute("insert into jobfeed.jobs (kind, target) select 'k', 'q' || g from generate_series(1, 5000) g")

    await planned_small_then_grown(dsn, calls, took, one_job, grow)
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job[0]) == "queued"


async def _bulk_rows_read(dsn, action: str, state: str | None, code: str | None,
                          kind: str | None = None) -> tuple[int, int, float]:
    """A bulk action run to its end in batches of 100: (changed, batches, the
    rows its plans' nodes read in all)."""
    conn = await db.connect(dsn)
    try:
        after, batches, changed, read = None, 0, 0, 0.0
        while True:
            rows, plans = await explained(conn, f"select * from jobfeed.bulk_{action}($1, $2, $3, null, $4, 100)",
                                          state, kind, code, after, analyze=True)
            read += sum(sum(rows_of(line)) for line in plans.splitlines())
            batches, changed, after = batches + 1, changed + rows[0]["changed"], rows[0]["last_id"]
            if rows[0]["picked"] < 100:
                return changed, batches, read
    finally:
        await conn.close()


async def test_bulk_batches_go_on_where_the_last_ended(pool, dsn):
    # A pick that gathers every job the filter may match, sorts them and takes
    # a batch reads them all again at every batch; the planner took it for a
    # filter it thinks selective: an error code (only failed jobs carry one),
    # or a state on a history it thinks small. Walking the jobs in id order
    # from the last batch's end reads the history once in all.
    await register(pool, "k")
    await pool.execute(
        "insert into jobfeed.jobs (kind, target, state, generation, attempts, finished_at, last_error_code) "
        "select 'k', 'h' || g, s, 1, 1, case when s <> 'queued' then now() end, "
        "case when g % 50 = 0 then 'boom' end from generate_series(1, 30000) g, "
        "lateral (select (case when g % 50 = 0 then 'failed' when g % 7 = 0 then 'queued' else 'completed' end)"
        "::jobfeed.job_state as s) t")
    await pool.execute("analyze jobfeed.jobs")
    retried = await _bulk_rows_read(dsn, "retry", None, "boom")
    canceled = await _bulk_rows_read(dsn, "cancel", "queued", None)  # the 600 retried too
    assert retried[:2] == (600, 7) and canceled[:2] == (4800, 49)
    # rows read in all, each counted at every plan node: the retry's ~7,300 (its
    # failed jobs are a range of each kind's index; ~35,000 walking every job),
    # the cancel's ~63,000 (a seventh of the jobs are queued); over 150,000
    # each, sorting at every batch
    assert retried[2] <= 15000 and canceled[2] <= 110000, (retried, canceled)
    # a kind's few failed and canceled jobs in that history: two ranges of the
    # kind's index, not a walk through every job
    await pool.execute("insert into jobfeed.kinds (kind) values ('few')")
    await pool.execute("insert into jobfeed.jobs (kind, target, state, finished_at) select 'few', 'f' || g, "
                       "(case when g % 3 = 0 then 'canceled' else 'failed' end)::jobfeed.job_state, now() "
                       "from generate_series(1, 150) g")
    few = await _bulk_rows_read(dsn, "retry", None, None, kind="few")
    assert few[:2] == (150, 2) and few[2] <= 2500, few


async def test_a_bulk_cancel_reads_the_unfinished_jobs_not_the_history(pool, dsn):
    # A cancel walked every job in id order, finished ones included: the
    # whole history once per cancel. A kind's waiting and queued jobs are two
    # ranges of its index and its running ones a few; merged in id order, the
    # batches still go on where the last ended.
    await register(pool, "k")
    await pool.execute("insert into jobfeed.kinds (kind) values ('few')")
    await pool.execute("insert into jobfeed.jobs (kind, target, state, finished_at) select 'k', 'h' || g, "
                       "'completed', now() from generate_series(1, 30000) g")
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k', 'other' || g from generate_series(1, 50) g")
    # the three states interleaved in id order, so every batch takes from each
    await pool.execute(
        "insert into jobfeed.jobs (kind, target, state, generation, attempts, worker_id, claimed_at, lease_until) "
        "select 'few', 'f' || g, s, r, r, case when r = 1 then 'w' end, case when r = 1 then now() end, "
        "case when r = 1 then now() + interval '5 minutes' end from generate_series(1, 210) g, "
        "lateral (select (array['queued', 'running', 'waiting'])[g % 3 + 1]::jobfeed.job_state as s, "
        "(g % 3 = 1)::int as r) t")
    await pool.execute("analyze jobfeed.jobs")
    changed, batches, read = await _bulk_rows_read(dsn, "cancel", None, None, kind="few")
    assert (changed, batches) == (210, 3)
    assert read <= 8000, read  # each row counted at every node: ~3,200; over 30,000 walking every job
    left = await pool.fetch("select kind, state::text, count(*) from jobfeed.jobs where state <> 'completed' "
                            "group by 1, 2 order by 1, 2")
    assert [tuple(r) for r in left] == [("few", "canceled", 210), ("k", "queued", 50)]
    # each running job's attempt ended as canceled
    assert await pool.fetchval(f"select count(*) from {ATTEMPTS} a join jobfeed.jobs j on j.id = a.job_id "
                               "where j.kind = 'few' and a.outcome = 'canceled'") == 70
    # a state with the kind: only that state's jobs
    await pool.execute("update jobfeed.jobs set state = 'queued', finished_at = null where kind = 'few'")
    await pool.execute("update jobfeed.jobs set state = 'waiting' where kind = 'few' and target like '%0'")
    assert (await _bulk_rows_read(dsn, "cancel", "waiting", None, kind="few"))[:2] == (21, 1)
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'few' and state = 'queued'") == 189
    # a state without a kind: that state's jobs of every kind, each kind's a
    # range of its index (every kind found by one probe of it), not the history
    changed, batches, read = await _bulk_rows_read(dsn, "cancel", "queued", None)
    assert (changed, batches) == (239, 3)
    assert read <= 8000, read
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'queued'") == 0


async def test_a_bulk_cancel_over_many_kinds_reads_each_kinds_range_once(pool, dsn):
    # Each kind's queued jobs are a range in id order; a batch that took a
    # batch from every range before merging them read every kind's next
    # hundred at each batch: thirty times what it kept, over thirty kinds.
    kinds = [f"k{n:02}" for n in range(30)]
    for kind in kinds:
        await register(pool, kind)
    # interleaved in id order, so every batch takes from every kind
    await pool.execute("insert into jobfeed.jobs (kind, target) select ($1::text[])[g % 30 + 1], 't' || g "
                       "from generate_series(0, 2999) g", kinds)
    await pool.execute("analyze jobfeed.jobs")
    changed, batches, read = await _bulk_rows_read(dsn, "cancel", "queued", None)
    assert (changed, batches) == (3000, 31)
    # each job counted at every node: ~36,000-41,000; ~222,000 taking 100 from each kind per batch,
    # ~64,000 before 18 locking each batch through the queued jobs' index
    assert read <= 50000, read


async def _kinds_with_finished_jobs(pool, n: int) -> None:
    """Kinds k000, k001, ..., each with 20 completed jobs and nothing else."""
    kinds = [f"k{k:03}" for k in range(n)]
    await pool.execute("insert into jobfeed.kinds (kind) select unnest($1::text[])", kinds)
    await pool.execute("insert into jobfeed.jobs (kind, target, state, finished_at) select ($1::text[])[g % $2 + 1], "
                       "'h' || g, 'completed', now() from generate_series(0, $2 * 20 - 1) g", kinds, n)


@pytest.mark.pg18  # the kinds found by a skip scan
async def test_a_bulk_pick_looks_only_at_the_kinds_with_jobs_in_its_states(pool, dsn):
    # 18 finds the kinds with a job in the action's states in a scan that skips
    # the others; older servers look at every kind with a job not running (the
    # next test's ranges hold on both)
    await _kinds_with_finished_jobs(pool, 200)
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k010', 'a' || g from generate_series(1, 150) g")
    await pool.execute("analyze jobfeed.jobs")
    changed, batches, read = await _bulk_rows_read(dsn, "cancel", "queued", None)
    assert (changed, batches) == (150, 2)
    assert read <= 3000, read


async def test_a_bulk_pick_ranges_only_the_kinds_with_jobs_in_its_states(pool, dsn):
    # A range of the kind's index per kind and state, written for every kind
    # with a job that is not running (most kinds, finished jobs counting), cost
    # each batch its planning and a descent per kind: ~100 ms a batch over
    # 1,000 kinds. Only kinds with a job in the action's states get a range
    # now; a kind whose jobs the first batch canceled has none in the second.
    await _kinds_with_finished_jobs(pool, 200)
    # k010's queued jobs all before k020's in id order: the first batch cancels them all
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k010', 'a' || g from generate_series(1, 100) g")
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k020', 'b' || g from generate_series(1, 50) g")
    await pool.execute("analyze jobfeed.jobs")
    conn = await db.connect(dsn)
    try:
        ranges, after = [], None
        for _ in range(2):
            rows, plans = await explained(conn, "select * from jobfeed.bulk_cancel('queued', null, null, null, $1, 100)",
                                          after)
            after = rows[0]["last_id"]
            # a range's scan: "Index Cond: ((kind = 'k010'::text) AND (state = ...) ..."
            ranges.append(sum(1 for line in plans.splitlines() if "Index Cond: ((kind = '" in line))
            assert rows[0]["changed"] == (100, 50)[len(ranges) - 1], rows
    finally:
        await conn.close()
    assert ranges == [2, 1], ranges  # every kind's range: [200, 200]
