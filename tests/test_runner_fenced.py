"""An attempt someone else ends (an admin's cancel, a replacing duplicate, the
last requester leaving) stops its handler at once, told by a notification,
not at the worker's next lease renewal: the heartbeat here waits for the
test's word and is never given it, so only the notification can stop them."""

from __future__ import annotations

import asyncio
import uuid

from jobfeed.worker.tasks import TaskSpec
from queue_sql import Listen
from waiting import eventually


def watched(entered: asyncio.Queue, stopped: asyncio.Queue):
    """A handler that runs until canceled, reporting (id, generation, payload)
    when it starts and (id, generation) when it is stopped."""
    async def handler(job, ctx):
        entered.put_nowait((job.id, job.generation, job.payload))
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            stopped.put_nowait((job.id, job.generation))
            raise
    return handler


async def start(run, lease: float = 60.0):
    entered: asyncio.Queue = asyncio.Queue()
    stopped: asyncio.Queue = asyncio.Queue()
    runner = await run(TaskSpec("k", watched(entered, stopped), max_attempts=3, lease=lease, backoff=(1.0,)),
                       heartbeat_by_hand=True)
    return runner, entered, stopped


async def test_an_admin_cancel_stops_the_running_handler_at_once(queue, run):
    _, entered, stopped = await start(run)
    job_id, _ = await queue.submit("k", "x")
    (started, generation, _) = await asyncio.wait_for(entered.get(), 5)
    assert started == job_id
    await queue.cancel(job_id)
    assert await asyncio.wait_for(stopped.get(), 5) == (job_id, generation)
    assert (await queue.admin_get_job(job_id))["state"] == "canceled"


async def test_the_last_requester_leaving_stops_the_running_handler(queue, run):
    _, entered, stopped = await start(run)
    sub = await queue.submit("k", "x", request=True)
    (_, generation, _) = await asyncio.wait_for(entered.get(), 5)
    await queue.leave(sub.request_id)
    assert await asyncio.wait_for(stopped.get(), 5) == (sub.id, generation)


async def test_a_replacing_duplicate_stops_the_old_attempt_and_not_the_new_one(queue, pool, run):
    _, entered, stopped = await start(run)
    await queue.set_kind_request_policy("k", on_duplicate="replace")
    sub = await queue.submit("k", "x", {"v": 1}, request=True)
    (_, first, payload) = await asyncio.wait_for(entered.get(), 5)
    assert payload == {"v": 1}
    await queue.submit("k", "x", {"v": 2}, request=True)
    assert await asyncio.wait_for(stopped.get(), 5) == (sub.id, first)
    # The same worker takes the job again, with the new payload.
    (again, second, payload) = await asyncio.wait_for(entered.get(), 5)
    assert (again, payload) == (sub.id, {"v": 2}) and second > first
    # The old attempt's notification, arriving late, names a generation this
    # run is not: it runs on. (Another job's cancel after it marks when it was read.)
    await pool.execute("select pg_notify('jobfeed_fenced', $1)", f"{sub.id}:{first}")
    other, _ = await queue.submit("k", "y")
    (started, generation, _) = await asyncio.wait_for(entered.get(), 5)
    assert started == other
    await queue.cancel(other)
    assert await asyncio.wait_for(stopped.get(), 5) == (other, generation)
    assert stopped.empty() and (await queue.admin_get_job(sub.id))["state"] == "running"


async def test_a_bulk_cancel_names_every_running_attempt_in_payloads_that_fit(queue, pool, dsn):
    """More running jobs than one NOTIFY payload holds (< 8000 bytes): every
    (id, generation) is named, in as many notifications as it takes."""
    await queue.register_kind("k", max_attempts=3, lease=60, backoff=(1,))
    await queue.submit_many("k", [(f"t{i}", None) for i in range(400)])
    claimed = await queue.claim(["k"], 400, "w")
    assert len(claimed) == 400
    listen = await Listen.open(dsn, channels=("jobfeed_fenced",))
    try:
        assert await queue.bulk("cancel", kind="k") == 400

        async def all_named():
            return sum(len(p.split(",")) for _, p in listen.got) >= 400
        await eventually(all_named, timeout=5, what="every running attempt named")
    finally:
        await listen.conn.close()
    payloads = [p for _, p in listen.got]
    named = {(uuid.UUID(i), int(g)) for p in payloads for i, g in (pair.split(":") for pair in p.split(","))}
    assert named == {(j.id, j.generation) for j in claimed}
    assert len(payloads) > 1 and all(len(p.encode()) < 8000 for p in payloads)


async def test_a_cancel_of_a_job_no_worker_runs_notifies_none(queue, dsn):
    await queue.register_kind("k", max_attempts=3, lease=60, backoff=(1,))
    queued, _ = await queue.submit("k", "queued")
    running, _ = await queue.submit("k", "running")
    listen = await Listen.open(dsn, channels=("jobfeed_fenced",))
    try:
        await queue.cancel(queued)
        [job] = await queue.claim(["k"], 1, "w")
        assert job.id == running
        await queue.cancel(running)  # notifications come in commit order: this one marks the end

        async def heard():
            return listen.got
        await eventually(heard, timeout=5, what="the running job's notification")
    finally:
        await listen.conn.close()
    assert [p for _, p in listen.got] == [f"{running}:{job.generation}"]
