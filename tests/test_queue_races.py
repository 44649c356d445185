"""Concurrency: many connections at once against the same rows. The database,
not luck, must keep dedupe, exclusive claims and fencing."""

from __future__ import annotations

import asyncio
import collections

import pytest

from queue_sql import ATTEMPTS, M, T0, register, session_waits
from jobfeed.worker import db
from jobfeed.worker.queue import Queue


@pytest.fixture
async def k(pool):
    # A long lease: in these tests nothing may expire on its own.
    await register(pool, "k", lease="1 hour", backoff="{1 minute}")
    return "k"


@pytest.fixture
async def conns(dsn):
    """16 separate connections (not a pool: each claimer is its own session)."""
    cs = await asyncio.gather(*(db.connect(dsn) for _ in range(16)))
    yield cs
    await asyncio.gather(*(c.close() for c in cs))


async def test_200_concurrent_submits_share_one_job(dsn, k):
    big = await db.create_pool(dsn, min_size=40, max_size=40)
    try:
        q = Queue(big)
        results = await asyncio.gather(*(q.submit("k", "same", {"n": i}) for i in range(200)))
        ids = {r.id for r in results}
        assert len(ids) == 1
        assert sum(r.created for r in results) == 1
        assert await big.fetchval("select count(*) from jobfeed.jobs") == 1
        assert await big.fetchval("select id from jobfeed.jobs") in ids
    finally:
        await big.close()


async def test_16_claimers_take_2000_jobs_exactly_once(pool, conns, k):
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k', 't' || g from generate_series(1, 2000) g")
    claimed: list[list] = [[] for _ in conns]

    async def claimer(i, conn):
        limit = 1 + i % 5  # mixed batch sizes
        while True:
            rows = await conn.fetch("select id, generation from jobfeed.claim(array['k'], $1, $2)", limit, f"w{i}")
            if not rows:
                return
            assert len(rows) <= limit
            claimed[i].extend(r["id"] for r in rows)
            # Finish them fenced: a job held by two claimers would fail here for one of them.
            done = await conn.fetchval("select jobfeed.complete_many($1, $2, array_fill(null::jsonb, array[$3::int]))",
                                       [r["id"] for r in rows], [r["generation"] for r in rows], len(rows))
            assert sorted(done) == sorted(r["id"] for r in rows)

    await asyncio.gather(*(claimer(i, c) for i, c in enumerate(conns)))
    everything = [j for c in claimed for j in c]
    assert len(everything) == 2000
    assert len(set(everything)) == 2000
    assert sum(1 for c in claimed if c) > 1, "the claims did not run concurrently"
    assert await pool.fetchval(f"select count(*) from {ATTEMPTS} a") == 2000
    assert await pool.fetchval(f"select count(*) from {ATTEMPTS} a where generation = 1 and outcome = 'completed'") == 2000
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'completed' and generation = 1") == 2000


async def test_submit_racing_the_job_finishing_gets_a_live_job(pool, dsn, k):
    """Force the interleaving: submit's look misses the holder (not yet
    committed), its insert then meets it (conflict), and the holder finishes
    before submit looks again. Submit must not return nothing."""
    # Pause submit right after an insert that inserted nothing (test-only trigger).
    await pool.execute("""
        create function public.pause_after_conflict() returns trigger language plpgsql as $$
        begin
            if current_setting('test.pause', true) = 'on' and not exists (select from inserted) then
                perform pg_sleep(0.5);
            end if;
            return null;
        end $$;
        create trigger pause after insert on jobfeed.jobs referencing new table as inserted
            for each statement execute function public.pause_after_conflict();
    """)
    holder = await db.connect(dsn)
    submitter = await db.connect(dsn)
    try:
        tx = holder.transaction()
        await tx.start()
        old = await holder.fetchval("select id from jobfeed.submit('k', 't')")
        await submitter.execute("set test.pause = 'on'")
        pid = submitter.get_server_pid()
        task = asyncio.create_task(submitter.fetchrow("select * from jobfeed.submit('k', 't')"))
        await session_waits(pool, "submit, for the uncommitted holder", pid=pid)
        await tx.commit()
        await session_waits(pool, "submit, at the pause", pid=pid, column="wait_event", value="PgSleep")
        r = (await pool.fetch("select * from jobfeed.claim(array['k'], 1, 'w')"))[0]
        assert await pool.fetchval("select jobfeed.complete($1, $2, null)", old, r["generation"]) is True
        got = await asyncio.wait_for(task, 5)
    finally:
        await submitter.close()
        await holder.close()
    assert got["id"] is not None and got["id"] != old and got["created"] is True
    assert await pool.fetchval("select state from jobfeed.jobs where id = $1", got["id"]) == "queued"


@pytest.mark.parametrize("submit_sql", ["select * from jobfeed.submit('k', $1)",
                                        "select * from jobfeed.submit_quick('k', $1, p_view => false)"])
async def test_submits_racing_completions_always_get_a_live_job(pool, conns, k, submit_sql):
    """The same race, left to the scheduler, over many targets at once (submit
    and its quick path, whose insert may meet the holder just as it finishes)."""
    n = 100
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k', 't' || g from generate_series(1, $1) g", n)
    held = await pool.fetch("select id, generation, target from jobfeed.claim(array['k'], $1, 'w')", n)
    assert len(held) == n

    async def complete(conn, rows):
        return [await conn.fetchval("select jobfeed.complete($1, $2, null)", r["id"], r["generation"])
                for r in rows]

    async def submit(conn, rows):
        return [await conn.fetchrow(submit_sql, r["target"]) for r in rows]

    # 8 sessions complete and 8 submit, each walking the same targets in the same order.
    chunks = [held[i::8] for i in range(8)]
    out = await asyncio.gather(*(complete(c, ch) for c, ch in zip(conns[:8], chunks)),
                               *(submit(c, ch) for c, ch in zip(conns[8:], chunks)))
    held = [r for ch in chunks for r in ch]
    dones = [d for res in out[:8] for d in res]
    gots = [g for res in out[8:] for g in res]
    for r, done, got in zip(held, dones, gots, strict=True):
        assert done is True
        assert got["id"] is not None
        # Either the caller shared the job while it was live, or it got a new one.
        assert (got["id"] == r["id"]) != got["created"]
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'queued'") == \
        sum(1 for g in gots if g["created"])


async def test_stale_workers_racing_a_reclaim(pool, conns, k):
    """300 jobs whose leases expired: their old workers try to complete them while 8
    claimers reclaim them. Each job ends up with exactly one owner's outcome."""
    n = 300
    await pool.execute("insert into jobfeed.jobs (kind, target, run_after) "
                       "select 'k', 't' || g, $1 from generate_series(1, $2) g", T0, n)
    stale = await pool.fetch("select id, generation from jobfeed.claim(array['k'], $1, 'old', '1 minute', $2)", n, T0)
    later = T0 + 2 * M
    reclaimed: list = []

    async def claimer(conn):
        while rows := await conn.fetch("select id, generation from jobfeed.claim(array['k'], 7, 'new', null, $1)",
                                       later):
            reclaimed.extend(rows)

    async def old_worker(conn, rows):
        out = {}
        for r in rows:
            out[r["id"]] = await conn.fetchval("select jobfeed.complete($1, $2, '\"stale\"')", r["id"], r["generation"])
        return out

    chunks = [stale[i::8] for i in range(8)]
    results = await asyncio.gather(*(claimer(c) for c in conns[:8]),
                                   *(old_worker(c, ch) for c, ch in zip(conns[8:], chunks)))
    completed_by_stale = {jid for res in results[8:] for jid, ok in res.items() if ok}
    reclaimed_ids = [r["id"] for r in reclaimed]
    assert len(reclaimed_ids) == len(set(reclaimed_ids)), "a job was reclaimed twice"
    assert completed_by_stale.isdisjoint(reclaimed_ids), "a job was both completed by its old worker and reclaimed"
    assert completed_by_stale | set(reclaimed_ids) == {r["id"] for r in stale}
    rows = {r["id"]: r for r in await pool.fetch("select * from jobfeed.jobs")}
    for jid in completed_by_stale:
        assert (rows[jid]["state"], rows[jid]["generation"]) == ("completed", 1)
    for r in reclaimed:
        assert r["generation"] == 2
        assert (rows[r["id"]]["state"], rows[r["id"]]["generation"]) == ("running", 2)
    outcomes = collections.Counter(
        (a["generation"], a["outcome"]) for a in await pool.fetch(f"select * from {ATTEMPTS} a"))
    # (the reclaimed jobs' second attempts are under way: logged when they end)
    assert outcomes == collections.Counter({(1, "completed"): len(completed_by_stale),
                                            (1, "lease_expired"): len(reclaimed_ids)}) - collections.Counter()
