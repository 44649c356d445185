"""What the public sees and hears: status masked through retries, a version that
moves only with the public view, progress that never goes backwards, and
NOTIFY sent once per statement, not per row."""

from __future__ import annotations

import re

import asyncpg
import pytest

from queue_sql import M, T0, Listen, claim, claim_one, fail_transient, job, public, register, submit
from jobfeed.worker.queue import QueueError


# ---------------------------------------------------------------- public view

async def test_public_status_is_masked_and_version_tracks_public_changes(pool, k):
    await register(pool, "k", max_attempts=5, backoff="{1 second}")
    jid = await submit(pool, "t")
    seen = [await public(pool, jid)]
    statuses = []

    async def step(expect_status):
        view = await public(pool, jid)
        prev = seen[-1]
        changed = {k: v for k, v in view.items() if k != "version"} != \
                  {k: v for k, v in prev.items() if k != "version"}
        # version moves exactly when the public view does, by one
        assert view["version"] == prev["version"] + (1 if changed else 0), (prev, view)
        assert view["status"] == expect_status
        seen.append(view)
        statuses.append(view["status"])

    assert seen[0]["status"] == "queued" and seen[0]["version"] == 1
    t = T0
    r = await claim_one(pool, now=t)
    await step("processing")
    await pool.fetchval("select jobfeed.progress($1, $2, 1, 4, 'one', $3)", jid, r["generation"], t)
    await step("processing")
    await fail_transient(pool, r, now=t)
    await step("processing")
    assert seen[-1]["error"] is None  # the error of an attempt that will be retried stays private
    t += M
    r = await claim_one(pool, now=t)
    await step("processing")
    await pool.fetchval("select jobfeed.release($1, $2, 'budget', '0', null, $3)", jid, r["generation"], t)
    await step("processing")
    r = await claim_one(pool, now=t)
    await step("processing")
    await pool.fetchval("select jobfeed.checkpoint($1, $2, '{\"page\": 2}')", jid, r["generation"])
    await step("processing")
    await pool.fetchval("select jobfeed.extend($1, $2, null, $3)", jid, r["generation"], t)
    await step("processing")
    await pool.fetchval("select jobfeed.complete($1, $2, '{\"ok\": true}', $3)", jid, r["generation"], t)
    await step("completed")
    assert seen[-1]["result"] == {"ok": True} and seen[-1]["finished_at"] is not None
    assert [v["version"] for v in seen] == [1, 2, 3, 3, 3, 3, 3, 3, 3, 4]


async def test_result_hidden_until_completed(pool, k):
    jid = await submit(pool, "t")
    await claim_one(pool)
    # A result planted on an unfinished job is not public.
    await pool.execute("update jobfeed.jobs set result = '{\"x\": 1}' where id = $1", jid)
    assert (await public(pool, jid))["result"] is None


async def test_progress_never_goes_backwards_in_public(pool, k):
    await register(pool, "k", backoff="{1 second}")
    jid = await submit(pool, "t")
    r = await claim_one(pool)

    async def report(done, total=5, msg=None, gen=None):
        return await pool.fetchval("select jobfeed.progress($1, $2, $3, $4, $5, $6)",
                                   jid, gen or r["generation"], done, total, msg, T0)

    assert await report(3) is True
    v = await public(pool, jid)
    assert v["progress"] == {"done": 3, "total": 5, "message": None}
    assert await report(2) is True  # accepted, not shown
    assert await public(pool, jid) == v
    assert await report(3) is True  # identical: no new version
    assert await public(pool, jid) == v
    assert await report(4, msg="four") is True
    v2 = await public(pool, jid)
    assert v2["progress"]["done"] == 4 and v2["version"] == v["version"] + 1
    # The retry starts over: its early reports stay hidden.
    await fail_transient(pool, r)
    r = await claim_one(pool, now=T0 + M)
    assert await report(1, msg="again") is True
    assert await public(pool, jid) == v2
    assert await report(5) is True
    assert (await public(pool, jid))["progress"]["done"] == 5
    with pytest.raises(asyncpg.PostgresError) as e:
        await report(-1)
    assert e.value.sqlstate == "JF422"


async def test_progress_without_a_total_never_goes_backwards_either(pool, k):
    """A handler that counts items without knowing how many: the count shown
    only grows, across a retry starting over too, also when the retry reports
    a total; a bar, once shown, a count cannot replace."""
    await register(pool, "k", backoff="{1 second}")
    jid = await submit(pool, "t")
    r = await claim_one(pool)

    async def report(done, total=None):
        assert await pool.fetchval("select jobfeed.progress($1, $2, $3, $4, null, $5)",
                                   jid, r["generation"], done, total, T0)
        return (await public(pool, jid))["progress"]

    assert await report(50) == {"done": 50, "total": None, "message": None}
    assert (await report(30))["done"] == 50  # a step back: accepted, not shown
    assert (await report(60))["done"] == 60
    await fail_transient(pool, r)
    r = await claim_one(pool, now=T0 + M)
    assert (await report(10))["done"] == 60  # the retry starting over stays hidden
    assert (await report(5, total=100))["done"] == 60  # with a total too: 60 were shown done
    assert await report(70, total=100) == {"done": 70, "total": 100, "message": None}
    assert (await report(80))["total"] == 100  # a count after a bar that moved: hidden
    assert (await report(75, total=100))["done"] == 75


async def test_progress_must_be_finite_and_not_negative(pool, queue, k):
    """A NaN or infinite report would be stored as the JSON string "NaN", rank above
    every number and freeze public progress for the rest of the job."""
    jid = await submit(pool, "t")
    r = await claim_one(pool)
    before = await job(pool, jid)
    for done, total in [(-1, 5), (1, -5), (float("nan"), 5), (1, float("nan")),
                        (float("inf"), 5), (1, float("inf")), (float("-inf"), None)]:
        with pytest.raises(QueueError) as e:
            await queue.progress(jid, r["generation"], done, total, None)
        assert (e.value.code, e.value.status) == ("invalid_progress", 422), (done, total)
        assert await job(pool, jid) == before, (done, total)


# ---------------------------------------------------------------- NOTIFY

async def test_submit_claim_complete_notify(pool, dsn, k):
    listen = await Listen.open(dsn)
    try:
        jid = await submit(pool, "t")
        heard = sorted(await listen.take())
        assert heard[0] == ("jobfeed_changed", f"{jid}:1")
        # jobfeed_due says how many jobs of which kind: 'count:offset:kind'
        assert heard[1][0] == "jobfeed_due" and re.fullmatch(r"1:\d+:k", heard[1][1]) and len(heard) == 2
        assert await submit(pool, "t") == jid
        assert await listen.take() == []  # a shared job changed nothing
        r = await claim_one(pool)
        assert await listen.take() == [("jobfeed_changed", f"{jid}:2")]
        await pool.fetchval("select jobfeed.complete($1, $2, null, $3)", jid, r["generation"], T0)
        assert await listen.take() == [("jobfeed_changed", f"{jid}:3")]
    finally:
        await listen.conn.close()


async def test_batch_claim_sends_few_notifications(pool, dsn, k):
    n = 400
    await pool.execute("insert into jobfeed.jobs (kind, target, run_after) "
                       "select 'k', 't' || g, $1 from generate_series(1, $2) g", T0, n)
    listen = await Listen.open(dsn)
    try:
        rows = await claim(pool, n)
        assert len(rows) == n
        got = await listen.take()
        assert {c for c, _ in got} == {"jobfeed_changed"}
        assert 1 <= len(got) <= 3, f"{len(got)} notifications for one claim"
        ids = {item.split(":")[0] for _, p in got for item in p.split(",")}
        assert ids == {str(r["id"]) for r in rows}
    finally:
        await listen.conn.close()
