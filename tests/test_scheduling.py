"""Scheduling: run_at / delay and the public scheduled_for, priorities, over
SQL, HTTP and the command line. Time is a parameter (p_now), never slept."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from jobfeed.api.app import create_app
from queue_sql import claim
from servers import asgi_client, make_settings
from test_cli import jobfeed


@pytest.fixture
async def client(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as c:
        yield c


def rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def parse(text: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text)


async def test_run_at_waits_and_shows_scheduled_for_until_the_first_start(client, pool, queue):
    now = dt.datetime.now(dt.timezone.utc)
    at = (now + dt.timedelta(hours=2)).replace(microsecond=0)
    r = await client.post("/api/jobs", json={"kind": "demo", "target": "later", "run_at": rfc3339(at)})
    assert r.status_code == 201, r.text
    view = r.json()
    assert parse(view["scheduled_for"]) == at and view["status"] == "queued"
    # Not claimable before its time; workers sleep until it.
    assert await claim(pool, 5, now + dt.timedelta(hours=1), kinds=["demo"]) == []
    assert abs(await queue.next_due(["demo"]) - 7200) < 60

    # A duplicate joins the scheduled job and does not move it.
    again = await client.post("/api/jobs", json={"kind": "demo", "target": "later"})
    assert again.status_code == 200 and again.json()["id"] == view["id"]
    assert parse(again.json()["scheduled_for"]) == at

    (row,) = await claim(pool, 5, at + dt.timedelta(seconds=1), kinds=["demo"])
    assert str(row["id"]) == view["id"]
    started = (await client.get(f"/api/jobs/{view['id']}")).json()
    assert started["status"] == "processing" and started["scheduled_for"] is None
    # A retry's delay stays private: due (4 h from now) after the start was
    # recorded (planted 2 h from now), it would otherwise look scheduled.
    assert await queue.fail_transient(row["id"], row["generation"], "boom", "x", retry_after=4 * 3600)
    retried = (await client.get(f"/api/jobs/{view['id']}")).json()
    assert retried["status"] == "processing" and retried["scheduled_for"] is None


async def test_scheduled_for_is_null_once_the_job_is_due(client, pool):
    """The contract: scheduled_for is null when the job is due now, though no
    write happened since it was submitted for later (time is planted: the
    submission an hour ago for a time a second ago)."""
    r = await client.post("/api/jobs", json={"kind": "demo", "target": "soon", "delay": "2h"})
    view = r.json()
    assert r.status_code == 201 and view["scheduled_for"] is not None
    await pool.execute("update jobfeed.jobs set created_at = now() - interval '1 hour', "
                       "updated_at = now() - interval '1 hour', run_after = now() - interval '1 second' "
                       "where id = $1", uuid.UUID(view["id"]))
    due = (await client.get(f"/api/jobs/{view['id']}")).json()
    assert due["scheduled_for"] is None and due["position"] == 0 and due["version"] == view["version"]


async def test_delay_and_past_run_at(client, pool):
    before = dt.datetime.now(dt.timezone.utc)
    # a duration, or seconds as a number (as signal_timeout takes them)
    for target, delay in (("d", "90s"), ("d-seconds", 90)):
        r = await client.post("/api/jobs", json={"kind": "demo", "target": target, "delay": delay})
        assert r.status_code == 201, r.text
        due = parse(r.json()["scheduled_for"])
        assert before + dt.timedelta(seconds=89) <= due <= dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=91)
    # a refusal says what it wants
    for delay in (True, {"s": 5}, [90]):
        r = await client.post("/api/jobs", json={"kind": "demo", "target": "bad", "delay": delay})
        assert r.status_code == 422 and 'such as "90s"' in r.json()["error"]["message"], r.text
    r = await client.post("/api/jobs", json={"kind": "demo", "target": "bad", "priority": 10**12})
    assert r.status_code == 422 and "from -2147483647 to 2147483647" in r.json()["error"]["message"], r.text
    # A time already past (or a zero delay) is "now": nothing is shown as
    # scheduled, and the job queues behind those submitted before it (a past
    # time, even at the start of the date range, does not jump the queue).
    first = await client.post("/api/jobs", json={"kind": "demo", "target": "first"})
    bodies = ({"run_at": "2020-01-01T00:00:00+02:00"}, {"run_at": "0001-01-01T00:00:00+01:00"}, {"delay": "0s"})
    for body in bodies:
        r = await client.post("/api/jobs", json={"kind": "demo", "target": json.dumps(body), **body})
        assert r.status_code == 201 and r.json()["scheduled_for"] is None, r.text
    rows = await claim(pool, 1, dt.datetime.now(dt.timezone.utc), kinds=["demo"])
    assert [str(r["id"]) for r in rows] == [first.json()["id"]]
    rows = await claim(pool, 5, dt.datetime.now(dt.timezone.utc), kinds=["demo"])
    assert sorted(r["target"] for r in rows) == sorted(json.dumps(b) for b in bodies)


async def test_submit_many_with_run_at_priority_and_key(queue, pool):
    await queue.register_kind("k2", max_attempts=3, lease=60, backoff=(1,), priority=4)
    at = dt.datetime(2031, 1, 1, tzinfo=dt.timezone.utc)
    made = await queue.submit_many("k2", [("a", None), ("b", None)], run_after=at, concurrency_key="tenant-1")
    one, _ = await queue.submit("k2", "c", priority=-1)
    rows = await pool.fetch("select target, run_after, priority, concurrency_key from jobfeed.jobs order by target")
    assert [(r["target"], r["run_after"] == at, r["priority"], r["concurrency_key"]) for r in rows] == [
        ("a", True, 4, "tenant-1"), ("b", True, 4, "tenant-1"), ("c", False, -1, None)]
    assert len(made) == 2 and one


async def test_cli_at_delay_priority_key(dsn, pool):
    at = "2031-06-01T12:00:00Z"
    r = jobfeed(dsn, "submit", "demo", "t-at", "--at", at, "--priority", "7", "--key", "tenant-9", "--json")
    assert r.returncode == 0, r.stderr
    assert parse(json.loads(r.stdout)["scheduled_for"]) == parse(at)
    r = jobfeed(dsn, "submit", "demo", "t-delay", "--delay", "5m")
    assert r.returncode == 0, r.stderr
    row = await pool.fetchrow("select priority, concurrency_key, run_after from jobfeed.jobs where target = 't-at'")
    assert (row["priority"], row["concurrency_key"], row["run_after"]) == (7, "tenant-9", parse(at))
    delayed = await pool.fetchval("select run_after - created_at from jobfeed.jobs where id = $1",
                                  uuid.UUID(r.stdout.strip()))
    assert dt.timedelta(minutes=4) < delayed <= dt.timedelta(minutes=5, seconds=5)
    bad = jobfeed(dsn, "submit", "demo", "t-bad", "--at", "noon")
    assert bad.returncode == 2 and "invalid_run_at" in bad.stderr
    assert await pool.fetchval("select count(*) from jobfeed.jobs where target = 't-bad'") == 0


# ---------------------------------------------------------------- priorities

async def test_higher_priority_first_then_earlier_run_after(pool, queue):
    await queue.register_kind("p", max_attempts=3, lease=60, backoff=(1,), priority=2)
    t0 = dt.datetime(2030, 1, 1, tzinfo=dt.timezone.utc)
    sec = dt.timedelta(seconds=1)
    plan = [("low", -1, t0), ("default-late", None, t0 + 2 * sec), ("default-early", None, t0 + sec),
            ("high-late", 9, t0 + 3 * sec), ("high-early", 9, t0 + 2 * sec), ("high-future", 99, t0 + 3600 * sec)]
    for target, priority, at in plan:
        await queue.submit("p", target, run_after=at, priority=priority)
    order = []
    while rows := await claim(pool, 1, t0 + 10 * sec, kinds=["p"]):
        order.append(rows[0]["target"])
    assert order == ["high-early", "high-late", "default-early", "default-late", "low"]
    # the kind's default (2) was applied where the submission named none
    assert await pool.fetchval("select priority from jobfeed.jobs where target = 'default-late'") == 2


async def _claim_plans(pool, now: dt.datetime, calls: int = 7) -> list[str]:
    """The plans of the claim's pick over `calls` claims of 10 (past the 5
    custom plans a cached statement gets before a generic one), shown by
    auto_explain inside the function."""
    plans: list[str] = []
    async with pool.acquire() as conn:
        def collect(_conn, msg):
            plans.append(msg.message)
        conn.add_log_listener(collect)
        for setting in ("load 'auto_explain'", "set auto_explain.log_min_duration = 0",
                        "set auto_explain.log_nested_statements = on", "set client_min_messages = log"):
            await conn.execute(setting)
        for _ in range(calls):
            rows = await conn.fetch("select * from jobfeed.claim(array['k'], 10, 'w', null, $1)", now)
            assert len(rows) == 10
        await conn.execute("reset client_min_messages")
        conn.remove_log_listener(collect)
    picks = [p for p in plans if "q.run_after <= v_now" in p or "q.priority desc" in p]
    assert len(picks) >= calls, plans[:3]
    return picks


def _ordered_scan(plan: str) -> bool:
    body = plan.split("Query Text")[-1].split("\n", 1)[-1]
    return "jobs_queued_priority" in plan and "Seq Scan" not in plan and "Sort" not in body


async def test_claim_uses_an_index_at_a_depth_of_1m(pool, k):
    """pgqueuer-style plan regression: with a million queued jobs of mixed
    priorities and times, the claim's selection is an index scan that stops at
    the limit, never a scan of the table or a sort of the due jobs. The plans
    are the function's own statements, shown by auto_explain."""
    await pool.execute("""
        insert into jobfeed.jobs (id, kind, target, priority, run_after, created_at, updated_at)
        select ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'k', lpad(g::text, 7, '0'),
               3 - g / 142858, timestamptz '2030-01-01' + g * interval '50 ms', now(), now()
          from generate_series(1, 1000000) g""")
    # (keys rising with g, so each index grows at one edge: a fast plant)
    await pool.execute("analyze jobfeed.jobs")
    for plan in await _claim_plans(pool, dt.datetime(2030, 1, 1, 12, tzinfo=dt.timezone.utc)):
        assert _ordered_scan(plan), plan
    # and it claimed the highest priority (3) only
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'running' and priority <> 3") == 0


async def test_claim_uses_the_queued_index_over_a_long_history(pool, k):
    """A table of finished jobs, analyzed (as autovacuum does over a week of
    history), then a backlog queued since: the statistics say no job is
    queued, and the claim's pick was planned as a walk of the dedupe index
    over every unfinished job, filtered and sorted. It must stay the ordered
    scan of jobs_queued_priority that stops at its limit."""
    await pool.execute("""
        insert into jobfeed.jobs (id, kind, target, state, attempts, generation, run_after, created_at,
                                  updated_at, finished_at)
        select ('00000000-0000-7000-8000-' || lpad(to_hex(g), 12, '0'))::uuid, 'k', 'h' || g, 'completed', 1, 1,
               timestamptz '2029-12-01' + g * interval '1 ms', now(), now(), timestamptz '2029-12-01'
          from generate_series(1, 200000) g""")
    await pool.execute("analyze jobfeed.jobs")
    await pool.execute("""
        insert into jobfeed.jobs (kind, target, priority, run_after, created_at, updated_at)
        select 'k', 'q' || g, g % 3, timestamptz '2030-01-01' + g * interval '1 ms', now(), now()
          from generate_series(1, 5000) g""")
    for plan in await _claim_plans(pool, dt.datetime(2030, 1, 1, 12, tzinfo=dt.timezone.utc)):
        assert _ordered_scan(plan), plan
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'running' and priority <> 2") == 0
