"""Concurrency and rate limits, enforced by the claim across claimers: 8
claimers race and a monitor never sees a cap exceeded; slots are refilled as
soon as they free up; rates are tested with controlled time (p_now)."""

from __future__ import annotations

import asyncio
import datetime as dt
import random

from queue_sql import T0, claim

CLAIMERS = 8


async def plant(pool, kind: str, n: int, key=None, start: int = 0) -> None:
    await pool.execute("""
        insert into jobfeed.jobs (kind, target, concurrency_key, run_after)
        select $1, $1 || '-' || coalesce($2, '') || '-' || g, $2, $4 from generate_series($3 + 1, $3 + $5) g""",
                       kind, key, start, T0 - dt.timedelta(minutes=1), n)


async def race(pool, kind: str, check_sql: str, cap: int, total: int) -> None:
    """8 claimers claim and complete until every job is done, while a monitor
    checks check_sql (the largest running count) never exceeds cap."""
    done = asyncio.Event()
    seen = [0]

    async def claimer(n: int) -> None:
        while not done.is_set():
            rows = await claim(pool, random.randint(1, 3), T0, kinds=[kind], worker=f"w{n}")
            await asyncio.sleep(random.random() * 0.003)
            for r in rows:
                assert await pool.fetchval("select jobfeed.complete($1, $2, '{}', $3)", r["id"], r["generation"], T0)
            if not rows:
                await asyncio.sleep(0.001)
            if await pool.fetchval("select count(*) from jobfeed.jobs where kind = $1 and state <> 'completed'",
                                   kind) == 0:
                done.set()

    async def monitor() -> None:
        while not done.is_set():
            seen[0] = max(seen[0], await pool.fetchval(check_sql, kind) or 0)
            assert seen[0] <= cap, f"{seen[0]} running, cap {cap}"

    await asyncio.wait_for(asyncio.gather(monitor(), *(claimer(n) for n in range(CLAIMERS))), 120)
    assert seen[0] == cap  # the cap was reached: the race was a race
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = $1 and state = 'completed'",
                               kind) == total



async def _noop(job, ctx):
    return None

async def test_max_running_is_never_exceeded_across_claimers(pool, queue):
    await queue.register_kind("capped", max_attempts=3, lease=60, backoff=(1,), max_running=3)
    await plant(pool, "capped", 60)
    await race(pool, "capped", "select count(*) from jobfeed.jobs where kind = $1 and state = 'running'", 3, 60)


async def test_max_running_per_key_is_never_exceeded_across_claimers(pool, queue):
    await queue.register_kind("tenants", max_attempts=3, lease=60, backoff=(1,), max_running_per_key=2)
    for key in ("a", "b", "c"):
        await plant(pool, "tenants", 15, key)
    await race(pool, "tenants", """select max(n) from (select count(*) as n from jobfeed.jobs
                                     where kind = $1 and state = 'running' group by concurrency_key) c""", 2, 45)


async def test_slots_are_used_whenever_work_is_due(pool, queue):
    await queue.register_kind("both", max_attempts=3, lease=60, backoff=(1,), max_running=5,
                              max_running_per_key=2)
    await plant(pool, "both", 4, "a")
    await plant(pool, "both", 4, "b")
    await plant(pool, "both", 4, None)
    # one claim fills every slot it may: 2 of a, 2 of b, 1 without a key (max_running 5)
    rows = await claim(pool, 50, T0, kinds=["both"])
    assert sorted(str(r["target"]).split("-")[1] for r in rows) == ["", "a", "a", "b", "b"]
    assert await claim(pool, 50, T0, kinds=["both"]) == []
    # a freed slot is taken by the very next claim, with a key that has room
    a = next(r for r in rows if "-a-" in r["target"])
    assert await pool.fetchval("select jobfeed.complete($1, $2, '{}', $3)", a["id"], a["generation"], T0)
    (again,) = await claim(pool, 50, T0, kinds=["both"])
    assert "-a-" in again["target"]
    # without a cap on the kind, jobs without a key are never held back
    await queue.register_kind("both", max_attempts=3, lease=60, backoff=(1,), max_running_per_key=2)
    assert len(await claim(pool, 50, T0, kinds=["both"])) == 3


async def test_a_capped_claim_reaches_keys_with_room_deep_in_the_queue(pool, queue):
    await queue.register_kind("deep", max_attempts=3, lease=60, backoff=(1,), max_running_per_key=1)
    await plant(pool, "deep", 300, "a")  # the queue's head: 300 jobs of one key, one slot
    await pool.execute("""insert into jobfeed.jobs (kind, target, concurrency_key, run_after)
                          select 'deep', 'deep-' || k || '-1', k, $1 from unnest(array['b', 'c', 'd', 'e', 'f']) k""",
                       T0 - dt.timedelta(seconds=30))
    rows = await claim(pool, 10, T0, kinds=["deep"])
    assert [str(r["target"]) for r in rows] == ["deep-a-1", "deep-b-1", "deep-c-1", "deep-d-1", "deep-e-1", "deep-f-1"]


async def test_a_capped_claim_skips_a_job_another_session_holds(pool, queue, dsn):
    from jobfeed.worker import db

    await queue.register_kind("held", max_attempts=3, lease=60, backoff=(1,), max_running_per_key=1)
    await plant(pool, "held", 2, "a")
    holder, claimer = await db.connect(dsn), await db.connect(dsn)
    try:
        await claimer.execute("set lock_timeout = '200ms'")  # a claim that waits fails at once
        tx = holder.transaction()
        await tx.start()
        await holder.execute("select 1 from jobfeed.jobs where target = 'held-a-1' for update")
        rows = await claim(claimer, 5, T0, kinds=["held"])
        assert [str(r["target"]) for r in rows] == ["held-a-2"]  # the key's next job, its one slot used
        await tx.rollback()
    finally:
        await holder.close()
        await claimer.close()


async def test_a_start_that_waited_for_its_turn_never_precedes_the_end_it_follows(pool, queue, dsn):
    """A capped claim waits for the kind's lock; the slot it takes may have been
    freed by a completion that began after the claim's transaction did. Its
    start (and the rate's record of it) is then still after that end, so the
    attempts never seem to overlap."""
    from jobfeed.worker import db

    await queue.register_kind("turns", max_attempts=3, lease=60, backoff=(1,), max_running=1, rate=(100, 60.0))
    await pool.execute("""insert into jobfeed.jobs (kind, target, run_after)
                          select 'turns', 'turns-' || g, now() - interval '1 minute' from generate_series(1, 2) g""")
    (first,) = await pool.fetch("select * from jobfeed.claim_v3('{turns}', 5, 'w1', null)")
    holder, claimer = await db.connect(dsn), await db.connect(dsn)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("select jobfeed.limits_lock('turns')")
        waiting = asyncio.ensure_future(claimer.fetch("select * from jobfeed.claim_v3('{turns}', 5, 'w2', null)"))
        await asyncio.sleep(0.2)
        assert not waiting.done()  # its transaction has begun; it waits for its turn
        assert await pool.fetchval("select jobfeed.complete($1, $2, '{}')", first["id"], first["generation"])
        await tx.commit()
        (second,) = await asyncio.wait_for(waiting, 10)
    finally:
        await holder.close()
        await claimer.close()
    ended = await pool.fetchval("select finished_at from jobfeed.jobs where id = $1", first["id"])
    started = await pool.fetchval("select claimed_at from jobfeed.jobs where id = $1", second["id"])
    assert started >= ended
    assert await pool.fetchval("select max(at) from jobfeed.kind_starts where kind = 'turns'") == started


async def test_limits_never_fail_jobs_and_unlimited_kinds_are_untouched(pool, queue, k):
    await queue.register_kind("capped", max_attempts=1, lease=60, backoff=(1,), max_running=1)
    await plant(pool, "capped", 3)
    await plant(pool, "k", 3)
    rows = await claim(pool, 10, T0, kinds=["capped", "k"])
    assert sorted(r["kind"] for r in rows) == ["capped", "k", "k", "k"]
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'capped' and state = 'queued'") == 2


async def test_rate_limit_with_controlled_time(pool, queue):
    await queue.register_kind("rated", max_attempts=3, lease=3600, backoff=(1,), rate=(5, 60.0))
    await plant(pool, "rated", 12)
    minute = dt.timedelta(minutes=1)
    assert len(await claim(pool, 10, T0, kinds=["rated"])) == 5
    assert await claim(pool, 10, T0 + minute / 2, kinds=["rated"]) == []
    assert len(await claim(pool, 3, T0 + minute + dt.timedelta(seconds=1), kinds=["rated"])) == 3
    assert len(await claim(pool, 10, T0 + minute + dt.timedelta(seconds=2), kinds=["rated"])) == 2
    # the rest wait, queued, never failed
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'rated' and state = 'queued'") == 2
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'failed'") == 0


async def test_rate_limit_across_racing_claimers(pool, queue):
    await queue.register_kind("rated", max_attempts=3, lease=60, backoff=(1,), rate=(7, 60.0))
    await plant(pool, "rated", 40)
    got = await asyncio.gather(*(claim(pool, 3, T0, kinds=["rated"], worker=f"w{n}") for n in range(CLAIMERS)))
    assert sum(len(g) for g in got) == 7


async def test_claimers_of_two_limited_kinds_in_opposite_orders_do_not_deadlock(pool, queue):
    for kind in ("x", "y"):
        await queue.register_kind(kind, max_attempts=3, lease=60, backoff=(1,), max_running=50)
        await plant(pool, kind, 100)
    orders = [["x", "y"], ["y", "x"]] * (CLAIMERS // 2)
    got = await asyncio.gather(*(claim(pool, 4, T0, kinds=o, worker=f"w{n}") for n, o in enumerate(orders)))
    assert sum(len(g) for g in got) == 4 * CLAIMERS


def test_task_flow_settings_are_checked_at_registration():
    import pytest

    from jobfeed.worker.tasks import Registry, parse_rate

    assert parse_rate("100/1m") == (100, 60.0) and parse_rate("5/1s") == (5, 1.0)
    assert parse_rate("5/s") == (5, 1.0) and parse_rate("100/m") == (100, 60.0)  # a bare unit is one of it
    for bad in ("100", "x/1m", "0/1m", "5/soon", "5/0s", "5/", "5/-1s"):
        with pytest.raises(ValueError):
            parse_rate(bad)
    reg = Registry()
    for kwargs in ({"max_running": 0}, {"max_running_per_key": -1}, {"priority": "high"}, {"rate": "lots"}):
        with pytest.raises(ValueError):
            reg.task("bad", **kwargs)
    reg.task("fine", priority=3, max_running=2, max_running_per_key=1, rate="10/1m")(_noop)
    spec = reg.get("fine")
    assert (spec.priority, spec.max_running, spec.max_running_per_key, spec.rate) == (3, 2, 1, (10, 60.0))
