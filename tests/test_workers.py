"""jobfeed.workers: a worker's beat, lost after two silent leases, gone when it
stops, and rows unseen for a day dropped when a new worker starts."""

from __future__ import annotations

import datetime as dt
import json

T0 = dt.datetime(2026, 12, 1, 3, 0, tzinfo=dt.timezone.utc)


async def beat(pool, worker_id: str, at: dt.datetime, running: int = 0, lease: float = 30) -> None:
    await pool.execute("select jobfeed.worker_beat($1, 'host-a', array['k', 'm'], 4, $2, $3, $4)",
                       worker_id, running, dt.timedelta(seconds=lease), at)


async def listed(pool, at: dt.datetime) -> dict[str, dict]:
    return {w["id"]: w for w in json.loads(await pool.fetchval("select jobfeed.list_workers($1)::text", at))}


async def test_a_worker_is_lost_after_two_silent_leases(pool):
    await beat(pool, "w1", T0, running=2)
    await beat(pool, "w1", T0 + dt.timedelta(seconds=10), running=3)
    now = await listed(pool, T0 + dt.timedelta(seconds=69))
    assert now["w1"]["running"] == 3 and now["w1"]["kinds"] == ["k", "m"] and now["w1"]["concurrency"] == 4
    assert now["w1"]["lost"] is False
    assert (await listed(pool, T0 + dt.timedelta(seconds=71)))["w1"]["lost"] is True
    assert await listed(pool, T0 + dt.timedelta(hours=2)) == {}  # not shown after an hour


async def test_a_stopped_worker_leaves_and_a_new_one_prunes_the_long_gone(pool):
    await beat(pool, "old", T0)
    await beat(pool, "w1", T0)
    await pool.execute("select jobfeed.worker_stopped('w1')")
    assert set(await listed(pool, T0)) == {"old"}
    await beat(pool, "w2", T0 + dt.timedelta(hours=23))
    assert await pool.fetchval("select count(*) from jobfeed.workers") == 2
    await beat(pool, "w3", T0 + dt.timedelta(days=1, seconds=1))
    assert {r["id"] for r in await pool.fetch("select id from jobfeed.workers")} == {"w2", "w3"}
