"""A worker whose database host freezes and is replaced (a failover to a new
primary at the same address): its connections to the old host stay open and
carry nothing, as TCP keeps them for hours. Every query of the worker is
bounded (db.QUERY_TIMEOUT), so it drops them and goes on with new ones."""

from __future__ import annotations

import asyncio

from jobfeed import create_pool
from jobfeed.worker import db
from jobfeed.worker.queue import Queue
from jobfeed.worker.runner import Runner
from jobfeed.worker.tasks import TaskSpec
from relay import Relay


async def test_a_worker_goes_on_after_its_database_froze_and_failed_over(dsn, queue, monkeypatch):
    monkeypatch.setattr(db, "QUERY_TIMEOUT", 1.0)
    relay = Relay(dsn)
    await relay.open()
    started: asyncio.Queue[str] = asyncio.Queue()

    async def handler(job, ctx):
        started.put_nowait(job.target)
        return {}

    spec = TaskSpec("failover", handler, max_attempts=3, lease=30.0, backoff=(1.0,), jitter=0.0)
    await queue.register_kind("failover", max_attempts=3, lease=30.0, backoff=(1.0,), jitter=0.0)
    pool = await create_pool(relay.dsn, min_size=1, max_size=4, name="jobfeed-test-relayed", timeout=1.0)
    runner = Runner(Queue(pool), relay.dsn, [spec], poll_interval=0.2, grace=1.0, concurrency=2)
    task = asyncio.create_task(runner.run())
    try:
        await queue.submit("failover", "before")
        assert await asyncio.wait_for(started.get(), 10) == "before"
        relay.freeze()
        await asyncio.sleep(0.5)  # its claims (every poll_interval) now wait on the frozen host
        relay.failover()
        await queue.submit("failover", "after")  # straight to the database, not through the relay
        assert await asyncio.wait_for(started.get(), 20) == "after"
    finally:
        runner.stop()
        await asyncio.wait_for(task, 15)
        await relay.shut()
        pool.terminate()


async def test_a_listener_notices_a_frozen_host_within_one_health_interval(dsn):
    """It waited a whole interval idle, then a whole interval for its probe's
    answer: /api/live said true for up to two after a freeze."""
    relay = Relay(dsn)
    await relay.open()
    listener = db.Listener(relay.dsn, {"jobfeed_test": lambda channel, payload: None}, health_interval=2.0)
    await listener.start()
    try:
        relay.freeze()
        frozen = asyncio.get_running_loop().time()
        while listener.connected.is_set():
            await asyncio.sleep(0.05)
        assert asyncio.get_running_loop().time() - frozen < 3.0  # two intervals were 4 s
    finally:
        relay.failover()
        await asyncio.wait_for(listener.stop(), 10)
        await relay.shut()

