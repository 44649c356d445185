"""Fencing by generation: once a job has moved on (reclaimed after an expired
lease, canceled, failed), every write of the worker that held it is refused
and changes nothing."""

from __future__ import annotations

import json

import pytest

from queue_sql import ATTEMPTS, M, S, T0, claim_one, register, submit


@pytest.fixture
async def k(pool):
    """Leases of one minute, so a minute and a bit later the job can be reclaimed."""
    await register(pool, "k", lease="1 minute", backoff="{1 minute}")
    return "k"


async def snapshot(pool):
    return (await pool.fetch("select * from jobfeed.jobs order by id"),
            await pool.fetch("select * from jobfeed.attempts order by job_id, generation"))


# Every write a worker can make, as (name, SQL) taking $1 id, $2 generation, $3 now.
# Each must answer False (or report the id lost) when the generation is stale.
# Parameters are typed once here, so every statement binds them alike.
STALE_WRITES = [
    ("complete", "select jobfeed.complete($1::uuid, $2::int, '{\"late\": true}', $3::timestamptz)"),
    ("fail_transient", "select jobfeed.fail_transient($1::uuid, $2::int, 'x', 'late', null, $3::timestamptz)"),
    ("fail_permanent", "select jobfeed.fail_permanent($1::uuid, $2::int, 'x', 'late', $3::timestamptz)"),
    ("release", "select jobfeed.release($1::uuid, $2::int, 'x', '0', 'late', $3::timestamptz)"),
    ("extend", "select jobfeed.extend($1::uuid, $2::int, '1 hour', $3::timestamptz)"),
    ("extend_many", "select cardinality(jobfeed.extend_many(array[$1::uuid], array[$2::int], null, $3::timestamptz)) = 0"),
    ("complete_many",
     "select cardinality(jobfeed.complete_many(array[$1::uuid], array[$2::int], array['{}'::jsonb], $3::timestamptz)) = 1"),
    ("progress", "select jobfeed.progress($1::uuid, $2::int, 9, 10, 'late', $3::timestamptz)"),
    ("checkpoint", "select jobfeed.checkpoint($1::uuid, $2::int, '{\"late\": true}') and $3::timestamptz is not null"),
]


async def assert_all_refused(pool, job_id, generation, now):
    before = await snapshot(pool)
    for name, sql in STALE_WRITES:
        assert await pool.fetchval(sql, job_id, generation, now) is False, name
        assert await snapshot(pool) == before, f"{name} changed something"


async def test_expired_lease_is_reclaimed_with_next_generation(pool, k):
    jid = await submit(pool)
    first = await claim_one(pool, T0, worker="w1")
    assert (first["generation"], first["lease_until"]) == (1, T0 + M)
    # The lease still runs: nobody else gets the job.
    assert await pool.fetch("select * from jobfeed.claim(array['k'], 5, 'w2', null, $1)", T0 + 59 * S) == []
    second = await claim_one(pool, T0 + 61 * S, worker="w2")
    assert (second["id"], second["generation"], second["attempts"]) == (jid, 2, 2)
    # the finished attempt is in the log table; the admin view adds the one under way
    [ended] = await pool.fetch(f"select * from {ATTEMPTS} a where job_id = $1", jid)
    assert (ended["generation"], ended["worker_id"], ended["outcome"], ended["finished_at"]) == \
        (1, "w1", "lease_expired", T0 + 61 * S)
    log = json.loads(await pool.fetchval("select jobfeed.admin_get_job($1)::text", jid))["attempts_log"]
    assert [(a["generation"], a["worker_id"], a["outcome"], a["finished_at"] is None) for a in log] == \
        [(1, "w1", "lease_expired", False), (2, "w2", None, True)]


async def test_stale_worker_is_refused_everything_after_reclaim(pool, k):
    jid = await submit(pool)
    stale = await claim_one(pool, T0, worker="w1")
    fresh = await claim_one(pool, T0 + 2 * M, worker="w2")
    await assert_all_refused(pool, jid, stale["generation"], T0 + 2 * M)
    # The new holder is unaffected.
    gen, later = fresh["generation"], T0 + 2 * M
    assert await pool.fetchval("select jobfeed.extend($1, $2, null, $3)", jid, gen, later) is True
    assert await pool.fetchval("select jobfeed.complete($1, $2, '1', $3)", jid, gen, later) is True
    # ...and once it has finished, its own generation is stale too.
    await assert_all_refused(pool, jid, fresh["generation"], T0 + 3 * M)


async def test_extend_many_reports_only_lost_ids(pool, k):
    a, b = await submit(pool, "a"), await submit(pool, "b")
    ra = await claim_one(pool, T0, worker="w1")
    rb = await claim_one(pool, T0 + 30 * S, worker="w1")  # leases end at T0+60s and T0+90s
    assert ra["id"] == a
    await claim_one(pool, T0 + 70 * S, worker="w2")       # a is reclaimed
    lost = await pool.fetchval("select jobfeed.extend_many($1::uuid[], $2::int[], null, $3::timestamptz)",
                               [a, b], [ra["generation"], rb["generation"]], T0 + 70 * S)
    assert lost == [a]
    row = await pool.fetchrow("select lease_until from jobfeed.jobs where id = $1", b)
    assert row["lease_until"] == T0 + 70 * S + M


async def test_a_heartbeat_with_no_lease_to_renew_by_reports_the_job_lost(pool, k):
    # A job of a kind with no row in kinds (written by SQL, never registered):
    # its claim gave it the default lease, and a heartbeat has no kind's lease
    # to renew it by. It reports the job lost and leaves the lease as it was,
    # to expire: never a running job with no lease, which nothing would reclaim.
    await pool.execute("insert into jobfeed.jobs (kind, target) values ('unregistered', 'x')")
    r = await claim_one(pool, T0, kinds=("unregistered",))
    lost = await pool.fetchval("select jobfeed.extend_many($1::uuid[], $2::int[], null, $3::timestamptz)",
                               [r["id"]], [r["generation"]], T0 + 30 * S)
    assert lost == [r["id"]]
    assert await pool.fetchval("select lease_until from jobfeed.jobs where id = $1", r["id"]) == r["lease_until"]


async def test_cancel_makes_the_running_worker_lose_its_lease(pool, queue, k):
    jid = await submit(pool)
    r = await claim_one(pool, T0, worker="w1")
    await queue.cancel(jid)
    assert await pool.fetchval("select jobfeed.extend($1::uuid, $2::int)", jid, r["generation"]) is False
    lost = await pool.fetchval("select jobfeed.extend_many(array[$1::uuid], array[$2::int])", jid, r["generation"])
    assert lost == [jid]
    await assert_all_refused(pool, jid, r["generation"], T0)
    row = await pool.fetchrow("select * from jobfeed.jobs where id = $1", jid)
    assert (row["state"], row["lease_until"]) == ("canceled", None)
    [a] = await pool.fetch(f"select * from {ATTEMPTS} a where job_id = $1", jid)
    assert a["outcome"] == "canceled"
    # A retry re-queues the job; the canceled run stays fenced out, before and after the next claim.
    await queue.retry(jid)
    await assert_all_refused(pool, jid, r["generation"], T0)
    await claim_one(pool, T0 + 10 * M, worker="w2")
    await assert_all_refused(pool, jid, r["generation"], T0 + 10 * M)


async def test_job_failed_for_expired_lease_refuses_its_worker(pool, k):
    await pool.execute("select jobfeed.register_kind('k', 1, '1 minute', '{1 minute}', 0, '')")
    jid = await submit(pool)
    r = await claim_one(pool, T0, worker="w1")
    assert await pool.fetchval("select jobfeed.sweep_expired($1)", T0 + 2 * M) == 1
    await assert_all_refused(pool, jid, r["generation"], T0 + 2 * M)
    assert await pool.fetchval("select state from jobfeed.jobs where id = $1", jid) == "failed"


async def test_wrong_generation_is_refused_even_while_running(pool, k):
    jid = await submit(pool)
    r = await claim_one(pool, T0, worker="w1")
    for wrong in (r["generation"] - 1, r["generation"] + 1):
        await assert_all_refused(pool, jid, wrong, T0)
