"""The runner's hot path under trouble: outcomes survive a lost connection,
leases follow what the database granted, kinds share the slots, progress is
coalesced."""

from __future__ import annotations

import asyncio
import gc

from jobfeed.worker import db
from jobfeed.worker.tasks import Transient
from test_worker_runner import spec
from waiting import eventually, wait_state


async def _blocked_pid(pool, needle: str) -> int:
    async def probe():
        return await pool.fetchval(
            "select pid from pg_stat_activity where wait_event_type = 'Lock' and query like $1", f"%{needle}%")
    return await eventually(probe, timeout=10, what=f"a {needle} call waiting on a lock")


async def test_a_completion_whose_connection_dies_is_written_again(queue, pool, dsn, run):
    locker = await db.connect(dsn)
    try:
        async def quick(job, ctx):
            # Hold the row, so the completion's statement waits on it and its
            # connection can be killed mid-call.
            await locker.execute("begin")
            await locker.execute("select 1 from jobfeed.jobs where id = $1 for update", job.id)
            return {"ok": True}

        await run(spec("quick", quick, lease=30.0))
        job_id, _ = await queue.submit("quick", "x")
        pid = await _blocked_pid(pool, "complete_many")
        assert await pool.fetchval("select pg_terminate_backend($1)", pid)
        await locker.execute("rollback")
        assert await wait_state(pool, job_id, "completed", timeout=10) == "completed"
        view = await queue.admin_get_job(job_id)
        assert view["generation"] == 1 and view["result"] == {"ok": True}
    finally:
        await locker.close()


async def test_a_shorter_lease_set_under_a_running_worker_runs_no_job_twice(queue, pool, run):
    runs: dict = {}

    async def slow(job, ctx):
        runs[job.id] = runs.get(job.id, 0) + 1
        await asyncio.sleep(2.0)
        return {"ok": True}

    # This worker believes the lease is 30 s (a heartbeat every 10 s)...
    await run(spec("slow", slow, lease=30.0))
    # ...then a deploy registers the kind with a lease of 0.6 s, which claims grant.
    await queue.register_kind("slow", max_attempts=3, lease=0.6, backoff=(0.05,), jitter=0.0)
    ids = [(await queue.submit("slow", f"t{i}"))[0] for i in range(3)]
    for job_id in ids:
        await wait_state(pool, job_id, "completed", timeout=15)
    assert runs == {job_id: 1 for job_id in ids}
    assert await pool.fetchval("select max(generation) from jobfeed.jobs") == 1


async def test_a_backlog_in_one_kind_does_not_starve_another(queue, pool, run):
    async def busy(job, ctx):
        await asyncio.sleep(0.1)

    await run(spec("a", busy, lease=30.0), spec("b", busy, lease=30.0), concurrency=2)
    await queue.submit_many("a", [(f"t{i}", None) for i in range(300)])
    await eventually(lambda: pool.fetchval("select count(*) >= 10 from jobfeed.jobs where state = 'completed'"),
                     what="the backlog under way")
    b_ids = [i for i, _ in await queue.submit_many("b", [(f"t{i}", None) for i in range(3)])]
    for job_id in b_ids:
        await wait_state(pool, job_id, "running", "completed", timeout=10)
    waits = await pool.fetch("select extract(epoch from started_at - created_at) as wait from jobfeed.jobs "
                             "where kind = 'b'")
    assert max(r["wait"] for r in waits) < 1.0, [r["wait"] for r in waits]
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'a' and state = 'queued'") > 100


async def test_progress_is_coalesced_and_the_last_report_lands(queue, pool, run):
    async def chatty(job, ctx):
        for i in range(1, 2001):
            await ctx.progress(i, 2000, f"step {i}")
            if i % 100 == 0:
                await asyncio.sleep(0.05)  # about 1 s in all
        return {"steps": 2000}

    await run(spec("chatty", chatty, lease=30.0))
    listener = await pool.acquire()
    seen: list[str] = []

    def heard(*args):
        seen.append(args[3])

    await listener.add_listener("jobfeed_changed", heard)
    try:
        job_id, _ = await queue.submit("chatty", "x")
        await wait_state(pool, job_id, "completed", timeout=15)
        await asyncio.sleep(0.2)
    finally:
        await listener.remove_listener("jobfeed_changed", heard)
        await pool.release(listener)
    view = await queue.admin_get_job(job_id)
    # at most a few writes a second, and the last report before the outcome is the one shown
    assert view["progress"] == {"done": 2000, "total": 2000, "message": "step 2000"}
    mine = [p for p in seen if str(job_id) in p]
    assert 3 <= len(mine) <= 12, len(mine)


async def test_a_finished_run_leaves_nothing_to_the_garbage_collector(queue, pool, run):
    """A run's task, its context and the runner's entry for it are freed by
    their reference counts as the run ends, whatever its outcome: a reference
    cycle among them left a job's worth of objects per job to the collector,
    which then walked every job in flight, again and again (bench/rounds.md,
    thirty-fourth round)."""
    async def once(job, ctx):
        if job.attempt == 1 and job.target.startswith("retry"):
            raise Transient("flaky", "again")
        if job.attempt == 1 and job.target.startswith("bug"):
            raise KeyError("a bug, retried")
        return {"ok": True}

    async def run_jobs(n: int) -> None:
        targets = [f"{t}-{i}-{n}" for t in ("done", "retry", "bug") for i in range(n)]
        ids = [(await queue.submit("once", target))[0] for target in targets]
        for job_id in ids:
            await wait_state(pool, job_id, "completed", timeout=10)

    await run(spec("once", once, lease=30.0))
    await run_jobs(2)  # what is made once (statements prepared, ...) is made here
    gc.collect()
    gc.disable()
    try:
        await run_jobs(20)  # 100 runs
        found = gc.collect()
    finally:
        gc.enable()
    assert found < 100, f"{found} objects in reference cycles after 100 runs"


async def test_a_submit_wakes_as_many_workers_as_it_made_jobs(pool, dsn, queue):
    from jobfeed.worker.runner import Runner

    async def ok(job, ctx):
        return None

    await queue.register_kind("w", max_attempts=3, lease=30.0, backoff=(0.05,), jitter=0.0)
    runners = [Runner(queue, dsn, [spec("w", ok, lease=30.0)], poll_interval=60.0, grace=1.0)
               for _ in range(4)]
    tasks = [asyncio.create_task(r.run()) for r in runners]
    try:
        await asyncio.sleep(2.5)  # seated, and each has seen the others' seats

        async def woken_by(make) -> set[int]:
            for r in runners:
                r.signals.claimed.enable()  # counts this round's claims only
            await make()
            await asyncio.sleep(1.0)
            return {n for n, r in enumerate(runners) if r.signals.claimed.pending()}

        assert len(await woken_by(lambda: queue.submit("w", "one"))) == 1
        assert len(await woken_by(lambda: queue.submit_many("w", [("two-a", None), ("two-b", None)]))) == 2
        assert len(await woken_by(lambda: queue.submit_many("w", [(f"ten-{i}", None) for i in range(10)]))) == 4
        await eventually(lambda: pool.fetchval("select count(*) = 13 from jobfeed.jobs where state = 'completed'"),
                         timeout=10, what="every job done")
    finally:
        for r in runners:
            r.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)


def test_due_payloads_are_read_strictly_and_turns_go_round():
    from jobfeed.worker.seats import Seats

    seats = Seats("unused", ["k", "a:b"], "test")
    assert seats.wakes_me("k") and seats.wakes_me("1:0:a:b")  # the kind alone, or no seat view: wake
    assert seats.wakes_me("1:0:other") is None and seats.wakes_me("\u00b2:1:k") is None
    seats._view = {"k": (1, 4)}  # my seat ranks second of four
    assert [bool(seats.wakes_me(f"1:{offset}:k")) for offset in range(8)] == [False, True, False, False] * 2
    assert [bool(seats.wakes_me(f"2:{offset}:k")) for offset in range(4)] == [True, True, False, False]
    assert seats.wakes_me("4:3:k") and seats.wakes_me("99:0:k")
    seats.seated(False)  # full: no turns
    assert not seats.wakes_me("1:1:k") and seats.wakes_me("k")
