"""Periodic jobs: slots from cron (with time zones) or every=, one job per slot
however many schedulers race, only the latest missed slot after an outage,
and `jobfeed schedules`."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest

from jobfeed.worker import schedules
from jobfeed.worker.schedules import Periodic, periodic
from test_cli import jobfeed

UTC = dt.timezone.utc
T0 = dt.datetime(2026, 12, 1, 1, 30, tzinfo=UTC)


def test_slots_from_cron_in_a_time_zone_and_from_every():
    paris = Periodic("nightly", schedule="0 3 * * *", timezone="Europe/Paris")
    assert paris.latest(dt.datetime(2026, 12, 1, 2, 0, tzinfo=UTC)) == dt.datetime(2026, 12, 1, 2, 0, tzinfo=UTC)
    assert paris.latest(dt.datetime(2026, 12, 1, 1, 59, tzinfo=UTC)) == dt.datetime(2026, 11, 30, 2, 0, tzinfo=UTC)
    assert paris.next(dt.datetime(2026, 12, 1, 2, 0, tzinfo=UTC)) == dt.datetime(2026, 12, 2, 2, 0, tzinfo=UTC)
    # summer time: 03:00 in Paris is 01:00 UTC
    assert paris.next(dt.datetime(2026, 7, 1, tzinfo=UTC)) == dt.datetime(2026, 7, 1, 1, 0, tzinfo=UTC)
    five = Periodic("tick", every=300)
    assert five.latest(T0 + dt.timedelta(seconds=299)) == T0 and five.next(T0) == T0 + dt.timedelta(minutes=5)


@pytest.mark.parametrize("zone, schedule, night", [
    ("Europe/Paris", "*/30 * * * *", dt.datetime(2027, 10, 30, 22, tzinfo=UTC)),  # clocks back at 01:00Z
    ("Europe/Paris", "0 * * * *", dt.datetime(2027, 10, 30, 22, tzinfo=UTC)),
    ("Europe/Paris", "30 2 * * *", dt.datetime(2027, 10, 30, 22, tzinfo=UTC)),
    ("Europe/Paris", "30 2 * * *", dt.datetime(2027, 3, 27, 22, tzinfo=UTC)),  # forward: 02:30 does not exist
    ("America/New_York", "*/30 * * * *", dt.datetime(2027, 11, 7, 3, tzinfo=UTC)),
    ("Australia/Lord_Howe", "0 * * * *", dt.datetime(2027, 4, 3, 12, tzinfo=UTC)),  # a half-hour shift
])
def test_the_latest_slot_is_right_through_a_clock_change(zone, schedule, night):
    """Minute by minute through the night, latest() is the last slot cronsim's
    own forward walk reaches at or before that minute, and next() the first
    after it: no slot skipped in the hour the clock goes back through twice,
    none run twice, none earlier than one already run."""
    from cronsim import CronSim
    from zoneinfo import ZoneInfo
    p = Periodic("k", schedule=schedule, timezone=zone)
    walk = CronSim(schedule, (night - dt.timedelta(days=2)).astimezone(ZoneInfo(zone)))
    slots = []
    while not slots or slots[-1] < night + dt.timedelta(hours=8):
        slots.append(next(walk).astimezone(UTC))
    for minute in range(0, 6 * 60):
        now = night + dt.timedelta(minutes=minute, seconds=17)
        assert p.latest(now) == max(s for s in slots if s <= now), now
        assert p.next(now) == min(s for s in slots if s > now), now


@pytest.mark.parametrize("args", [
    dict(schedule="61 * * * *", timezone=None, every=None), dict(schedule="0 3 * * *", timezone="Mars/Base", every=None),
    dict(schedule="0 3 * * *", timezone=None, every=60.0), dict(schedule=None, timezone="UTC", every=None),
    dict(schedule=None, timezone=None, every=0.0), dict(schedule=None, timezone=None, every=0.5),
    dict(schedule=None, timezone=None, every=90.5), dict(schedule=None, timezone="Europe/Paris", every=60.0)])
def test_bad_schedules_are_refused_when_declared(args):
    with pytest.raises(ValueError):
        periodic("k", **args)


@pytest.mark.parametrize("zone", ["", " ", "localtime", 5, b"UTC"])
def test_a_timezone_that_names_no_one_zone_is_refused_naming_the_task(zone):
    """Not UTC for "", nor each host's own zone for "localtime"; a non-string
    is refused as the other @task mistakes are, not as a TypeError."""
    with pytest.raises(ValueError, match=r"^@task\('k'\): timezone .* is not an IANA zone name"):
        periodic("k", schedule="0 3 * * *", timezone=zone, every=None)  # type: ignore[arg-type]


def test_every_takes_utc_as_its_timezone():
    """every= runs in UTC: saying so (the timezone's default) is no error."""
    p = periodic("k", schedule=None, timezone="UTC", every=300.0)
    assert p is not None and p.every == 300 and p.schedule is None


async def register(pool, kind: str, every: str = "1 hour", since: dt.datetime = T0) -> None:
    await pool.execute("select jobfeed.register_kind($1)", kind)
    await pool.execute("select jobfeed.register_schedule($1, null, 'UTC', $2::text::interval, $3)", kind, every, since)


async def test_one_job_per_slot_however_many_schedulers_race(pool, queue):
    await register(pool, "hourly")
    p = Periodic("hourly", every=3600)
    now = T0 + dt.timedelta(hours=1, minutes=1)
    made = await asyncio.gather(*(schedules.tick(queue, [p], now) for _ in range(8)))
    assert sum(len(m) for m in made) == 1
    (job,) = await pool.fetch("select id, target, run_after from jobfeed.jobs where kind = 'hourly'")
    assert job["target"] == "2026-12-01T02:00:00Z" and job["run_after"] == dt.datetime(2026, 12, 1, 2, tzinfo=UTC)
    # the slot's job finished: a repeat still makes none (the slot, not dedupe, decides)
    await pool.execute("update jobfeed.jobs set state = 'completed', finished_at = now() where id = $1", job["id"])
    assert await schedules.tick(queue, [p], now) == []
    assert await pool.fetchval("select job_id from jobfeed.schedule_slots where kind = 'hourly'") == job["id"]
    view = await queue.get_job(job["id"])
    assert view["scheduled_for"] is None  # a slot's job is due at once


async def test_a_job_submitted_for_a_slots_target_runs_at_the_slot(pool, queue):
    """Submitting the next slot's target by hand for a later time does not hold
    that slot back: the job is the slot's, due at the slot."""
    await register(pool, "hourly")
    p = Periodic("hourly", every=3600)
    now = T0 + dt.timedelta(hours=1, minutes=1)
    planted = (await queue.submit("hourly", "2026-12-01T02:00:00Z", {"from": "a user"},
                                  run_after=dt.datetime.now(UTC) + dt.timedelta(days=300))).id
    before = await queue.get_job(planted)
    assert before["scheduled_for"] is not None
    assert await schedules.tick(queue, [p], now) == [planted]
    row = await pool.fetchrow("select run_after, state::text from jobfeed.jobs where id = $1", planted)
    assert (row["run_after"], row["state"]) == (dt.datetime(2026, 12, 1, 2, tzinfo=UTC), "queued")
    after = await queue.get_job(planted)
    # a new version: a stream reconnecting with the old one hears of it
    assert after["scheduled_for"] is None and after["version"] == before["version"] + 1
    assert await pool.fetchval("select job_id from jobfeed.schedule_slots where kind = 'hourly'") == planted
    (claimed,) = await queue.claim(["hourly"], 5, "w")
    assert claimed.id == planted

    # one that waits for a signal: due at the slot once the signal is in, not at its own time
    waiting = (await queue.submit("hourly", "2026-12-01T03:00:00Z", await_signals=["go"],
                                  run_after=dt.datetime.now(UTC) + dt.timedelta(days=300))).id
    assert await schedules.tick(queue, [p], now + dt.timedelta(hours=1)) == [waiting]
    await queue.signal(waiting, "go")
    assert [j.id for j in await queue.claim(["hourly"], 5, "w")] == [waiting]


async def test_only_the_latest_missed_slot_runs_after_an_outage(pool, queue):
    await register(pool, "hourly")
    p = Periodic("hourly", every=3600)
    # every process was down from 02:00 to 05:10: slots 02:00, 03:00, 04:00, 05:00 came and went
    assert len(await schedules.tick(queue, [p], T0 + dt.timedelta(hours=3, minutes=40))) == 1
    assert [r["target"] for r in await pool.fetch("select target from jobfeed.jobs")] == ["2026-12-01T05:00:00Z"]
    # and a schedule never runs slots from before it was first registered
    late = Periodic("late", every=3600)
    await register(pool, "late", since=T0 + dt.timedelta(hours=10))
    assert await schedules.tick(queue, [late], T0 + dt.timedelta(hours=10, minutes=5)) == []
    # not even one that came a moment before (a worker starting just after a slot); one at that instant runs
    slot = dt.datetime(2026, 12, 1, 14, tzinfo=UTC)
    for since, runs in ((slot + dt.timedelta(milliseconds=400), False), (slot + dt.timedelta(hours=1), True)):
        kind = f"edge{int(runs)}"
        await register(pool, kind, since=since)
        made = await schedules.tick(queue, [Periodic(kind, every=3600)], since + dt.timedelta(seconds=1))
        assert len(made) == runs, (since, made)


async def test_jobfeed_schedules_lists_last_and_next(dsn, pool, queue):
    await register(pool, "hourly")
    await schedules.tick(queue, [Periodic("hourly", every=3600)], T0 + dt.timedelta(hours=1))
    r = jobfeed(dsn, "schedules", "--json")
    assert r.returncode == 0, r.stderr
    (row,) = [json.loads(line) for line in r.stdout.splitlines()]
    assert row["kind"] == "hourly" and row["every_seconds"] == 3600 and row["last_status"] == "queued"
    assert row["last_slot"] == "2026-12-01T02:00:00Z"  # as the slot's job's target writes it
    assert dt.datetime.fromisoformat(row["next_slot"]) > dt.datetime.now(UTC)
    text = jobfeed(dsn, "schedules")
    assert text.returncode == 0 and "hourly: every 3600s; last 2026-12-01T02:00:00Z (queued)" in text.stdout
    # no worker runs it: said, until one beats; a lost one (two leases silent) counts for nothing
    assert row["workers"] == 0 and "(no live worker runs it: no job comes until one does)" in text.stdout
    await pool.execute("select jobfeed.worker_beat('w-gone:1', 'h', array['hourly'], 4, 0, '1 second')")
    await pool.execute("update jobfeed.workers set last_seen = now() - interval '3 seconds'")
    await pool.execute("select jobfeed.worker_beat('w-other:1', 'h', array['other'], 4, 0, '1 minute')")
    assert [s["workers"] for s in await queue.list_schedules()] == [0]
    await pool.execute("select jobfeed.worker_beat('w-live:1', 'h', array['other', 'hourly'], 4, 0, '1 minute')")
    assert [s["workers"] for s in await queue.list_schedules()] == [1]
    assert "no live worker" not in jobfeed(dsn, "schedules").stdout
    await pool.execute("delete from jobfeed.jobs where kind = 'hourly'")  # as the sweeper would, once final
    text = jobfeed(dsn, "schedules")
    assert "last 2026-12-01T02:00:00Z (its job since deleted by the sweeper)" in text.stdout, text.stdout
    assert row["paused"] is False and "paused" not in text.stdout
    await pool.execute("select jobfeed.set_kind_paused('hourly', true)")  # an admin's pause
    (row,) = [json.loads(line) for line in jobfeed(dsn, "schedules", "--json").stdout.splitlines()]
    text = jobfeed(dsn, "schedules")
    assert row["paused"] is True and "(paused: its jobs wait)" in text.stdout, text.stdout


async def test_two_workers_run_each_slot_once(queue, pool, dsn):
    """Two runners with the same every=1s kind: each slot's job is made once
    and run once."""
    from jobfeed.worker.runner import Runner
    from jobfeed.worker.tasks import TaskSpec

    ran: list[str] = []

    async def handler(job, ctx):
        ran.append(job.target)

    spec = TaskSpec("beat", handler, max_attempts=3, lease=5.0, backoff=(0.05,), jitter=0.0,
                    periodic=Periodic("beat", every=1.0))
    await queue.register_kind("beat", max_attempts=3, lease=5.0, backoff=(0.05,))
    runners = [Runner(queue, dsn, [spec], poll_interval=0.2, grace=1.0) for _ in range(2)]
    tasks = [asyncio.create_task(r.run()) for r in runners]
    try:
        for _ in range(100):
            if await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'beat' and state = 'completed'") >= 2:
                break
            await asyncio.sleep(0.1)
    finally:
        for r in runners:
            r.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 10)
    slots = await pool.fetch("select slot, job_id from jobfeed.schedule_slots where kind = 'beat'")
    targets = [r["target"] for r in await pool.fetch("select target from jobfeed.jobs where kind = 'beat'")]
    assert len(slots) >= 2 and len(targets) == len(slots) == len(set(targets))
    assert len(ran) == len(set(ran)) >= 2


async def test_a_kind_whose_schedule_was_removed_is_no_longer_listed(pool, queue):
    """A worker running a kind that lost its schedule made no more slots, but
    `jobfeed schedules` still showed it, with a next slot that never came."""
    from jobfeed.worker import tasks
    from jobfeed.worker.tasks import TaskSpec

    async def handler(job, ctx):
        return None

    def spec(periodic):
        return TaskSpec("nightly", handler, max_attempts=3, lease=5.0, backoff=(0.05,), jitter=0.0, periodic=periodic)

    every = Periodic("nightly", every=3600)
    await tasks.register_kind(queue, spec(every), overwrite=True)
    await schedules.register(queue, [every])
    await tasks.register_kind(queue, spec(every), overwrite=True)  # a restart keeps it
    assert [s["kind"] for s in await queue.list_schedules()] == ["nightly"]
    await tasks.register_kind(queue, spec(None), overwrite=False)  # an API process: not its say
    assert [s["kind"] for s in await queue.list_schedules()] == ["nightly"]
    await tasks.register_kind(queue, spec(None), overwrite=True)
    assert await queue.list_schedules() == []
