"""submit_quick: a new target in one SQL statement; everything else is
submit_v2's. Same answers, errors and notifications as submit_v2, the view only
when asked for."""

from __future__ import annotations

import asyncio
import json

import asyncpg
import pytest

from jobfeed.worker import db

from queue_sql import T0, jobs_pages, pages_of, register

QUICK = "select * from jobfeed.submit_quick($1, $2, $3::jsonb, null, 65536, $4, null, null, $5)"


@pytest.fixture
async def k(pool):
    await register(pool, "k", lease="1 hour")
    return "k"


async def test_a_new_target_is_created_with_its_view_only_when_asked(pool, k):
    made = await pool.fetchrow(QUICK, "k", "a", '{"n": 1}', T0, True)
    assert made["created"] is True
    assert json.loads(made["view"]) == json.loads(await pool.fetchval(
        "select jobfeed.public_view(j)::text from jobfeed.jobs j where j.id = $1", made["id"]))
    quiet = await pool.fetchrow(QUICK, "k", "b", None, T0, False)
    assert quiet["created"] is True and quiet["view"] is None
    row = await pool.fetchrow("select * from jobfeed.jobs where id = $1", quiet["id"])
    assert (row["state"], row["payload"], row["max_attempts"], row["created_at"]) == ("queued", "{}", 5, T0)


async def test_a_held_target_is_shared(pool, k):
    first = await pool.fetchrow(QUICK, "k", "a", "{}", T0, False)
    again = await pool.fetchrow(QUICK, "k", "a", '{"other": 1}', T0, True)
    assert (again["id"], again["created"]) == (first["id"], False)
    assert json.loads(again["view"])["id"] == str(first["id"])
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1
    # a finished holder is not shared: a new job
    await pool.execute("update jobfeed.jobs set state = 'completed', finished_at = now()")
    third = await pool.fetchrow(QUICK, "k", "a", "{}", T0, False)
    assert third["created"] is True and third["id"] != first["id"]


@pytest.mark.parametrize("kind, target, payload, code", [
    ("nope", "a", "{}", "unknown_kind"),
    ("k", "", "{}", "invalid_target"),
    ("k", "a", "[1]", "invalid_payload"),
    ("k", "a", json.dumps({"x": "y" * 70000}), "payload_too_large"),
])
async def test_bad_submissions_raise_as_submit_does_and_change_nothing(pool, k, kind, target, payload, code):
    with pytest.raises(asyncpg.PostgresError) as err:
        await pool.fetchrow(QUICK, kind, target, payload, T0, False)
    assert err.value.hint == code
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


async def test_a_new_job_is_announced_once_on_each_channel(pool, dsn, k):
    heard: list[tuple[str, str]] = []
    listener = await asyncpg.connect(dsn)
    try:
        for channel in ("jobfeed_changed", "jobfeed_due"):
            await listener.add_listener(channel, lambda _c, _p, ch, payload: heard.append((ch, payload)))
        made = await pool.fetchrow(QUICK, "k", "a", "{}", T0, False)
        await pool.fetchrow(QUICK, "k", "a", "{}", T0, False)  # shared: nothing changed
        for _ in range(100):
            if len(heard) >= 2:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.1)
    finally:
        await listener.close()
    by: dict[str, list[str]] = {}
    for channel, payload in heard:
        by.setdefault(channel, []).append(payload)
    assert by["jobfeed_changed"] == [f"{made['id']}:1"]
    [due] = by["jobfeed_due"]
    count, _offset, kind = due.split(":")
    assert (count, kind) == ("1", "k")


async def test_a_connection_plans_it_once(pool):
    """One generic plan from a connection's first call: under the default plan
    cache mode each of its first six calls planned the statement again, which
    costs more than running it (a short-lived producer's every submit)."""
    config = await pool.fetchval("select proconfig from pg_proc where oid = 'jobfeed.submit_quick'::regproc")
    assert "plan_cache_mode=force_generic_plan" in config


async def test_its_plans_made_on_an_empty_table_stay_index_probes_as_it_grows(pool, dsn, k):
    """The plans a connection makes at its first calls, here on an empty table
    (no ANALYZE yet, as in a fresh install's first hours), are kept while the
    table grows: a new target and a held one (submit_v2's plans, made under
    the same mode) must still probe indexes, not read every job."""
    conn = await db.connect(dsn)
    try:
        await conn.fetchrow(QUICK, "k", "first", "{}", T0, False)
        await conn.fetchrow(QUICK, "k", "first", "{}", T0, False)  # held: submit_v2's plans
        await pool.execute("""insert into jobfeed.jobs (kind, target, payload, max_attempts)
                              select 'k', 'p' || g, '{}', 5 from generate_series(1, 60000) g""")
        making = await pages_of(conn, QUICK, "k", "new", "{}", T0, False)
        joining = await pages_of(conn, QUICK, "k", "p30000", "{}", T0, False)
    finally:
        await conn.close()
    full = await jobs_pages(pool)
    assert making < full / 4 and joining < full / 4, (making, joining, full)
