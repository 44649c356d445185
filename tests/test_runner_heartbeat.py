"""The runner's heartbeat, driven by hand through its test hooks (no lease is
waited out): it renews every running job's lease about three times per lease
it was granted, so one late or failed renewal never loses a job to a
reclaim, and it leaves alone the jobs whose handlers said to stop."""

from __future__ import annotations

import asyncio


from jobfeed.worker.tasks import TaskSpec


def blocking(entered: asyncio.Queue, go: asyncio.Event):
    async def handler(job, ctx):
        if job.payload.get("quiet"):
            ctx.heartbeat = False  # renews nothing (as the demo's "hang" does)
        entered.put_nowait(job.id)
        await go.wait()
        return "done"
    return handler


async def lease_left(pool, job_id) -> float:
    return await pool.fetchval("select extract(epoch from lease_until - now())::float8 from jobfeed.jobs "
                               "where id = $1", job_id)


async def test_leases_are_renewed_three_times_per_lease(queue, pool, run):
    entered, go = asyncio.Queue(), asyncio.Event()
    handler = blocking(entered, go)
    runner = await run(TaskSpec("k", handler, max_attempts=3, lease=9.0, backoff=(1.0,)), heartbeat_by_hand=True)
    job_id, _ = await queue.submit("k", "x")
    assert await asyncio.wait_for(entered.get(), 5) == job_id
    for _ in range(3):
        # The wait the heartbeat asks for: a third of the job's lease at most,
        # so a job is renewed ~3 times before its lease could run out.
        assert await runner.signals.heartbeat.asked() <= 9.0 / 3
        await pool.execute("update jobfeed.jobs set lease_until = now() + interval '1 second' where id = $1",
                           job_id)
        runner.signals.heartbeat.fire()
        renewed, lost = await runner.signals.renewed.wait()
        assert [key[0] for key in renewed] == [job_id] and not lost
        assert await lease_left(pool, job_id) > 8  # renewed by the lease its claim granted
    go.set()


async def test_a_job_whose_handler_stopped_heartbeating_is_not_renewed(queue, pool, run):
    entered, go = asyncio.Queue(), asyncio.Event()
    runner = await run(TaskSpec("k", blocking(entered, go), max_attempts=3, lease=60.0, backoff=(1.0,)),
                       heartbeat_by_hand=True)
    quiet, _ = await queue.submit("k", "quiet", {"quiet": True})
    loud, _ = await queue.submit("k", "loud")
    assert {await asyncio.wait_for(entered.get(), 5) for _ in range(2)} == {quiet, loud}
    await runner.signals.heartbeat.asked()
    runner.signals.heartbeat.fire()
    renewed, lost = await runner.signals.renewed.wait()
    assert [key[0] for key in renewed] == [loud] and not lost
    go.set()


async def test_the_heartbeat_keeps_pace_with_the_shortest_lease_held(queue, pool, run):
    entered, go = asyncio.Queue(), asyncio.Event()
    short = TaskSpec("short", blocking(entered, go), max_attempts=3, lease=6.0, backoff=(1.0,))
    long = TaskSpec("long", blocking(entered, go), max_attempts=3, lease=60.0, backoff=(1.0,))
    for s in (short, long):
        await queue.register_kind(s.kind, max_attempts=3, lease=s.lease, backoff=s.backoff)
    ids = {(await queue.submit(kind, "x")).id for kind in ("long", "short")}
    runner = await run(short, long, heartbeat_by_hand=True)  # one claim takes both: both start before the heartbeat looks
    assert {await asyncio.wait_for(entered.get(), 5) for _ in range(2)} == ids
    delay = await runner.signals.heartbeat.asked()
    if abs(delay - 1.0) < 0.01:  # (asked while nothing ran yet; the jobs' start wakes it to ask again)
        delay = await runner.signals.heartbeat.asked()
    assert delay <= 6.0 / 3  # the short lease's pace, not the long one's (20 s)
    go.set()
