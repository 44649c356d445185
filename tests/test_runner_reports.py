"""What a handler writes while it runs, and what the runner makes of it:
progress reports (checked where made, coalesced, kept through a database blip
or a flush the database cannot take), checkpoints and job ids in them."""

from __future__ import annotations

import asyncio
import json
import uuid

import asyncpg
import pytest

from jobfeed.worker import redact
from jobfeed.worker.tasks import Context
from test_worker_runner import spec
from waiting import wait_state


async def test_a_database_blip_costs_a_reporting_handler_nothing(dsn, pool, queue):
    """The pool's connections die (a server restart) just before the handler
    reports progress, saves a checkpoint and names a child: each write is made
    again on a new connection, and the attempt goes on to complete."""
    from jobfeed.worker import db
    from jobfeed.worker.queue import Queue

    async def cut() -> None:
        await pool.fetchval("select count(pg_terminate_backend(pid)) from pg_stat_activity"
                            " where application_name = 'blip'")

    async def reporting(job, ctx: Context):
        await cut()
        await ctx.progress(1, 3, "first")
        await cut()
        await ctx.checkpoint({"step": 1})
        await cut()
        await ctx.submit("reporting", f"{job.target}-child")
        return {"checkpoint": job.checkpoint}

    blip = await db.create_pool(dsn, min_size=2, max_size=2, name="blip")
    try:
        job = await one_reporting_job(dsn, pool, queue, Queue(blip), reporting)
    finally:
        await blip.close()
    assert job["attempts"] == 1, "the blip cost the handler its attempt"
    assert json.loads(job["progress"])["message"] == "first"


async def one_reporting_job(dsn, pool, queue, worker_queue, handler):
    """One job of kind "reporting" run to completion by a runner on
    worker_queue (a pool the test cuts, or wraps): -> its row's attempts and
    progress."""
    from jobfeed.worker.runner import Runner

    await queue.register_kind("reporting", max_attempts=3, lease=5.0, backoff=(0.05,), jitter=0.0)
    runner = Runner(worker_queue, dsn, [spec("reporting", handler, lease=5.0)], poll_interval=0.2, grace=1.0)
    task = asyncio.create_task(runner.run())
    try:
        job_id = (await queue.submit("reporting", "x")).id
        await wait_state(pool, job_id, "completed", timeout=15)
        return await pool.fetchrow("select attempts, progress from jobfeed.jobs where id = $1", job_id)
    finally:
        runner.stop()
        await asyncio.wait_for(task, 10)


@pytest.mark.parametrize("away", [
    asyncpg.ConnectionDoesNotExistError("connection was closed in the middle of operation"),
    # new connections turned away for now (pg_hba.conf's reject): from a black-box pass
    asyncpg.InvalidAuthorizationSpecificationError('pg_hba.conf rejects connection for host "127.0.0.1"'),
])
async def test_a_flush_the_database_cannot_take_keeps_the_report_and_the_handler_runs_on(dsn, pool, queue, away):
    """ctx.flush() while the database is away (its first writes fail as a
    lost connection does, or as one turned away does): the report is kept and
    written later, as progress() keeps one; the handler is not failed for it,
    and its attempt completes with its last report written."""
    from jobfeed.worker import db
    from jobfeed.worker.queue import Queue

    flushed = asyncio.Event()

    async def reporting(job, ctx: Context):
        await ctx.progress(1, 2, "first")
        await ctx.progress(2, 2, "second")
        await ctx.flush()
        flushed.set()
        return {"ok": True}

    own = await db.create_pool(dsn, min_size=1, max_size=2)
    own_queue = Queue(own)
    real_progress, failures = own_queue.progress, [3]

    async def progress(*args):
        if failures[0]:
            failures[0] -= 1
            raise away
        return await real_progress(*args)

    own_queue.progress = progress  # type: ignore[method-assign]
    try:
        job = await one_reporting_job(dsn, pool, queue, own_queue, reporting)
    finally:
        await own.close()
    assert flushed.is_set()
    assert job["attempts"] == 1, "the flush cost the handler its attempt"
    assert json.loads(job["progress"])["message"] == "second"


async def test_job_ids_go_into_checkpoints_and_payloads_as_strings(queue, pool, run):
    """The ids jobfeed hands out (ctx.submit's, job.id) are uuid.UUID: a
    checkpoint or a child's payload holding them is written as a result is,
    each id as its string, not refused as a TypeError."""
    async def parent(job, ctx: Context):
        if job.payload.get("child"):
            return {"parent": job.payload["parent"]}
        child = await ctx.submit("ids", f"{job.target}-child", {"child": True, "parent": job.id})
        await ctx.checkpoint({"child": child, "ids": [child, job.id]})
        return {"child": child}

    await run(spec("ids", parent))
    job_id = (await queue.submit("ids", "x", {"about": uuid.UUID(int=7)})).id
    await wait_state(pool, job_id, "completed")
    row = await pool.fetchrow("select payload::text, checkpoint::text, result::text from jobfeed.jobs where id = $1",
                              job_id)
    child = json.loads(row["result"])["child"]
    assert json.loads(row["payload"]) == {"about": str(uuid.UUID(int=7))}
    assert json.loads(row["checkpoint"]) == {"child": child, "ids": [child, str(job_id)]}
    await wait_state(pool, uuid.UUID(child), "completed")
    assert json.loads(await pool.fetchval("select result::text from jobfeed.jobs where id = $1",
                                          uuid.UUID(child))) == {"parent": str(job_id)}


async def test_a_bad_progress_report_is_refused_where_it_is_made(queue, pool, run):
    """A report is coalesced and written later, where a database error reached
    nobody: its numbers and message are checked in the handler's call, and the
    message is stored as an error's is (cut, NUL and lone surrogates U+FFFD)."""
    bad = [("3", 10, "TypeError"), (1, "10", "TypeError"), (True, 10, "TypeError"), (None, 10, "TypeError"),
           (float("nan"), 1, "ValueError"), (1, float("inf"), "ValueError"), (-1, None, "ValueError"),
           (10 ** 400, None, "ValueError")]
    raised: list[str] = []

    async def handler(job, ctx: Context):
        for done, total, _ in bad:
            try:
                await ctx.progress(done, total)
            except (TypeError, ValueError) as exc:
                raised.append(type(exc).__name__)
        with pytest.raises(TypeError, match="a progress message is a string"):
            await ctx.progress(1, 2, 123)  # type: ignore[arg-type]
        await ctx.progress(1, 2, "a\x00b\ud800" + "m" * 5000)
        await ctx.flush()

    await run(spec("reporter", handler))
    job_id = (await queue.submit("reporter", "x")).id
    await wait_state(pool, job_id, "completed")
    assert raised == [error for _, _, error in bad]
    progress = json.loads(await pool.fetchval("select progress from jobfeed.jobs where id = $1", job_id))
    assert progress["message"] == "a\ufffdb\ufffd" + "m" * (redact.MAX_MESSAGE - 4)
    assert (progress["done"], progress["total"]) == (1, 2)
