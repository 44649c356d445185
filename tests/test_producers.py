"""Producers first: a process that imports the task definitions (without running
them) can submit before any worker has started, and never overwrites the
settings a worker wrote."""

from __future__ import annotations

import pytest

from jobfeed import Queue, QueueError, task
from jobfeed.worker.settings import Settings


@task("producer_first", max_attempts=7, lease=42, backoff=(3,), description="defined, not run, here")
async def producer_first(job, ctx):
    raise AssertionError("a producer never runs handlers")


async def kind_row(pool, kind):
    return await pool.fetchrow("select max_attempts, extract(epoch from lease) as lease, description "
                               "from jobfeed.kinds where kind = $1", kind)


async def test_a_producer_submits_before_any_worker_registered_the_kind(pool):
    assert await kind_row(pool, "producer_first") is None
    job_id, created = await Queue(pool, settings=Settings()).submit("producer_first", "t1")
    assert created
    assert tuple(await kind_row(pool, "producer_first")) == (7, 42, "defined, not run, here")
    assert (await Queue(pool).get_job(job_id))["status"] == "queued"


async def test_a_producer_never_overwrites_what_a_worker_wrote(pool):
    worker = Queue(pool)
    await worker.register_kind("producer_first", max_attempts=2, lease=5, backoff=(1,), overwrite=True)
    producer = Queue(pool, settings=Settings())
    await producer.submit_many("producer_first", [("a", None), ("b", {})])
    assert tuple(await kind_row(pool, "producer_first")) == (2, 5, "")


async def test_a_producer_submits_inside_its_own_transaction(pool):
    async with pool.acquire() as conn:
        async with conn.transaction():
            await Queue(conn, settings=Settings()).submit("producer_first", "in-tx")
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'producer_first'") == 1


async def test_a_kind_nobody_defined_is_still_unknown(pool):
    with pytest.raises(QueueError) as caught:
        await Queue(pool, settings=Settings()).submit("defined_nowhere", "t")
    assert caught.value.code == "unknown_kind"
    assert await pool.fetchval("select count(*) from jobfeed.kinds") == 0
