"""Handlers that will not be stopped, and what ends them all the same: one that
catches its cancellation and goes on is given up on (its slot freed, its
outcome written, the task left behind) a while after a cancel, a shutdown or
its timeout, and then writes nothing and holds no process's exit; one that
raises a BaseException of its own records a failure at once rather than
holding its job until the lease ends, also when the exception is an exit
raised in a task it started (which asyncio would let end the worker)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import signal
import subprocess
import time

import pytest

from conftest import JOBFEED, path_with_tests, worker_env
from jobfeed.worker import db
from jobfeed.worker.queue import Queue
from jobfeed.worker.runner import Runner
from jobfeed.worker.tasks import Context, LeaseLost, TaskSpec
from waiting import eventually, wait_state

CANCEL_WAIT = 0.3


async def none_left(runner: Runner) -> None:
    """Until the handlers given up on have ended (the test released them)."""
    async def ended():
        return not runner._stuck
    await eventually(ended, what="the abandoned handler to end")


def spec(kind: str, handler, timeout: float | None = None) -> TaskSpec:
    return TaskSpec(kind, handler, max_attempts=3, lease=5.0, backoff=(60.0,), jitter=0.0, timeout=timeout)


def swallowing(entered: asyncio.Event, released: asyncio.Event, canceled: asyncio.Event | None = None):
    """A handler that catches every CancelledError until the test releases it."""
    async def handler(job, ctx: Context):
        entered.set()
        while not released.is_set():
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                if canceled is not None:
                    canceled.set()
        return {"late": True}
    return handler


async def test_a_canceled_job_whose_handler_goes_on_frees_its_slot(queue, pool, run):
    entered, released = asyncio.Event(), asyncio.Event()
    quick_done = asyncio.Event()

    async def handler(job, ctx):
        if job.target == "next":
            quick_done.set()
            return {"next": True}
        return await swallowing(entered, released)(job, ctx)

    runner = await run(spec("stubborn", handler), concurrency=1, cancel_wait=CANCEL_WAIT)
    try:
        job_id = (await queue.submit("stubborn", "first")).id
        await asyncio.wait_for(entered.wait(), 5)
        await queue.cancel(job_id)
        nxt = (await queue.submit("stubborn", "next")).id
        # the one slot comes free though the handler never ends: the next job runs
        await wait_state(pool, nxt, "completed", timeout=10)
        assert runner.running_count == 0 and len(runner._stuck) == 1
        assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job_id) == "canceled"
    finally:
        released.set()
    await none_left(runner)
    view = await queue.admin_get_job(job_id)
    assert (view["state"], view["result"]) == ("canceled", None)  # its late return dropped


async def claim_released_only(pool, job_id) -> bool:
    """Another worker's claim, rolled back: False when it finds nothing; True
    when it takes the job, which it may only after the stop released it (the
    stop still has work to do after the release), never on a lapsed lease."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            got = await conn.fetch("select id from jobfeed.claim_v3($1, 1, 'other-worker', null)", ["stubborn"])
            if not got:
                return False
            ended = await conn.fetchval("select array_agg(outcome::text || ':' || error_code order by generation)"
                                        " from jobfeed.attempts where job_id = $1", job_id)
            assert ended == ["released:shutdown"], ended
            return True
        finally:
            await tx.rollback()


@pytest.mark.parametrize("lease", [5.0, 0.3])
async def test_shutdown_releases_a_job_whose_handler_ignores_it(queue, pool, dsn, lease):
    """Also with a lease shorter than the wait for the handler: its lease is
    renewed until the release is written (before: it lapsed, and the attempt
    ended lease_expired, counted)."""
    entered, released = asyncio.Event(), asyncio.Event()
    s = dataclasses.replace(spec("stubborn", swallowing(entered, released)), lease=lease)
    await queue.register_kind(s.kind, max_attempts=s.max_attempts, lease=s.lease, backoff=s.backoff, jitter=0.0)
    runner = Runner(queue, dsn, [s], poll_interval=0.2, grace=0.2,
                    cancel_wait=CANCEL_WAIT if lease > 1 else lease * 3)  # a wait longer than the lease
    running = asyncio.create_task(runner.run())
    try:
        job_id = (await queue.submit("stubborn", "x")).id
        await asyncio.wait_for(entered.wait(), 5)
        runner.stop()
        while not running.done():  # another worker finds the job held until it is released
            if await claim_released_only(pool, job_id):
                break  # released: the stop ends soon after
            await asyncio.sleep(0.05)
        await asyncio.wait_for(running, 10)  # before: waited on the handler for ever
        row = await pool.fetchrow("select state::text, attempts, last_error_code from jobfeed.jobs where id = $1",
                                  job_id)
        assert dict(row) == {"state": "queued", "attempts": 0, "last_error_code": "shutdown"}
        assert len(runner._stuck) == 1
    finally:
        released.set()
        runner.stop()
        await asyncio.wait_for(running, 10)
    await none_left(runner)
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job_id) == "queued"


async def test_a_handler_given_up_on_that_goes_on_reporting_writes_and_logs_nothing(queue, pool, dsn, caplog):
    """From the give-up on, its ctx calls raise LeaseLost with no call made,
    and what it raises in the end is not logged: before, its progress went on
    being written (fenced, to no end), and once the stopped worker's pool had
    closed each report logged "pool is closed"."""
    entered, released = asyncio.Event(), asyncio.Event()
    rounds, refused = [0], [0]

    async def handler(job, ctx: Context):
        entered.set()
        while not released.is_set():
            rounds[0] += 1
            try:
                await ctx.progress(rounds[0])
            except LeaseLost:
                refused[0] += 1
            except asyncio.CancelledError:
                pass
            try:
                await asyncio.sleep(0.02)
            except asyncio.CancelledError:
                pass
        raise RuntimeError("found its worker gone")  # dropped with the rest, traceback and all

    s = spec("reporting", handler)
    await queue.register_kind(s.kind, max_attempts=s.max_attempts, lease=s.lease, backoff=s.backoff, jitter=0.0)
    own_pool = await db.create_pool(dsn, max_size=4)  # the worker's, closed when it stops as a process's is
    own_queue = Queue(own_pool)
    calls: list[float] = []
    real_progress = own_queue.progress

    async def progress(*args):
        calls.append(args[2])
        return await real_progress(*args)

    own_queue.progress = progress  # type: ignore[method-assign]
    runner = Runner(own_queue, dsn, [s], poll_interval=0.2, grace=0.0, cancel_wait=CANCEL_WAIT)
    running = asyncio.create_task(runner.run())
    try:
        job_id = (await queue.submit("reporting", "x")).id
        await asyncio.wait_for(entered.wait(), 5)
        async def reported():
            return bool(calls)
        await eventually(reported, what="a report written")
        runner.stop()
        await asyncio.wait_for(running, 10)  # the release written for the handler given up on
        assert len(runner._stuck) == 1
        written = len(calls)
        await own_pool.close()
        later = rounds[0]

        async def went_on():
            return rounds[0] > later + 30
        await eventually(went_on, what="the handler to go on reporting")
    finally:
        released.set()
        runner.stop()
        await asyncio.wait_for(running, 10)
        await own_pool.close()
    await none_left(runner)
    assert len(calls) == written and refused[0] > 30  # each report refused, none written
    row = await pool.fetchrow("select state::text, last_error_code from jobfeed.jobs where id = $1", job_id)
    assert dict(row) == {"state": "queued", "last_error_code": "shutdown"}
    noise = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("jobfeed")
             and "leaving it behind" not in r.getMessage() and "given up on still run" not in r.getMessage()]
    assert noise == []


async def test_a_handler_that_ignores_its_timeout_is_given_up_on(queue, pool, run, caplog):
    entered, released = asyncio.Event(), asyncio.Event()
    runner = await run(spec("stubborn", swallowing(entered, released), timeout=0.2), cancel_wait=CANCEL_WAIT)
    try:
        job_id = (await queue.submit("stubborn", "x")).id
        await asyncio.wait_for(entered.wait(), 5)
        await eventually(lambda: pool.fetchval("select last_error_code = 'timeout' from jobfeed.jobs where id = $1",
                                               job_id), what="the timeout recorded")
        row = await pool.fetchrow("select state::text, attempts from jobfeed.jobs where id = $1", job_id)
        assert dict(row) == {"state": "queued", "attempts": 1}  # a transient failure, retried after backoff
        assert runner.running_count == 0
    finally:
        released.set()
    await none_left(runner)
    log = (await queue.admin_get_job(job_id))["attempts_log"]
    assert [(a["outcome"], a["error"]["code"]) for a in log] == [("transient", "timeout")]  # nothing more
    # said once: not again when the handler left behind returns at last (its outcome dropped)
    said = [r for r in caplog.records if "ran past its timeout of 0.2s" in r.getMessage()]
    assert [r.levelname for r in said] == ["WARNING"]


async def test_a_worker_stopping_after_a_runs_timeout_writes_the_timeout(queue, pool, dsn):
    """The timeout canceled the run, the handler ignored it, and the worker
    was told to stop before it gave up: before, the stop's release was written,
    and the attempt, not counted, never used up its attempts."""
    entered, released, canceled = asyncio.Event(), asyncio.Event(), asyncio.Event()
    s = spec("stubborn", swallowing(entered, released, canceled), timeout=0.2)
    await queue.register_kind(s.kind, max_attempts=s.max_attempts, lease=s.lease, backoff=s.backoff, jitter=0.0)
    runner = Runner(queue, dsn, [s], poll_interval=0.2, grace=0.0, cancel_wait=1.0)
    running = asyncio.create_task(runner.run())
    try:
        job_id = (await queue.submit("stubborn", "x")).id
        await asyncio.wait_for(canceled.wait(), 5)  # the timeout's cancel, ignored
        runner.stop()
        await asyncio.wait_for(running, 10)
        row = await pool.fetchrow("select state::text, attempts, last_error_code from jobfeed.jobs where id = $1",
                                  job_id)
        assert dict(row) == {"state": "queued", "attempts": 1, "last_error_code": "timeout"}
    finally:
        released.set()
        runner.stop()
        await asyncio.wait_for(running, 10)
    await none_left(runner)


async def test_a_run_again_after_wait_for_nothing_has_a_timeout_of_its_own(queue, pool, run):
    """wait_for([]) runs the handler again at once, in the attempt, with its
    own timeout: before, the give-up counted from the first run's start and
    ended two runs that each kept to their timeout as timed out."""
    async def twice(job, ctx):
        await asyncio.sleep(1.0)  # each run within its 1.5 s, both together past 1.5 s + CANCEL_WAIT
        if job.children is None:
            return ctx.wait_for([])
        return {"children": job.children}

    runner = await run(spec("twice", twice, timeout=1.5), cancel_wait=CANCEL_WAIT)
    job_id = (await queue.submit("twice", "x")).id
    await wait_state(pool, job_id, "completed", timeout=10)
    assert (await queue.admin_get_job(job_id))["result"] == {"children": []}
    assert not runner._stuck


@pytest.mark.parametrize("raised", ["own-cancel", "generator-exit", "base-exception"])
async def test_a_base_exception_of_the_handlers_own_is_a_failure_at_once(queue, pool, run, raised):
    class Odd(BaseException):
        pass

    async def handler(job, ctx):
        if job.attempt > 1:
            return {"attempt": job.attempt}
        if raised == "own-cancel":  # a task it awaited was canceled: not the worker's stop
            inner = asyncio.create_task(asyncio.sleep(30))
            asyncio.get_running_loop().call_soon(inner.cancel)
            await inner
        if raised == "generator-exit":
            raise GeneratorExit("closed")
        raise Odd("odd")

    await run(spec("odd", handler))
    job_id = (await queue.submit("odd", "x")).id
    # before: nothing written, the job held until its 5 s lease ran out
    # (attempts is 1 from the claim on: the failure is recorded when its code is)
    await eventually(lambda: pool.fetchval("select attempts = 1 and last_error_code is not null "
                                           "from jobfeed.jobs where id = $1", job_id),
                     timeout=2, what="the failure recorded")
    row = await pool.fetchrow("select state::text, last_error_code from jobfeed.jobs where id = $1", job_id)
    assert dict(row) == {"state": "queued", "last_error_code": "internal_error"}


async def test_a_worker_process_exits_on_sigterm_past_a_handler_that_ignores_it(dsn, pool, queue):
    """At once once the release is written: the handler given up on is not
    waited for at the exit (stuck_tasks.py sets that wait, LEFTOVER_WAIT, to
    30 s; before, the process sat it out)."""
    proc = subprocess.Popen(JOBFEED + ["worker", "--kinds", "stuck", "--grace", "0.2s"],
                            env=worker_env(dsn, JOBFEED_TASKS="stuck_tasks", PYTHONPATH=path_with_tests()),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        await eventually(lambda: pool.fetchval("select count(*) from jobfeed.kinds where kind = 'stuck'"),
                         what="the worker to register its kind")
        job_id, _ = await queue.submit("stuck", "x")
        await wait_state(pool, job_id, "running")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 40)  # before: never exited
        took = time.monotonic() - started
    finally:
        if proc.poll() is None:
            proc.kill()
        out, _ = proc.communicate(timeout=10)
    assert code == 0, out
    assert took < 20, out  # grace 0.2 s, CANCEL_WAIT 5 s, and no LEFTOVER_WAIT
    assert "leaving it behind" in out and "exiting without them" in out, out
    row = await pool.fetchrow("select state::text, attempts, last_error_code from jobfeed.jobs where id = $1", job_id)
    assert dict(row) == {"state": "queued", "attempts": 0, "last_error_code": "shutdown"}, out


async def test_an_exit_raised_in_a_task_a_handler_started_ends_its_attempt_not_the_worker(dsn, pool, queue):
    """asyncio lets SystemExit and KeyboardInterrupt out of the event loop from
    any task: before, one raised in a task the handler started ended the worker
    process, and its jobs, the other kind's too, waited out their leases."""
    proc = subprocess.Popen(JOBFEED + ["worker", "--kinds", "exits,steady", "--poll", "200ms"],
                            env=worker_env(dsn, JOBFEED_TASKS="exit_tasks", PYTHONPATH=path_with_tests()),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        await eventually(lambda: pool.fetchval("select count(*) = 2 from jobfeed.kinds where kind in "
                                               "('exits', 'steady')"), what="the worker to register its kinds")
        steady_id, _ = await queue.submit("steady", "first", {"seconds": 1.5})
        await wait_state(pool, steady_id, "running")
        exits = [(await queue.submit("exits", target)).id for target in ("system-exit", "keyboard-interrupt")]
        # each a transient failure at once, retried after its backoff
        await eventually(lambda: pool.fetchval("select count(*) = 2 from jobfeed.jobs where id = any($1) "
                                               "and last_error_code = 'internal_error'", exits),
                         what="the exits' failures recorded")
        await wait_state(pool, steady_id, "completed")
        after_id, _ = await queue.submit("steady", "after")
        await wait_state(pool, after_id, "completed")
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        code = await asyncio.to_thread(proc.wait, 20)
    finally:
        if proc.poll() is None:
            proc.kill()
        out, _ = proc.communicate(timeout=10)
    assert code == 0, out
    for job_id in exits:
        view = await queue.admin_get_job(job_id)
        assert [(a["outcome"], a["error"]["code"]) for a in view["attempts_log"]] == [("transient", "internal_error")]
        assert view["state"] == "queued" and view["result"] is None, out
    assert "SystemExit raised in a task its handler started" in out, out
    assert "KeyboardInterrupt raised in a task its handler started" in out, out


async def test_an_exit_whose_cancel_the_handler_ignores_keeps_the_lease_until_its_failure_is_written(queue, pool,
                                                                                                      run):
    """The handler goes on past the exit's cancel, for longer than its lease:
    the lease is renewed until the give-up writes the exit's failure (else it
    lapsed, the job was claimed again, and the attempt ended lease_expired)."""
    entered, released = asyncio.Event(), asyncio.Event()
    stubborn = swallowing(entered, released)

    async def handler(job, ctx):
        if job.generation > 1:
            return {"again": job.generation}

        async def dies():
            raise SystemExit(3)
        asyncio.create_task(dies())
        return await stubborn(job, ctx)

    runner = await run(dataclasses.replace(spec("exits", handler), lease=0.3), cancel_wait=1.0)
    try:
        job_id = (await queue.submit("exits", "x")).id
        await asyncio.wait_for(entered.wait(), 5)
        await eventually(lambda: pool.fetchval("select last_error_code is not null from jobfeed.jobs where id = $1",
                                               job_id), what="the attempt's end written")
    finally:
        released.set()
    await none_left(runner)
    log = (await queue.admin_get_job(job_id))["attempts_log"]
    assert [(a["outcome"], a["error"]["code"]) for a in log] == [("transient", "internal_error")]
