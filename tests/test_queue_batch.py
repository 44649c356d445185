"""submit_many: one statement for many jobs, deduplicated like submit, all or
nothing on bad input."""

from __future__ import annotations

import asyncio
import uuid

import asyncpg
import pytest

from jobfeed.worker import db
from jobfeed.worker.queue import QueueError

from queue_sql import value_and_count_around


async def test_submit_many_creates_in_order_and_dedupes(queue, pool, demo_kind):
    existing = (await queue.submit("demo", "old")).id
    answer = await queue.submit_many("demo", [("a", {"n": 1}), ("old", None), ("b", None), ("a", {"n": 2})])
    ids = [i for i, _ in answer]
    assert [c for _, c in answer] == [True, False, True, False]
    assert ids[1] == existing and ids[3] == ids[0] and len(set(ids)) == 3
    payloads = dict(await pool.fetch("select target, payload::text from jobfeed.jobs"))
    assert payloads == {"old": "{}", "a": '{"n": 1}', "b": "{}"}
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 3


async def test_submit_many_after_the_holder_finished_makes_a_new_job(queue, demo_kind):
    first = (await queue.submit("demo", "x")).id
    [job] = await queue.claim(["demo"], 1, "w")
    await queue.complete(job.id, job.generation, None)
    [(again, created)] = await queue.submit_many("demo", [("x", None)])
    assert created and again != first


@pytest.mark.parametrize("items, code", [
    ([("ok", None), ("", None)], "invalid_target"),
    ([("ok", None), ("x" * 513, None)], "invalid_target"),
    ([("ok", None), ("p", [1])], "invalid_payload"),
    ([("ok", None), ("p", {"pad": "x" * 70000})], "payload_too_large"),
])
async def test_one_bad_item_refuses_the_whole_batch(queue, pool, demo_kind, items, code):
    with pytest.raises(QueueError) as caught:
        await queue.submit_many("demo", items)
    assert caught.value.code == code
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


async def test_a_batch_with_several_bad_items_is_refused_naming_the_first(pool, demo_kind):
    # in SQL: the Python producer checks its items before sending them
    with pytest.raises(asyncpg.PostgresError) as caught:
        await pool.fetch("select * from jobfeed.submit_many_v2('demo', array['ok', '', 'p'],"
                         " array['{}', '{}', '[1]']::jsonb[])")
    assert (caught.value.hint, caught.value.message[:8]) == ("invalid_target", "item 2: "), caught.value
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


async def test_a_bad_concurrency_key_refuses_a_batch_and_a_request_batch(queue, pool, demo_kind):
    with pytest.raises(QueueError) as caught:
        await queue.submit_many("demo", [("a", None), ("b", None)], concurrency_key="")
    assert caught.value.code == "invalid_concurrency_key"
    with pytest.raises(QueueError) as caught:  # new targets: the API's one-statement path would take them
        await queue.submit_many_requests_json("demo", [("a", {}), ("b", {})], requesters=[None, None],
                                              notify_urls=[None, None], concurrency_key="x" * 513)
    assert caught.value.code == "invalid_concurrency_key"
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0
    assert await pool.fetchval("select count(*) from jobfeed.requests") == 0


async def test_unknown_kind(queue, pool):
    with pytest.raises(QueueError) as caught:
        await queue.submit_many("nope", [("a", None)])
    assert (caught.value.code, caught.value.status) == ("unknown_kind", 422)


async def test_concurrent_batches_over_the_same_targets_share_jobs(queue, pool, demo_kind):
    targets = [f"t{i}" for i in range(200)]
    answers = await asyncio.gather(*(queue.submit_many("demo", [(t, None) for t in targets]) for _ in range(8)))
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 200
    for n in range(200):
        assert len({a[n][0] for a in answers}) == 1
        assert sum(a[n][1] for a in answers) == 1


async def test_one_notification_per_chunk_not_per_job(queue, dsn, demo_kind):
    got: list[str] = []
    conn = await db.connect(dsn)
    await conn.add_listener("jobfeed_changed", lambda *a: got.append(a[3]))
    made = await queue.submit_many("demo", [(f"n{i}", None) for i in range(300)])
    await asyncio.sleep(0.2)
    await conn.close()
    assert len(got) == 2 and all(len(p) < 8000 for p in got)
    assert sorted(e for p in got for e in p.split(",")) == sorted(f"{i}:1" for i, _ in made)


async def test_a_target_taken_while_the_batch_inserts_is_shared(queue, pool, dsn, demo_kind):
    # The fast path's plain INSERT waits on the uncommitted holder of "b", then
    # trips the unique index when it commits: the batch falls back and shares.
    other = await db.connect(dsn)
    tx = other.transaction()
    await tx.start()
    [(held, _, _)] = await other.fetch("select id, created, view from jobfeed.submit('demo', 'b')")
    batch = asyncio.create_task(queue.submit_many("demo", [("a", None), ("b", None), ("c", None)]))
    await asyncio.sleep(0.3)
    assert not batch.done()  # waiting on the holder's row
    await tx.commit()
    await other.close()
    answer = await asyncio.wait_for(batch, 5)
    assert [c for _, c in answer] == [True, False, True]
    assert answer[1][0] == held
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 3


async def test_batch_ids_are_version_7_time_ordered_and_distinct(queue, demo_kind):
    first = await queue.submit_many("demo", [(f"a{i}", None) for i in range(500)])
    second = await queue.submit_many("demo", [(f"b{i}", None) for i in range(500)])
    ids = [i for i, _ in first + second]
    assert len(set(ids)) == 1000
    assert all(i.version == 7 and i.variant == uuid.RFC_4122 for i in ids)
    assert max(i for i, _ in first) < min(i for i, _ in second)
    single = (await queue.submit("demo", "c")).id
    assert single > max(ids)


async def test_a_resent_batch_shares_every_job_and_notifies_nothing(queue, pool, dsn, demo_kind):
    items = [(f"r{i}", {"i": i}) for i in range(50)] + [("r7", None)]
    first = await queue.submit_many("demo", items)
    got: list[str] = []
    conn = await db.connect(dsn)
    await conn.add_listener("jobfeed_changed", lambda *a: got.append(a[3]))
    again = await queue.submit_many("demo", items)
    await asyncio.sleep(0.2)
    await conn.close()
    assert [i for i, _ in again] == [i for i, _ in first] and not any(c for _, c in again)
    assert first[-1] == (first[7][0], False)  # the repeat within the first batch shared too
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 50 and got == []


async def test_a_resent_batch_tries_no_insert(queue, dsn, demo_kind):
    """A batch whose first target is held goes straight to finding its
    holders: no plain insert tried and rolled back (counted by the
    statistics of the caller's transaction, aborted attempts included)."""
    items = [(f"s{i}", {"i": i}) for i in range(20)]
    await queue.submit_many("demo", items)
    conn = await db.connect(dsn)
    try:
        shared, tried = await value_and_count_around(
            conn, "select count(*) from jobfeed.submit_many_v2('demo', array(select 's' || g from generate_series(0, 19) g))"
            " where not created", "select pg_stat_get_xact_tuples_inserted('jobfeed.jobs'::regclass)")
    finally:
        await conn.close()
    assert (shared, tried) == (20, 0)


async def test_null_or_empty_batches(pool, demo_kind):
    async with pool.acquire() as conn:
        await conn.execute("set statement_timeout = '5s'")
        with pytest.raises(Exception) as caught:
            await conn.fetch("select * from jobfeed.submit_many('demo', null)")
        assert "targets are required" in str(caught.value)
        assert await conn.fetch("select * from jobfeed.submit_many('demo', '{}')") == []
        await conn.execute("reset statement_timeout")


async def test_submitting_on_a_connection_joins_its_transaction(dsn, pool, demo_kind):
    """The outbox pattern: jobs submitted in the caller's transaction exist, and
    wake workers, only when it commits."""
    from queue_sql import Listen
    from jobfeed.worker.queue import Queue
    listen = await Listen.open(dsn)
    conn = await db.connect(dsn)
    queue = Queue(conn)
    try:
        async with conn.transaction():
            await queue.submit("demo", "kept")
            await queue.submit_many("demo", [("kept-2", None)])
            assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0
            assert await listen.take() == []
        assert await pool.fetchval("select count(*) from jobfeed.jobs") == 2
        # one notification for the statement, counting the jobs it made
        assert [p for ch, p in await listen.take() if ch == "jobfeed_due"][0].split(":")[::2] == ["1", "demo"]

        tx = conn.transaction()
        await tx.start()
        await queue.submit("demo", "dropped")
        await tx.rollback()
        assert await pool.fetchval("select target from jobfeed.jobs where target = 'dropped'") is None
        assert await listen.take() == []
    finally:
        await conn.close()
        await listen.conn.close()
