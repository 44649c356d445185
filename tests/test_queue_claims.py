"""claim_v2: free slots shared fairly among kinds, and the lease granted
returned with each job; claim (v0.1.0's) keeps its columns. The worker's claim
(claim_v3, through Queue.claim) answers as claim_v2 does, on the clock of the
database: one kind straight, but an expired lease of it still first."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from waiting import eventually
from queue_sql import (T0, register, value_and_count_around, value_and_index_entries_read,
                       value_and_index_entries_read_on)

CLAIM_10 = "select count(*) from jobfeed.claim_v3(array['k'], 10, 'w')"  # the worker's claim, counted


async def _backlog(pool, kind: str, n: int, run_after: dt.datetime | None = T0) -> None:
    """n queued jobs due at run_after (None: the database's now, for Queue.claim)."""
    await pool.execute("insert into jobfeed.jobs (kind, target, run_after) "
                       "select $1, 't' || g, coalesce($2, now()) from generate_series(1, $3) g", kind, run_after, n)


async def _claim_v2(pool, kinds, limit):
    return await pool.fetch("select * from jobfeed.claim_v2($1, $2, 'w', null, $3)", list(kinds), limit, T0)


async def test_a_backlog_in_the_first_kind_leaves_slots_to_the_others(pool):
    for kind in ("a", "b", "c"):
        await register(pool, kind)
    await _backlog(pool, "a", 100)
    await _backlog(pool, "b", 100)
    await _backlog(pool, "c", 2)
    rows = await _claim_v2(pool, ["a", "b", "c"], 10)
    got = sorted(r["kind"] for r in rows)
    # c has only 2; the slots it leaves go to the kinds that had more
    assert got.count("c") == 2 and got.count("a") + got.count("b") == 8
    assert abs(got.count("a") - got.count("b")) <= 1
    # one slot: the kind named first gets it, so rotating the array takes turns
    assert [r["kind"] for r in await _claim_v2(pool, ["b", "a"], 1)] == ["b"]
    assert [r["kind"] for r in await _claim_v2(pool, ["a", "b"], 1)] == ["a"]
    # a kind named twice counts once, and the limit holds
    assert len(await _claim_v2(pool, ["a", "a", "b"], 7)) == 7


async def test_claim_returns_the_lease_it_granted_and_claim_v1_keeps_its_columns(pool):
    await register(pool, "k", lease="42 seconds")
    await _backlog(pool, "k", 3)
    row = (await _claim_v2(pool, ["k"], 1))[0]
    assert row["lease"] == dt.timedelta(seconds=42)
    assert row["lease_until"] == T0 + dt.timedelta(seconds=42)
    given = (await pool.fetch("select * from jobfeed.claim_v2(array['k'], 1, 'w', '7 seconds', $1)", T0))[0]
    assert given["lease"] == dt.timedelta(seconds=7)
    old = await pool.fetch("select * from jobfeed.claim(array['k'], 5, 'w', null, $1)", T0)
    assert len(old) == 1 and list(old[0].keys()) == [
        "id", "kind", "target", "payload", "attempts", "max_attempts", "generation", "lease_until", "checkpoint"]


async def test_the_workers_claim_shares_slots_among_kinds(pool, queue):
    for kind in ("a", "b", "c"):
        await register(pool, kind)
        await _backlog(pool, kind, 100 if kind != "c" else 2, run_after=None)
    got = sorted(j.kind for j in await queue.claim(["a", "b", "c"], 10, "w"))
    assert got.count("c") == 2 and got.count("a") + got.count("b") == 8
    assert abs(got.count("a") - got.count("b")) <= 1
    assert await queue.claim(["a"], 0, "w") == []


@pytest.mark.parametrize("limited", [False, True])
async def test_the_workers_claim_of_one_kind_reclaims_expired_leases_first(pool, queue, limited):
    await register(pool, "k", max_attempts=2)
    if limited:  # the claim of a kind with limits reclaims on its own path
        await pool.execute("update jobfeed.kinds set max_running = 10 where kind = 'k'")
    await _backlog(pool, "k", 4, run_after=None)
    lost, spent = await queue.claim(["k"], 2, "w1")
    # both leases ended a second ago; `spent` has no attempt left
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 second' where id = any ($1)",
                       [lost.id, spent.id])
    await pool.execute("update jobfeed.jobs set max_attempts = 1 where id = $1", spent.id)
    ended = await pool.fetchval("select lease_until from jobfeed.jobs where id = $1", lost.id)
    claimed, times = await queue.claim_timed(["k"], 2, "w2")
    jobs = {j.id: j for j in claimed}
    assert len(jobs) == 2 and jobs[lost.id].attempt == 2 and spent.id not in jobs
    # due again when its lease ran out: the wait the dashboard's chart shows counts from there
    # (it counted from the job's first due time, the dead attempt's whole lease included)
    assert await pool.fetchval("select run_after from jobfeed.jobs where id = $1", lost.id) == ended
    assert 0.9 < next(t.wait for t in times if t.id == lost.id) < 5  # the worker's histogram: from there too
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", spent.id) == "failed"
    view = await queue.admin_get_job(lost.id)
    assert [a["outcome"] for a in view["attempts_log"]] == ["lease_expired", None]  # and the one running
    # the admin list's "last error" agrees with the log (before: the error of an earlier attempt, or none)
    assert view["last_error"] == {"code": "lease_expired", "message": "the worker stopped renewing its lease"}


@pytest.mark.parametrize("path", ["one kind", "a kind with limits", "two kinds"])
async def test_the_workers_claim_says_how_long_each_job_waited_and_who_submitted_it(pool, queue, path):
    """On each of the claim's paths: one kind straight (claim_kind_v2's own
    rows), a kind with limits (claim_limited_v2's) and several kinds
    (claim_v2's, read again by key)."""
    await register(pool, "k")
    kinds = ["k"]
    if path == "a kind with limits":
        await pool.execute("update jobfeed.kinds set max_running = 10 where kind = 'k'")
    elif path == "two kinds":
        await register(pool, "other")
        kinds.append("other")
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    job_id = await pool.fetchval(
        "insert into jobfeed.jobs (kind, target, created_at, run_after, traceparent) "
        "values ('k', 't', now() - interval '60 seconds', now() - interval '20 seconds', $1) returning id", parent)
    [job], [(timed_id, kind, generation, wait, age, traceparent)] = await queue.claim_timed(kinds, 5, "w")
    assert job.id == timed_id == job_id and kind == "k" and generation == 1 and traceparent == parent
    assert 20 <= wait < 25 and 60 <= age < 65  # seconds, by the database's clock
    # its worker died; the lease ran out 3 s ago: due again since then, not since its run_after
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '3 seconds' where id = $1", job_id)
    [again], [(_, _, generation, wait, age, _)] = await queue.claim_timed(kinds, 5, "w")
    assert again.id == job_id and again.generation == generation == 2
    assert 3 <= wait < 8 and 60 <= age < 65


async def claimer_start(pool) -> dt.datetime:
    """The waiting claim's transaction start, less a second."""
    return await pool.fetchval("select xact_start - interval '1 second' from pg_stat_activity "
                               "where query like '%claim_v3%' and pid <> pg_backend_pid()")


async def test_a_job_submitted_while_a_claim_waits_for_its_turn_has_its_times(pool):
    """Several kinds: claim_v3's statement began before the job was there
    (here it waits for a capped kind's turn, held by another claimer), and
    what the claim took it read again from that statement's snapshot, which
    has no such job: its wait and age came back null, and the worker's wait
    histogram skipped it (the jobs claimed soonest after their submission)."""
    await register(pool, "k")
    await register(pool, "capped")
    await pool.execute("update jobfeed.kinds set max_running = 10 where kind = 'capped'")
    async with pool.acquire() as holder, pool.acquire() as claimer:
        turn = holder.transaction()
        await turn.start()
        await holder.execute("select jobfeed.limits_lock('capped')")
        claim = asyncio.create_task(claimer.fetch("select id, wait, age from jobfeed.claim_v3($1, 5, 'w')",
                                                  ["capped", "k"]))
        await eventually(lambda: pool.fetchval("select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
                                               "and query like '%claim_v3%' and pid <> pg_backend_pid()"),
                         what="the claim waiting for the capped kind's turn")
        # committed after the claim's statement began, by a submission that began before it
        # (so due by the claim's clock, which is its transaction's start)
        job_id = await pool.fetchval("insert into jobfeed.jobs (kind, target, created_at, run_after) "
                                     "values ('k', 'late', $1, $1) returning id", await claimer_start(pool))
        await turn.rollback()
        [(claimed, wait, age)] = await claim
    assert claimed == job_id and wait is not None and age is not None and 0 <= wait < 5 and 0 <= age < 5


async def test_the_workers_claim_waits_for_the_flush(pool):
    """A claim a database crash lost was made again under the same generation,
    with the first run still going and nothing to fence it out (a black-box
    pass: its outcome taken for the second run's, a job seen processing shown
    queued again). It no longer turns synchronous_commit off: its commit
    waits for the flush as every other write's does."""
    await register(pool, "again", max_attempts=3)
    await register(pool, "once", max_attempts=1)
    for kind, n in (("again", 2), ("once", 2)):
        await _backlog(pool, kind, n, run_after=None)
    await pool.execute("update jobfeed.jobs j set max_attempts = k.max_attempts from jobfeed.kinds k where k.kind = j.kind")
    claim = "select id from jobfeed.claim_v3($1, $2, 'w')"
    async with pool.acquire() as conn:
        await conn.execute("set synchronous_commit = on")  # the test server's default is off
        try:
            for kinds, limit in ((["again"], 1), (["once"], 1), (["again", "once"], 2), (["nothing"], 1)):
                async with conn.transaction():
                    claimed = await conn.fetch(claim, kinds, limit)
                    assert len(claimed) == (0 if kinds == ["nothing"] else limit)
                    assert await conn.fetchval("show synchronous_commit") == "on", kinds
        finally:
            await conn.execute("reset synchronous_commit")


@pytest.mark.parametrize("limit", [None, "max_running_per_key"])
async def test_a_claim_reads_a_young_tables_backlog_in_order_and_stops(pool, limit):
    """A table not yet analyzed estimates a row or two for any scan, and with a
    backlog of this size a plan read every queued job of the kind through
    jobs_queued_due and sorted them to keep the first few: each claim's cost
    grew with the backlog. The claim reads jobs_queued_priority in its order
    and stops at its limit, with or without a per-key cap (whose pick scans a
    few candidates more)."""
    await register(pool, "k")
    if limit:
        await pool.execute(f"update jobfeed.kinds set {limit} = 1 where kind = 'k'")
    await pool.execute("insert into jobfeed.jobs (kind, target, run_after, concurrency_key) "
                       "select 'k', 't' || g, now() - interval '1 second', 'key' || g "
                       "from generate_series(1, 60000) g")
    claimed, read = await value_and_index_entries_read(pool, CLAIM_10)
    assert claimed == 10
    assert read < 1000, f"the claim read {read} index entries for 10 jobs"


async def test_a_claim_planned_on_an_empty_table_looks_for_expired_leases_by_index(pool):
    """The worker's claim keeps one generic plan per session, made at its
    first claim: usually as the worker starts, with no job of its kind yet.
    That plan's look for expired leases went through the index of unfinished
    jobs by kind and read every queued and running job of the kind at each
    claim, a cost that grew with the backlog; it reads expired leases only."""
    await register(pool, "k")
    async with pool.acquire() as conn:
        assert await conn.fetchval(CLAIM_10) == 0
        await _backlog(pool, "k", 5000, run_after=None)
        for running in (0, 10):  # the second with the first's jobs running
            claimed, read = await value_and_index_entries_read_on(conn, CLAIM_10)
            assert claimed == 10
            assert read < 100, f"a claim of 10 with {running} running read {read} index entries"


async def test_a_workers_kept_claim_plan_reads_a_claimed_jobs_children_by_key(pool):
    """A claimed job whose wait_for waited gets its children's views
    (children_of), under a plan kept from the worker's first such claim. Made
    on a small table, it hashed every job to find the children at each claim
    once the history grew; it probes each child by key."""
    await register(pool, "k")

    async def parent(target: str) -> None:
        """A queued job whose wait_for waited for one child, completed."""
        job = await pool.fetchval("insert into jobfeed.jobs (kind, target) values ('k', $1) returning id", target)
        child = await pool.fetchval("insert into jobfeed.jobs (kind, target, state, finished_at) "
                                    "values ('k', $1, 'completed', now()) returning id", target + "-child")
        await pool.execute("insert into jobfeed.job_deps (job_id, dep_id, wait_pos) values ($1, $2, 1)", job, child)

    async with pool.acquire() as conn:
        for i in range(3):
            await parent(f"early{i}")
            assert await conn.fetchval(CLAIM_10) == 1
        await pool.execute("insert into jobfeed.jobs (kind, target, state, finished_at) "
                           "select 'k', 'done' || g, 'completed', now() from generate_series(1, 5000) g")
        await parent("late")
        claimed, read = await value_and_index_entries_read_on(conn, CLAIM_10)
    assert claimed == 1
    assert read < 100, f"a claim of a job with one child read {read} index entries"


async def test_a_workers_kept_claim_plan_probes_dependencies_by_key_as_they_grow(pool):
    """The worker's claim keeps one generic plan per session, made at its first
    claim. Made while job_deps was empty, its look for claimed jobs that wait
    on others could read the whole table at every claim once workflows had
    filled it; it probes by key instead."""
    await register(pool, "k")
    await _backlog(pool, "k", 100, run_after=None)
    async with pool.acquire() as conn:
        assert await conn.fetchval(CLAIM_10) == 10
        await conn.execute("insert into jobfeed.jobs (kind, target, state) "
                           "select 'w', 'p' || g, 'waiting' from generate_series(1, 2000) g")
        await conn.execute("insert into jobfeed.job_deps (job_id, dep_id, wait_pos) select j.id, gen_random_uuid(), 1 "
                           "from jobfeed.jobs j, generate_series(1, 10) where j.kind = 'w'")
        claimed, read = await value_and_count_around(
            conn, CLAIM_10, "select pg_stat_get_xact_tuples_returned('jobfeed.job_deps'::regclass)")
    assert claimed == 10
    assert read < 100, f"the claim read {read} rows of job_deps"
