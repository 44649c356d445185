"""The sweeper deletes only finished jobs past retention, in batches, fails
expired leases with no attempts left, and applies deferred leaves that are
due; several sweepers may run at once."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

from conftest import JOBFEED, worker_env
from queue_sql import value_and_count_around, value_and_index_entries_read
from jobfeed.worker import metrics
from jobfeed.worker.sweeper import Sweeper
from waiting import eventually


async def plant(pool, n: int, state: str, age: str, kind: str = "demo") -> None:
    """n jobs in `state`, finished (or, if unfinished, created) `age` ago."""
    finished = "now() - $3::text::interval" if state in ("completed", "failed", "canceled") else "null"
    await pool.execute(
        f"insert into jobfeed.jobs (kind, target, state, created_at, finished_at) "
        f"select $1, 'p' || g || '-' || gen_random_uuid(), $2::jobfeed.job_state, now() - $3::text::interval, {finished} "
        f"from generate_series(1, $4) g", kind, state, age, n)


async def counts(pool) -> dict[str, int]:
    rows = await pool.fetch("select state::text, count(*) from jobfeed.jobs group by 1")
    return {r[0]: r[1] for r in rows}


async def test_only_finished_jobs_past_retention_are_deleted(queue, pool, demo_kind):
    await plant(pool, 25, "completed", "8 days")
    await plant(pool, 5, "failed", "8 days")
    await plant(pool, 5, "canceled", "8 days")
    await plant(pool, 7, "completed", "6 days")   # within retention
    await plant(pool, 3, "queued", "30 days")     # unfinished: never deleted
    await pool.execute("update jobfeed.jobs set state = 'running', lease_until = now() + interval '1 h' "
                       "where target like 'p1-%' and state = 'queued'")
    await plant(pool, 2, "queued", "30 days")
    sweeper = Sweeper(queue, retention=7 * 86400, batch=10)
    assert await sweeper.sweep_once() == {"expired": 0, "left": 0, "deleted": 35}
    assert await counts(pool) == {"completed": 7, "queued": 4, "running": 1}
    assert await sweeper.sweep_once() == {"expired": 0, "left": 0, "deleted": 0}


async def test_a_sweep_reads_a_young_tables_expired_jobs_in_order_and_stops(pool, demo_kind):
    """Before any analyze every estimate is a row or two, and a plan could read
    all the expired jobs and sort them to delete the oldest batch, at every
    batch. The delete reads jobs_finished_at in order and stops at its limit."""
    await plant(pool, 60000, "completed", "8 days")
    deleted, read = await value_and_index_entries_read(pool, "select jobfeed.delete_finished('7 days', 100)")
    assert deleted == 100
    assert read < 1000, f"deleting 100 jobs read {read} index entries"


async def test_a_sweeps_batches_go_on_where_the_last_ended(queue, pool, demo_kind):
    """The index entries of deleted jobs stay until a vacuum: a batch that
    started from the oldest expired job again would read past all of them,
    each batch dearer than the last. Given where the last batch ended, a
    batch reads a few pages of jobs_finished_at; from the oldest, it reads
    the deleted jobs' pages too. The sweeper passes it on, batch to batch."""
    # no vacuum may clear the deleted jobs' entries meanwhile (this database's own table)
    await pool.execute("alter table jobfeed.jobs set (autovacuum_enabled = off)")
    await pool.execute("insert into jobfeed.jobs (kind, target, state, created_at, finished_at) "
                       "select 'demo', 'h' || g, 'completed', now() - interval '9 days', "
                       "now() - interval '8 days' + g * interval '1 ms' from generate_series(1, 40000) g")
    await pool.execute("analyze jobfeed.jobs")
    after = None
    for _ in range(30):
        n, after = await queue.delete_finished_after(7 * 86400, 1000, after)
        assert n == 1000
    index_pages = "select pg_stat_get_xact_blocks_fetched('jobfeed.jobs_finished_at'::regclass)"
    async with pool.acquire() as conn:
        on = await value_and_count_around(conn, f"select deleted from jobfeed.delete_finished_v2('7 days', 100, "
                                                f"'{after.isoformat()}')", index_pages)
        anew = await value_and_count_around(conn, "select deleted from jobfeed.delete_finished_v2('7 days', 100)",
                                            index_pages)
    assert on[0] == anew[0] == 100
    assert on[1] <= 10 < 50 <= anew[1], f"pages read: from where the last ended {on[1]}, from the oldest {anew[1]}"
    # and the sweeper: the rest (9,800) in batches that each go on from the last
    calls: list = []

    class Watched(type(queue)):
        async def delete_finished_after(self, retention, limit=1000, after=None):
            calls.append(after)
            return await super().delete_finished_after(retention, limit, after)

    sweeper = Sweeper(Watched(pool), retention=7 * 86400, batch=2000)
    sweeper.REST = 0.0
    assert (await sweeper.sweep_once())["deleted"] == 9800
    assert calls[0] is None and all(a is not None for a in calls[1:]) and len(calls) == 5
    assert calls == sorted(calls, key=lambda a: (a is not None, a))


async def test_sweeper_fails_expired_leases_with_no_attempts_left(queue, pool, demo_kind):
    job_id = (await queue.submit("demo", "x")).id
    await pool.execute("update jobfeed.jobs set state = 'running', attempts = max_attempts, generation = 5, "
                       "lease_until = now() - interval '1 s' where id = $1", job_id)
    other = (await queue.submit("demo", "y")).id
    await pool.execute("update jobfeed.jobs set state = 'running', attempts = 1, generation = 1, "
                       "lease_until = now() - interval '1 s' where id = $1", other)
    result = await Sweeper(queue, retention=86400).sweep_once()
    assert result["expired"] == 1
    view = await queue.get_job(job_id)
    assert view["status"] == "failed" and view["error"]["code"] == "lease_expired"
    # attempts left: stays running, to be reclaimed by a worker
    assert (await queue.admin_get_job(other))["state"] == "running"


async def test_concurrent_sweepers_delete_each_job_once(queue, pool, demo_kind):
    await plant(pool, 500, "completed", "30 days")
    await plant(pool, 50, "queued", "30 days")
    sweepers = [Sweeper(queue, retention=86400, batch=40) for _ in range(4)]
    results = await asyncio.gather(*(s.sweep_once() for s in sweepers))
    assert sum(r["deleted"] for r in results) == 500
    assert await counts(pool) == {"queued": 50}


async def test_deleting_a_job_deletes_its_attempts(queue, pool, demo_kind):
    job_id = (await queue.submit("demo", "x")).id
    [job] = await queue.claim(["demo"], 1, "w")
    assert await queue.fail_permanent(job.id, job.generation, "bad", "no")  # logged (a completion is not)
    await pool.execute("update jobfeed.jobs set finished_at = now() - interval '8 days' where id = $1", job_id)
    assert await pool.fetchval("select count(*) from jobfeed.attempts") == 1
    await Sweeper(queue, retention=7 * 86400).sweep_once()
    assert await pool.fetchval("select count(*) from jobfeed.attempts") == 0


async def test_sweeper_command_once(dsn, pool, demo_kind):
    await plant(pool, 3, "completed", "2 days")
    out = subprocess.run(JOBFEED + ["sweeper", "--once"], env=worker_env(dsn, JOBFEED_RETENTION="1d"),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"expired": 0, "left": 0, "deleted": 3}


async def test_old_periodic_slots_go_but_each_kinds_newest_stays(queue, pool):
    """The slots past retention go; a kind's newest stays however old (a schedule
    slower than the retention must not find its last slot free again)."""
    await pool.execute("insert into jobfeed.schedule_slots (kind, slot) "
                       "select 'hourly', now() - (g + 0.5) * interval '1 hour' from generate_series(0, 239) g")
    await pool.execute("insert into jobfeed.schedule_slots (kind, slot) "
                       "values ('monthly', now() - interval '9 days'), ('monthly', now() - interval '40 days')")
    sweeper = Sweeper(queue, retention=7 * 86400)
    assert await sweeper.sweep_once() == {"expired": 0, "left": 0, "deleted": 0}  # jobs: none
    left = await pool.fetch("select kind, count(*) as n, min(slot) as oldest from jobfeed.schedule_slots group by 1")
    by_kind = {r["kind"]: r for r in left}
    assert by_kind["hourly"]["n"] == 168  # the slots of the last 7 days (g 0..167)
    assert by_kind["monthly"]["n"] == 1
    assert await pool.fetchval("select now() - $1 > interval '8 days'", by_kind["monthly"]["oldest"])


async def test_a_signal_timeout_is_kept_under_a_long_sweep_interval(queue, pool, demo_kind):
    """The sweeper's round comes every minute; a 1 s signal_timeout is failed
    within about a second of its deadline all the same, also one submitted while
    the sweeper rests, and a signal that arrived in time is left alone."""
    sweeper = Sweeper(queue, retention=86400, interval=60.0)
    task = asyncio.create_task(sweeper.run())
    try:
        await asyncio.sleep(0.1)  # the first round is over: what follows is the rest between rounds
        late = (await queue.submit("demo", "late", await_signals=["paid"], signal_timeout=1.0)).id
        on_time = (await queue.submit("demo", "on-time", await_signals=["paid"], signal_timeout=1.0)).id
        await queue.signal(on_time, "paid")
        submitted = time.monotonic()

        async def failed():
            return await pool.fetchval("select last_error_code from jobfeed.jobs where id = $1 and state = 'failed'",
                                       late)
        assert await eventually(failed, timeout=10, what="the signal timeout") == "signal_timeout"
        assert time.monotonic() - submitted < 5  # not the next round, a minute on
        assert await pool.fetchval("select state from jobfeed.jobs where id = $1", on_time) == "queued"
    finally:
        sweeper.stop()
        await asyncio.wait_for(task, 5)


async def defer(pool, queue, target: str, kind: str = "demo", due: str = "-1 second"):
    """A job with one request whose deferred leave falls due `due` from now."""
    s = await queue.submit(kind, target, request=True)
    await pool.execute("select jobfeed.leave_later($1, '1 minute', now() - interval '1 minute' + $2::text::interval)",
                       s.request_id, due)
    return s


def applied() -> float:
    """jobfeed_sweeper_leaves_total, as this process counted it."""
    return metrics.PROCESS.get_sample_value("jobfeed_sweeper_leaves_total") or 0.0


async def test_the_sweeper_applies_due_leaves_in_batches(queue, pool, demo_kind):
    """Every due leave, past one batch, through leave(): the abandoned jobs are
    canceled; a leave not yet due, and one called off, change nothing."""
    due = [await defer(pool, queue, f"d{n}") for n in range(25)]
    later = await defer(pool, queue, "later", due="1 hour")
    stayed = await defer(pool, queue, "stayed")
    await queue.stay(stayed.request_id)
    before = applied()
    result = await Sweeper(queue, retention=86400, batch=10).sweep_once()
    assert result == {"expired": 0, "left": 25, "deleted": 0}
    assert applied() - before == 25
    assert await counts(pool) == {"canceled": 25, "queued": 2}
    assert await pool.fetchval("select count(*) from jobfeed.requests where left_at is not null") == 25
    assert {(await queue.get_job(s.id))["status"] for s in due} == {"canceled"}
    assert (await queue.get_job(later.id))["requesters"] == 1


async def test_a_deferred_leave_is_applied_within_a_second_under_a_long_sweep_interval(queue, pool, demo_kind):
    """A closed page's leave falls due between two rounds a minute apart: the
    sweeper wakes for it (as for a signal deadline), not at the next round."""
    sweeper = Sweeper(queue, retention=86400, interval=60.0)
    task = asyncio.create_task(sweeper.run())
    try:
        await asyncio.sleep(0.1)  # the first round is over: what follows is the rest between rounds
        s = await queue.submit("demo", "closed", request=True)
        before = applied()
        await queue.leave(s.request_id, grace=1.5)
        asked = time.monotonic()

        async def canceled():
            return (await queue.get_job(s.id))["status"] == "canceled"
        await eventually(canceled, timeout=10, what="the deferred leave applied")
        assert 1.4 < time.monotonic() - asked < 5  # its grace, then within a moment; not the next round
        assert applied() - before == 1
    finally:
        sweeper.stop()
        await asyncio.wait_for(task, 5)


async def test_an_idle_sweeper_rests_between_rounds(queue, pool, demo_kind):
    """With no deadline ahead (no signal awaited, no leave pending, only one
    that has been applied), the sweeper looks once a second and does nothing
    more until its next round."""
    s = await defer(pool, queue, "done")
    calls = []

    class Counting(type(queue)):
        async def sweep_expired(self):
            calls.append(time.monotonic())
            return await super().sweep_expired()

    sweeper = Sweeper(Counting(pool), retention=86400, interval=60.0)
    task = asyncio.create_task(sweeper.run())
    try:
        await asyncio.sleep(1.5)
    finally:
        sweeper.stop()
        await asyncio.wait_for(task, 5)
    assert len(calls) == 1  # the first round, nothing since
    assert (await queue.get_job(s.id))["status"] == "canceled"
