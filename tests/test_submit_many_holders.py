"""submit_many (the path every POST /api/jobs takes, through the group commit)
finds the job holding a target within the batch's kind only, and never answers
a null id when the holder finishes between the batch's insert and its look-up."""

from __future__ import annotations

import asyncio

import pytest

from queue_sql import park_at, register, session_waits
from jobfeed.worker import db


@pytest.fixture
async def kinds(pool):
    for kind in ("a", "b"):
        await register(pool, kind, lease="1 hour")


async def submit_many(conn, kind, targets):
    return [(r["id"], r["created"])
            for r in await conn.fetch("select id, created from jobfeed.submit_many($1, $2) order by n", kind, targets)]


async def holder_of(pool, kind, target):
    return await pool.fetchval("select id from jobfeed.jobs where kind = $1 and target = $2 "
                               "and state in ('queued', 'running')", kind, target)


async def test_a_target_held_by_another_kind_gets_a_job_of_its_own(pool, kinds):
    [(other, _)] = await submit_many(pool, "a", ["x"])
    # every target held (by the other kind): the all-held shortcut must not share it
    [(mine, created)] = await submit_many(pool, "b", ["x"])
    assert created and mine != other
    assert await holder_of(pool, "b", "x") == mine


async def test_a_batch_whose_targets_are_held_by_one_kind_each_shares_only_its_own(pool, kinds):
    [(a_x, _)] = await submit_many(pool, "a", ["x"])
    [(b_y, _)] = await submit_many(pool, "b", ["y"])
    # every target is held by someone, but x not by kind b
    answer = await submit_many(pool, "b", ["x", "y"])
    assert answer[1] == (b_y, False)
    assert answer[0][1] and answer[0][0] != a_x
    assert await holder_of(pool, "b", "x") == answer[0][0]


async def test_a_batch_mixing_targets_held_by_both_kinds_shares_its_own_kinds_jobs(pool, kinds):
    [(a_x, _), (a_y, _)] = await submit_many(pool, "a", ["x", "y"])
    [(b_x, _)] = await submit_many(pool, "b", ["x"])
    answer = await submit_many(pool, "b", ["x", "y", "z", "x"])
    assert answer[0] == (b_x, False) and answer[3] == (b_x, False)
    assert answer[1][1] and answer[1][0] not in (a_x, a_y)
    assert answer[2][1]
    assert {await holder_of(pool, "a", t) for t in ("x", "y")} == {a_x, a_y}
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 5


async def test_views_of_a_batch_name_the_batchs_kind(pool, kinds):
    await submit_many(pool, "a", ["x"])
    rows = await pool.fetch("select created, view::text from jobfeed.submit_many_views('b', '{x}', null)")
    assert rows[0]["created"] and '"kind": "b"' in rows[0]["view"]


async def test_a_holder_finishing_between_insert_and_look_up_gets_a_live_job(pool, dsn, kinds):
    """Force the interleaving: the batch's plain insert waits for the holder of
    t (not yet committed) and trips the unique index when it commits; the
    batch's look finds t held and u free, so its insert with ON CONFLICT makes
    u only; the holder of t finishes before the batch looks up who holds t. A
    trigger parks the batch right after that insert, on an advisory lock the
    test holds, so the holder is completed exactly there."""
    await park_at(pool, "park after insert on jobfeed.jobs for each statement", 4242)
    gate = await db.connect(dsn)
    holder = await db.connect(dsn)
    batcher = await db.connect(dsn)
    try:
        await gate.execute("select pg_advisory_lock(4242)")
        tx = holder.transaction()
        await tx.start()
        old = await holder.fetchval("select id from jobfeed.submit('a', 't')")
        await batcher.execute("set test.park = 'on'")
        pid = batcher.get_server_pid()
        task = asyncio.create_task(submit_many(batcher, "a", ["t", "u"]))
        await session_waits(pool, "submit_many, for the uncommitted holder", pid=pid, column="wait_event",
                            value="transactionid")
        await tx.commit()
        await session_waits(pool, "submit_many, at the park", pid=pid, column="wait_event", value="advisory")
        r = (await pool.fetch("select * from jobfeed.claim(array['a'], 1, 'w')"))[0]
        assert await pool.fetchval("select jobfeed.complete($1, $2, null)", old, r["generation"]) is True
        await gate.execute("select pg_advisory_unlock(4242)")
        [(got, created), (_, made_u)] = await asyncio.wait_for(task, 10)
    finally:
        for conn in (batcher, holder, gate):
            await conn.close()
    assert got is not None and got != old and created is True and made_u is True
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", got) == "queued"
