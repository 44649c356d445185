"""submit_many_requests, the API's group commit: every item is a request, and
the batch counts them on its jobs under their row locks. Batches joining the
same jobs in opposite orders never deadlock, and a batch whose job is
abandoned (canceled) before it counts its request gets a live job."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from jobfeed.worker import db
from jobfeed.worker.queue import Queue

from queue_sql import Listen, jobs_pages, pages_of, register, session_waits

ROUNDS = 5


@pytest.fixture
async def k(pool):
    await register(pool, "k", lease="1 hour")


async def requests_of(conn, targets: list[str], requester: str = "r") -> list[tuple]:
    """(job id, created, view, request id, reused) per target, in order."""
    return await Queue(conn).submit_many_requests_json(
        "k", [(t, {}) for t in targets], requesters=[requester] * len(targets), notify_urls=[None] * len(targets))


async def live_requests(pool, job_id) -> int:
    return await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1 and left_at is null", job_id)


async def test_a_batch_answers_each_item_its_job_with_the_requests_counted(pool, k):
    [(held, *_)] = await requests_of(pool, ["held"])
    answers = await requests_of(pool, ["new", "held", "new", "other"])
    ids = [a[0] for a in answers]
    assert ids[1] == held and ids[0] == ids[2] and len({ids[0], held, ids[3]}) == 3
    assert [a[1] for a in answers] == [True, False, False, True]
    views = [json.loads(a[2]) for a in answers]
    # each view is its job's after the whole batch counted: "new" has two requests
    assert [v["requesters"] for v in views] == [2, 2, 2, 1]
    assert [v["id"] for v in views] == [str(i) for i in ids]
    for job_id, count in ((held, 2), (ids[0], 2), (ids[3], 1)):
        assert await live_requests(pool, job_id) == count
        assert await pool.fetchval("select requesters from jobfeed.jobs where id = $1", job_id) == count
    assert len({a[3] for a in answers}) == 4  # a request of its own each


async def test_a_batch_of_new_targets_writes_what_any_batch_writes(pool, dsn, k):
    """New work, the common batch, goes in one statement: each job with its
    request counted (the hook's flag set where a notify_url came) and its
    request beside it, announced as changed at version 1 and due."""
    listen = await Listen.open(dsn)
    try:
        answers = await Queue(pool).submit_many_requests_json(
            "k", [("b", {"n": 1}), ("a", None)], requesters=["r1", None],
            notify_urls=[None, "https://hooks.example/done"])
        got = await listen.take()
    finally:
        await listen.conn.close()
    assert [(a[1], a[4]) for a in answers] == [(True, False), (True, False)]
    views = [json.loads(a[2]) for a in answers]
    assert [(v["target"], v["requesters"], v["status"]) for v in views] == [("b", 1, "queued"), ("a", 1, "queued")]
    jobs = {r["id"]: r for r in await pool.fetch("select id, target, payload::text, requesters, notify, version "
                                                   "from jobfeed.jobs")}
    assert [(jobs[a[0]]["target"], json.loads(jobs[a[0]]["payload"]), jobs[a[0]]["requesters"],
             jobs[a[0]]["notify"], jobs[a[0]]["version"]) for a in answers] == [
        ("b", {"n": 1}, 1, False, 1), ("a", {}, 1, True, 1)]
    requests = [dict(await pool.fetchrow("select job_id, requester, notify_url from jobfeed.requests where id = $1",
                                         a[3])) for a in answers]
    assert requests == [{"job_id": answers[0][0], "requester": "r1", "notify_url": None},
                        {"job_id": answers[1][0], "requester": None, "notify_url": "https://hooks.example/done"}]
    changed = {p for c, payload in got if c == "jobfeed_changed" for p in payload.split(",")}
    assert changed == {f"{a[0]}:1" for a in answers}
    due = [payload.split(":") for c, payload in got if c == "jobfeed_due"]
    assert [(d[0], d[2]) for d in due] == [("2", "k")]  # count:offset:kind


async def test_a_batch_joining_many_jobs_announces_every_ones_requesters(pool, dsn, k):
    """Joins change no job's version but its requesters: each joined job is
    announced as "id:version" marked 'r', 150 to a notification, every chunk
    sent (before PostgreSQL 18 the announcing function runs as PL/pgSQL)."""
    first = await requests_of(pool, [f"t{i}" for i in range(320)], requester="a")
    listen = await Listen.open(dsn, channels=("jobfeed_changed",))
    try:
        again = await requests_of(pool, [f"t{i}" for i in range(320)], requester="b")
        got = await listen.take()
    finally:
        await listen.conn.close()
    assert [a[0] for a in again] == [a[0] for a in first] and not any(a[1] for a in again)
    assert len(got) == 3 and all(len(payload.split(",")) <= 150 for _, payload in got)
    hints = sorted(h for _, payload in got for h in payload.split(","))
    assert hints == sorted(f"{a[0]}:1r" for a in first)


async def test_a_batch_whose_later_target_is_held_answers_as_ever(pool, k):
    """Distinct targets, the first free, one after it held: the one-statement
    write trips the unique index and leaves nothing; the batch is answered
    the general way (made, joined, made), one job per target."""
    [(held, *_)] = await requests_of(pool, ["m"])
    answers = await requests_of(pool, ["a", "m", "z"])
    assert [a[1] for a in answers] == [True, False, True] and answers[1][0] == held
    assert [json.loads(a[2])["requesters"] for a in answers] == [1, 2, 1]
    rows = await pool.fetch("select target, count(*) as n, sum(requesters) as r from jobfeed.jobs group by target")
    assert {r["target"]: (r["n"], r["r"]) for r in rows} == {"a": (1, 1), "m": (1, 2), "z": (1, 1)}
    assert await pool.fetchval("select count(*) from jobfeed.requests") == 4


async def test_batches_joining_the_same_jobs_in_opposite_orders_never_deadlock(pool, dsn, k):
    a, b = await db.connect(dsn), await db.connect(dsn)
    try:
        for round_ in range(ROUNDS):
            targets = [f"r{round_}-{i:03d}" for i in range(300)]
            made = await requests_of(pool, targets)  # held: both batches join, under row locks
            # and each joins jobs of its own too (batches of unlike sets)
            own_a = [f"a{round_}-{i}" for i in range(200)]
            own_b = [f"b{round_}-{i}" for i in range(7)]
            await requests_of(pool, own_a + own_b)
            try:
                first, second = await asyncio.gather(requests_of(a, targets + own_a),
                                                     requests_of(b, own_b + targets[::-1]))
            except asyncpg.DeadlockDetectedError as exc:  # pragma: no cover - the bug this guards against
                raise AssertionError(f"deadlock between two batches of requests: {exc}") from None
            first, second = first[:len(targets)], second[len(own_b):]
            assert [r[0] for r in first] == [r[0] for r in second][::-1] == [r[0] for r in made]
            counts = await pool.fetch("select requesters from jobfeed.jobs where id = any ($1::uuid[])",
                                      [r[0] for r in made])
            assert sorted(c["requesters"] for c in counts) == [3] * len(targets)
    finally:
        await a.close()
        await b.close()


async def test_batches_lock_the_jobs_they_join_in_one_order(pool, dsn, k):
    """Force the interleaving, with jobs j1 < j2 < j3 (by id): a transaction
    holds j3; batch A lists j1, j3, j2 and waits for j3; then batch B lists
    j2, j1 and waits too. Each batch locks its jobs in id order: A holds j1
    and j2, B waits for j1, and A's commit lets B go. Locking in list order,
    A would hold j1, B j2, and A would then want j2 and B j1: a deadlock."""
    made = [(await requests_of(pool, [t]))[0] for t in ("x", "y", "z")]
    j1, j2, j3 = sorted((r[0], t) for r, t in zip(made, ("x", "y", "z")))
    holder, a, b = await db.connect(dsn), await db.connect(dsn), await db.connect(dsn)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("select from jobfeed.jobs where id = $1 for update", j3[0])
        first = asyncio.create_task(requests_of(a, [j1[1], j3[1], j2[1]]))
        await session_waits(pool, "batch A", pid=a.get_server_pid())
        second = asyncio.create_task(requests_of(b, [j2[1], j1[1]]))
        await session_waits(pool, "batch B", pid=b.get_server_pid())
        await tx.commit()
        try:
            answers = await asyncio.wait_for(asyncio.gather(first, second), 10)
        except asyncpg.DeadlockDetectedError as exc:  # pragma: no cover - the bug this guards against
            raise AssertionError(f"deadlock between two batches of requests: {exc}") from None
    finally:
        for conn in (holder, a, b):
            await conn.close()
    assert [r[0] for r in answers[0]] == [j1[0], j3[0], j2[0]]
    assert [r[0] for r in answers[1]] == [j2[0], j1[0]]
    counts = await pool.fetch("select id, requesters from jobfeed.jobs order by id")
    assert [c["requesters"] for c in counts] == [3, 3, 2]


async def test_a_job_abandoned_before_the_batch_counts_its_request_is_not_joined(pool, dsn, k):
    """Force the interleaving: the batch finds "hot" held, then waits for the
    job's row lock, which another transaction holds while the job's only
    request leaves (abandoned: canceled). The batch must not count a request on
    the canceled job: it submits again and gets a live job for "hot"."""
    [(old, _, _, old_request, _)] = await requests_of(pool, ["hot"])
    locker, batcher = await db.connect(dsn), await db.connect(dsn)
    try:
        tx = locker.transaction()
        await tx.start()
        await locker.execute("select from jobfeed.jobs where id = $1 for update", old)
        task = asyncio.create_task(requests_of(batcher, ["cold", "hot"], requester="late"))
        await session_waits(pool, "the batch", pid=batcher.get_server_pid())
        await locker.execute("select jobfeed.leave($1)", old_request)
        await tx.commit()
        [(cold, cold_made, _, _, _), (hot, hot_made, view, request, _)] = await asyncio.wait_for(task, 10)
    finally:
        await locker.close()
        await batcher.close()
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", old) == "canceled"
    assert hot != old and hot_made is True and cold_made is True
    assert json.loads(view)["requesters"] == 1 and json.loads(view)["status"] == "queued"
    assert await pool.fetchval("select job_id from jobfeed.requests where id = $1", request) == hot
    assert await live_requests(pool, old) == 0


async def test_plans_made_on_an_empty_table_stay_index_probes_as_it_grows(pool, dsn, k):
    """A session's generic plans are made at its first call, here on an empty
    table, and kept while the table grows (no ANALYZE yet: a fresh install's
    first hours). Its calls must still probe indexes, not read every
    unfinished job (a plan for an empty table: scan it, hash join)."""
    conn = await db.connect(dsn)
    try:
        await requests_of(conn, ["first", "second"])  # plans made: the table is empty
        await requests_of(conn, ["first", "third"])  # and a join's
        await pool.execute("""insert into jobfeed.jobs (kind, target, payload, max_attempts)
                              select 'k', 'p' || g, '{}', 5 from generate_series(1, 60000) g""")
        call = ("select * from jobfeed.submit_many_requests('k', $1, array_fill('{}'::jsonb, array[9]), 65536, "
                "array_fill('r'::text, array[9]), array_fill(null::text, array[9]))")
        joining = await pages_of(conn, call, [f"p{i * 6000 + 1}" for i in range(9)])
        making = await pages_of(conn, call, [f"new{i}" for i in range(9)])
    finally:
        await conn.close()
    full = await jobs_pages(pool)
    assert joining < full / 4 and making < full / 4, (joining, making, full)
