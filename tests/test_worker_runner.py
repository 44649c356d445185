"""The runner in-process with handlers of the test's own: lease loss cancels the
handler and drops its outcome, checkpoints reach the next attempt, exceptions
map to outcomes."""

from __future__ import annotations

import asyncio
import json
import uuid


from jobfeed.worker import metrics, redact
from jobfeed.worker.tasks import Context, LeaseLost, Permanent, Release, TaskSpec, Transient
from waiting import eventually, wait_state


def spec(kind: str, handler, lease: float = 1.0) -> TaskSpec:
    return TaskSpec(kind, handler, max_attempts=3, lease=lease, backoff=(0.05,), jitter=0.0)


async def test_lost_lease_cancels_the_handler_and_drops_its_outcome(queue, pool, run):
    entered, cancelled = asyncio.Event(), asyncio.Event()

    async def slow(job, ctx: Context):
        entered.set()
        try:
            await asyncio.Event().wait()  # until cancelled
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return {"never": True}

    runner = await run(spec("slow", slow, lease=60), heartbeat_by_hand=True)
    job_id = (await queue.submit("slow", "x")).id
    await asyncio.wait_for(entered.wait(), 5)
    # As if the lease had run out and another worker had taken the job: no
    # notification (a cancel's would stop the handler before any heartbeat).
    await pool.execute("update jobfeed.jobs set generation = generation + 1 where id = $1", job_id)
    await runner.signals.heartbeat.asked()
    runner.signals.heartbeat.fire()  # the next heartbeat finds the lease lost
    renewed, lost = await runner.signals.renewed.wait()
    assert lost == {job_id}
    await asyncio.wait_for(cancelled.wait(), 5)

    async def idle():
        return runner.running_count == 0
    await eventually(idle, what="the lost run to end")
    view = await queue.admin_get_job(job_id)
    assert (view["state"], view["result"], view["generation"]) == ("running", None, 2)  # nothing of it written


async def test_results_are_stored_as_the_handler_returned_them(queue, pool, run):
    """None (most handlers) is stored as JSON null, not as an empty object."""
    results = {"none": None, "dict": {"n": 1}, "list": [1, "a"], "text": "done"}

    async def answer(job, ctx: Context):
        return results[job.target]

    await run(spec("answer", answer))
    ids = {target: (await queue.submit("answer", target)).id for target in results}
    for target, job_id in ids.items():
        await wait_state(pool, job_id, "completed")
        assert await pool.fetchval("select result::text from jobfeed.jobs where id = $1", job_id) \
            == ("null" if results[target] is None else json.dumps(results[target]))
        assert (await queue.get_job(job_id))["result"] == results[target]


async def test_results_json_cannot_hold_fail_the_attempt_at_once_and_alone(queue, pool, run):
    """Before: a result json.dumps refused (a set; ctx.submit's UUID) or one
    PostgreSQL refused (a NUL in a string) failed the write of its whole batch
    of completions, and every job in it ran again after its lease (here a
    minute) ran out, the bad one ending as lease_expired."""
    results = {"ok1": {"n": 1}, "set": {"s": {1, 2}}, "nan": float("nan"), "nul": {"text": "a\x00b"},
               "surrogate": "\ud800", "ok2": [2], "uuid": {"child": uuid.UUID(int=7)}}
    go = asyncio.Event()

    async def answer(job, ctx: Context):
        await go.wait()  # all at once: their completions share a batch
        return results[job.target]

    runner = await run(spec("answer", answer, lease=60))
    ids = {target: (await queue.submit("answer", target)).id for target in results}
    await eventually(lambda: asyncio.sleep(0, runner.running_count == len(results)), what="every job running")
    go.set()
    for target in ("ok1", "ok2", "uuid"):
        await wait_state(pool, ids[target], "completed")
    assert (await queue.get_job(ids["uuid"]))["result"] == {"child": str(uuid.UUID(int=7))}
    for target in ("set", "nan", "nul", "surrogate"):
        async def failed(job_id=ids[target]):
            log = (await queue.admin_get_job(job_id))["attempts_log"]
            return bool(log) and log[0]["error"] is not None and log[0]["error"]["code"] == "invalid_result"
        await eventually(failed, timeout=10, what=f"{target}'s attempt failed")


async def test_a_result_postgresql_refuses_fails_a_spawning_attempt_without_its_children(queue, pool, run):
    async def spawning(job, ctx: Context):
        await ctx.submit("spawning", "child", {})
        return "a\x00b"

    await run(spec("spawning", spawning, lease=60))
    job_id = (await queue.submit("spawning", "x")).id

    async def failed():
        log = (await queue.admin_get_job(job_id))["attempts_log"]
        return bool(log) and log[0]["error"] is not None and log[0]["error"]["code"] == "invalid_result"
    await eventually(failed, timeout=10, what="the attempt failed")
    assert await pool.fetchval("select count(*) from jobfeed.jobs where parent_id = $1", job_id) == 0


async def test_checkpoint_reaches_the_next_attempt(queue, pool, run):
    seen = []

    async def resumable(job, ctx: Context):
        seen.append(job.checkpoint)
        if job.checkpoint is None:
            await ctx.checkpoint({"page": 7})
            raise Transient("flaky", "try again")
        return {"resumed_from": job.checkpoint["page"]}

    await run(spec("resumable", resumable))
    job_id, _ = await queue.submit("resumable", "x")
    await wait_state(pool, job_id, "completed")
    assert seen == [None, {"page": 7}]
    assert (await queue.get_job(job_id))["result"] == {"resumed_from": 7}


async def test_exceptions_map_to_outcomes(queue, pool, run):
    async def handler(job, ctx):
        what = job.payload["raise"]
        if what == "permanent":
            raise Permanent("gone", "upstream said 404")
        if what == "release" and job.generation == 1:
            raise Release("quota", "our key is throttled", retry_after=0.05)
        if what == "bug" and job.generation < 3:
            raise KeyError("oops")
        # a library's sys.exit() (or a stray KeyboardInterrupt): this attempt's
        # end, not the worker's and its other jobs'
        if what == "exit" and job.generation == 1:
            raise SystemExit(3)
        if what == "interrupt" and job.generation == 1:
            raise KeyboardInterrupt
        # jobfeed's own exception, raised by the handler while its lease holds:
        # an error like any other, not a lost lease left to run out
        if what == "lost" and job.generation == 1:
            raise LeaseLost("mine")
        return {"generation": job.generation}

    runner = await run(spec("mapped", handler))
    perm, _ = await queue.submit("mapped", "p", {"raise": "permanent"})
    rel, _ = await queue.submit("mapped", "r", {"raise": "release"})
    bug, _ = await queue.submit("mapped", "b", {"raise": "bug"})
    ended = [(await queue.submit("mapped", what, {"raise": what})).id for what in ("exit", "interrupt", "lost")]
    for job_id in (perm, rel, bug, *ended):
        await wait_state(pool, job_id, "completed", "failed")
    for job_id, message in zip(ended, ("SystemExit: 3", "KeyboardInterrupt: ", "LeaseLost: mine"), strict=True):
        e = await queue.admin_get_job(job_id)
        assert [a["outcome"] for a in e["attempts_log"]] == ["transient", "completed"]
        assert e["attempts_log"][0]["error"] == {"code": "internal_error", "message": message}
    assert not runner._stop.is_set()
    p = await queue.admin_get_job(perm)
    assert (p["state"], p["last_error"]["code"]) == ("failed", "gone")
    r = await queue.admin_get_job(rel)
    assert (r["state"], r["attempts"], [a["outcome"] for a in r["attempts_log"]]) == \
        ("completed", 1, ["released", "completed"])
    b = await queue.admin_get_job(bug)
    # any other exception counts as transient; attempt 3 of 3 succeeds
    assert [a["outcome"] for a in b["attempts_log"]] == ["transient", "transient", "completed"]
    # code internal_error (issue 9: users see only errors raised on purpose); the class for admins
    assert b["attempts_log"][0]["error"] == {"code": "internal_error", "message": "KeyError: 'oops'"}


async def test_an_error_postgresql_cannot_hold_is_still_recorded(queue, pool, run):
    """A NUL or a lone surrogate in an error (the handler's or any exception's),
    or a code that is no string, never leaves the outcome unwritten and the job
    running until its lease expires: each is written at once, made storable."""
    async def handler(job, ctx):
        what = job.payload["raise"]
        if what == "nul":
            raise Permanent("bad\x00code", "a\x00b \ud800 " + "m" * 5000)
        if what == "bug":
            raise ValueError("x\x00y")
        if what == "mute":
            raise Unreadable()
        raise Permanent(5, "a number for a code")  # TypeError, in the handler's traceback

    class Unreadable(Exception):
        def __str__(self) -> str:
            raise RuntimeError("a library's broken __str__")

    await run(spec("unstorable", handler, lease=60.0))  # its end would be the only way on
    nul, bug, num, mute = [(await queue.submit("unstorable", what, {"raise": what})).id
                           for what in ("nul", "bug", "num", "mute")]
    await wait_state(pool, nul, "failed")  # well before the lease's end
    for job_id in (bug, num, mute):
        await wait_state(pool, job_id, "failed", "queued")  # retried, or failed
    e = await queue.admin_get_job(nul)
    assert (e["state"], e["last_error"]["code"]) == ("failed", "bad\ufffdcode")
    assert e["last_error"]["message"] == "a\ufffdb \ufffd " + "m" * (redact.MAX_MESSAGE - 6)
    assert (await queue.get_job(nul))["error"] == e["last_error"]  # the public view shows it the same
    e = await queue.admin_get_job(bug)
    assert e["attempts_log"][0]["error"] == {"code": "internal_error", "message": "ValueError: x\ufffdy"}
    e = await queue.admin_get_job(num)
    assert e["attempts_log"][0]["error"]["code"] == "internal_error"
    assert e["attempts_log"][0]["error"]["message"].startswith("TypeError: a job error's code and message are strings")
    e = await queue.admin_get_job(mute)
    assert e["attempts_log"][0]["error"] == {"code": "internal_error", "message": "Unreadable (its text could not be read)"}


async def test_progress_after_losing_the_lease_raises_lease_lost(queue, pool, run):
    outcome = asyncio.Queue()

    async def reporter(job, ctx: Context):
        ctx.heartbeat = False  # so the loss is found by progress(), not the heartbeat
        # taken by another worker (no notification, which would stop the handler first)
        await pool.execute("update jobfeed.jobs set generation = generation + 1 where id = $1", job.id)
        try:
            await ctx.progress(1, 2, "half")
        except LeaseLost:
            outcome.put_nowait("lost")
            raise
        outcome.put_nowait("kept")

    await run(spec("reporter", reporter))
    job_id, _ = await queue.submit("reporter", "x")
    assert await asyncio.wait_for(outcome.get(), 5) == "lost"
    assert (await queue.get_job(job_id))["progress"] is None


async def test_concurrency_limit_is_respected(queue, pool, run):
    active, peak = 0, 0

    async def busy(job, ctx):
        nonlocal active, peak
        active += 1
        peak = max(peak, active)
        await asyncio.sleep(0.05)
        active -= 1

    await run(spec("busy", busy), concurrency=3)
    ids = [(await queue.submit("busy", f"t{i}"))[0] for i in range(12)]
    await eventually(lambda: pool.fetchval(
        "select count(*) = 12 from jobfeed.jobs where state = 'completed'"), what="all done")
    assert peak == 3
    assert len(ids) == 12


async def test_a_job_due_later_runs_when_due_not_before(queue, pool, run):
    """The worker sleeps until the next run_after instead of polling blindly."""
    async def ok(job, ctx):
        return "ok"

    await run(spec("later", ok))
    job_id, _ = await queue.submit("later", "x")
    await wait_state(pool, job_id, "completed")
    import datetime as dt
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=0.5)
    later_id, _ = await queue.submit("later", "y", run_after=soon)
    await wait_state(pool, later_id, "completed", timeout=5)
    started = await pool.fetchval("select started_at from jobfeed.jobs where id = $1", later_id)
    assert started >= soon


async def test_claims_do_not_wait_for_the_pool(dsn, pool, queue):
    """The claim loop has a connection of its own: a worker whose pool is all
    taken (by its handlers' writes, say) still claims and starts a due job."""
    from jobfeed.worker import db
    from jobfeed.worker.queue import Queue
    from jobfeed.worker.runner import Runner

    started = asyncio.Event()

    async def note(job, ctx: Context):
        started.set()

    await queue.register_kind("note", max_attempts=3, lease=5.0, backoff=(0.05,), jitter=0.0)
    small = await db.create_pool(dsn, min_size=1, max_size=1)
    runner = Runner(Queue(small), dsn, [spec("note", note, lease=5.0)], poll_interval=0.2, grace=1.0)
    task = asyncio.create_task(runner.run())
    try:
        async with small.acquire():  # the pool's only connection, held
            job_id = (await queue.submit("note", "x")).id
            await asyncio.wait_for(started.wait(), 10)
            assert await pool.fetchval("select state from jobfeed.jobs where id = $1", job_id) == "running"
        await wait_state(pool, job_id, "completed")  # its outcome, once the pool is free
    finally:
        runner.stop()
        await asyncio.wait_for(task, 10)
        await small.close()


async def test_a_claim_connection_that_dies_is_replaced(pool, queue, run):
    """A server restart or a broken network ends the claim connection: the
    next claim opens another, and jobs run as before."""
    async def noop(job, ctx: Context):
        return None

    await run(spec("noop", noop))
    first = (await queue.submit("noop", "before")).id
    await wait_state(pool, first, "completed")
    killed = await pool.fetchval(
        "select count(pg_terminate_backend(pid)) from pg_stat_activity"
        " where application_name = 'jobfeed-worker-claim' and datname = current_database()")
    assert killed == 1
    second = (await queue.submit("noop", "after")).id
    await wait_state(pool, second, "completed")
    await eventually(lambda: pool.fetchval(
        "select count(*) = 1 from pg_stat_activity"
        " where application_name = 'jobfeed-worker-claim' and datname = current_database()"))


async def test_a_release_without_retry_after_waits_the_kinds_first_backoff(queue, pool, run):
    """Else the worker that released it claims it straight back, for ever: a
    release is not counted, so nothing would end the loop."""
    async def releases(job, ctx):
        if job.generation == 1:
            raise Release("not_now", "the upstream is closed")
        return {"generation": job.generation}

    await run(TaskSpec("rel", releases, max_attempts=3, lease=5.0, backoff=(60.0, 120.0), jitter=0.0))
    job_id = (await queue.submit("rel", "x")).id
    await eventually(lambda: pool.fetchval("select state = 'queued' and generation = 1 from jobfeed.jobs "
                                           "where id = $1", job_id), what="the release")
    delay = await pool.fetchval("select extract(epoch from run_after - now()) from jobfeed.jobs where id = $1", job_id)
    assert 50 < delay <= 60
    await pool.execute("update jobfeed.jobs set run_after = now() where id = $1", job_id)
    await pool.execute("select pg_notify('jobfeed_due', 'rel')")
    await wait_state(pool, job_id, "completed")
    view = await queue.admin_get_job(job_id)
    assert view["attempts"] == 1 and [a["outcome"] for a in view["attempts_log"]] == ["released", "completed"]


def _count(kind: str, outcome: str) -> float:
    return metrics.OUTCOMES.labels(kind, outcome, "").value


async def test_metrics_count_each_attempt_as_its_write_found_it(queue, pool, run):
    """Run 1 stops renewing its lease and the same worker claims the job again
    (run 2) while it still runs; run 1's completion is then refused. It counts
    as lost, not completed; run 2's completion counts once, with its
    end-to-end time, though run 1 ended after run 2 was claimed."""
    second_started = asyncio.Event()

    async def handler(job, ctx: Context):
        if job.generation == 1:
            ctx.heartbeat = False  # as a handler blocking the event loop would
            await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 millisecond' "
                               "where id = $1", job.id)
            await pool.execute("select pg_notify('jobfeed_due', 'counted')")
            await asyncio.wait_for(second_started.wait(), 10)
            return {"generation": 1}
        second_started.set()
        # run 2 ends once run 1 has been counted, whatever as
        await eventually(lambda: _async(_count("counted", "lost") + _count("counted", "completed") == 1),
                         what="run 1 counted")
        return {"generation": 2}

    await run(spec("counted", handler, lease=5.0))
    job_id = (await queue.submit("counted", "x")).id
    await wait_state(pool, job_id, "completed")
    assert (await queue.get_job(job_id))["result"] == {"generation": 2}
    await eventually(lambda: _async(_count("counted", "completed") == 1), what="run 2 counted")
    assert _count("counted", "lost") == 1
    assert sum(metrics.END_TO_END.labels("counted", "completed").counts) == 1


async def _async(value):
    return value
