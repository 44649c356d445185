"""Pause and resume a kind; bulk retry and cancel. Over SQL, HTTP and the CLI."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from jobfeed.api.app import create_app
from queue_sql import ATTEMPTS, claim
from servers import ADMIN_TOKEN, asgi_client, make_settings
from test_cli import jobfeed

BEARER = {"authorization": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
async def client(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as c:
        yield c


async def kinds(client) -> dict:
    return {k["kind"]: k for k in (await client.get("/api/kinds")).json()["kinds"]}


async def test_pause_takes_submissions_claims_nothing_and_survives_registration(client, queue, pool):
    r = await client.post("/api/jobs", json={"kind": "demo", "target": "running"})
    (running,) = await queue.claim(["demo"], 1, "w")
    r = await client.post("/api/admin/kinds/demo/pause", headers=BEARER)
    assert r.status_code == 200 and r.json()["paused"] is True and r.json()["kind"] == "demo"
    assert (await kinds(client))["demo"]["paused"] is True

    r = await client.post("/api/jobs", json={"kind": "demo", "target": "waits"})
    assert r.status_code == 201
    assert await queue.claim(["demo"], 5, "w") == []
    assert await queue.next_due(["demo"]) is None  # workers sleep instead of spinning
    # a running job finishes; an expired lease is not reclaimed while paused
    assert await queue.complete(running.id, running.generation, {"ok": 1})
    assert await claim(pool, 5, dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1), kinds=["demo"]) == []

    # a worker registering the kind (a restart) leaves the flag alone
    await queue.register_kind("demo", max_attempts=4, lease=2, backoff=(1,), priority=1, overwrite=True)
    assert (await kinds(client))["demo"]["paused"] is True

    r = await client.post("/api/admin/kinds/demo/resume", headers=BEARER)
    assert r.status_code == 200 and r.json()["paused"] is False
    assert [j.target for j in await queue.claim(["demo"], 5, "w")] == ["waits"]


async def test_pause_unknown_kind_and_auth(client):
    r = await client.post("/api/admin/kinds/nope/pause", headers=BEARER)
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
    assert (await client.post("/api/admin/kinds/demo/pause")).status_code == 401
    assert (await kinds(client))["demo"]["paused"] is False


async def test_cli_pause_resume(dsn, pool):
    r = jobfeed(dsn, "submit", "demo", "t")  # registers demo
    assert r.returncode == 0, r.stderr
    r = jobfeed(dsn, "pause", "demo")
    assert r.returncode == 0, r.stderr
    assert await pool.fetchval("select paused from jobfeed.kinds where kind = 'demo'") is True
    r = jobfeed(dsn, "resume", "demo")
    assert r.returncode == 0, r.stderr
    assert await pool.fetchval("select paused from jobfeed.kinds where kind = 'demo'") is False
    for command in ("pause", "resume"):  # not found: exit 1 (README, "Commands")
        r = jobfeed(dsn, command, "nope")
        assert r.returncode == 1 and "not_found" in r.stderr


# ---------------------------------------------------------------- bulk

async def plant(pool, n: int, state: str, kind: str = "demo", code: str | None = None) -> list[uuid.UUID]:
    rows = await pool.fetch("""
        insert into jobfeed.jobs (kind, target, state, last_error_code, finished_at, generation)
        select $1, $2 || g, $3::jobfeed.job_state, $4,
               case when $3 in ('failed', 'canceled', 'completed') then now() end,
               case when $3 = 'queued' then 0 else 1 end
          from generate_series(1, $5) g returning id""", kind, f"{state}-{code}-", state, code, n)
    return [r["id"] for r in rows]


async def states(pool) -> dict:
    return {(r["state"], r["last_error_code"]): r["n"] for r in await pool.fetch(
        "select state::text, last_error_code, count(*) as n from jobfeed.jobs group by 1, 2")}


async def test_bulk_retry_by_filter_in_batches_and_safe_to_repeat(client, queue, pool):
    await plant(pool, 7, "failed", code="http_500")
    await plant(pool, 3, "failed", code="http_404")
    await plant(pool, 2, "completed")
    # small batches: the loop must go on until a batch comes back short
    assert await queue.bulk("retry", error_code="http_500", batch=3) == 7
    assert await queue.bulk("retry", error_code="http_500", batch=3) == 0
    r = await client.post("/api/admin/jobs/retry", json={"state": "failed", "kind": "demo"}, headers=BEARER)
    assert r.status_code == 200 and r.json() == {"count": 3}
    assert await states(pool) == {("queued", "http_500"): 7, ("queued", "http_404"): 3, ("completed", None): 2}


async def test_bulk_retry_skips_a_target_held_again(queue, pool):
    # its kind registered here: no app of this test registered it (run after
    # another file's tests on the same database, none had either)
    await queue.register_kind("demo", max_attempts=5, lease=300, backoff=(60,))
    (old,) = await plant(pool, 1, "failed", code="x")
    target = await pool.fetchval("select target from jobfeed.jobs where id = $1", old)
    await queue.submit("demo", target)
    assert await queue.bulk("retry", ids=[old]) == 0
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", old) == "failed"


async def test_bulk_retry_over_http_says_how_many_it_skipped(client, queue, pool):
    """The dashboard confirmed every failed job and then reported fewer retried,
    with no word of the rest: the answer counts the jobs the retry left alone."""
    held, free = await plant(pool, 2, "failed", code="x")
    target = await pool.fetchval("select target from jobfeed.jobs where id = $1", held)
    await queue.submit("demo", target)
    r = await client.post("/api/admin/jobs/retry", json={"ids": [str(held), str(free)]}, headers=BEARER)
    assert r.status_code == 200 and r.json() == {"count": 1, "skipped": 1}
    # nothing left to retry but the held one: still skipped, and said so again
    r = await client.post("/api/admin/jobs/retry", json={"state": "failed"}, headers=BEARER)
    assert r.json() == {"count": 0, "skipped": 1}


async def test_bulk_cancel_queued_and_running(client, queue, pool):
    ids = await plant(pool, 5, "queued")
    await plant(pool, 2, "completed")
    (running,) = await queue.claim(["demo"], 1, "w")
    queued = [str(i) for i in ids if i != running.id]
    r = await client.post("/api/admin/jobs/cancel", json={"ids": queued}, headers=BEARER)
    assert r.json() == {"count": 4}
    r = await client.post("/api/admin/jobs/cancel", json={"kind": "demo"}, headers=BEARER)
    assert r.json() == {"count": 1}  # the running one
    assert not await queue.extend_many([(running.id, running.generation)]) == set()  # its lease is lost
    log = await pool.fetchval(f"select outcome from {ATTEMPTS} a where job_id = $1", running.id)
    assert log == "canceled"
    assert (await client.post("/api/admin/jobs/cancel", json={"kind": "demo"}, headers=BEARER)).json() == \
        {"count": 0}


@pytest.mark.parametrize("body, code", [
    ({}, "filter_required"),
    ({"state": None, "kind": None}, "filter_required"),
    ({"ids": []}, "filter_required"),  # names no job
    ({"ids": [], "state": None}, "filter_required"),
    ({"state": "sleeping"}, "invalid_request"),
    ({"ids": ["not-an-id"]}, "invalid_request"),
    ({"ids": "x"}, "invalid_request"),
    ({"kind": 5}, "invalid_request"),
    ({"colour": "red"}, "invalid_request"),
    ({"kind": "\ud800"}, "invalid_request"),  # a lone surrogate: no text PostgreSQL can hold
    ({"error_code": "\udc00"}, "invalid_request"),
    ({"colour\ud800": 1}, "invalid_request"),
])
async def test_bulk_bad_filters_change_nothing(client, pool, body, code):
    await plant(pool, 2, "failed", code="x")
    await plant(pool, 2, "queued")
    before = await states(pool)
    for action in ("retry", "cancel"):
        # json.dumps spells a lone surrogate as \ud800, as a browser's JSON.stringify does
        r = await client.post(f"/api/admin/jobs/{action}", content=json.dumps(body),
                              headers={**BEARER, "content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"]["code"] == code, r.text
    assert await states(pool) == before


async def test_bulk_without_a_body_is_the_empty_filter(client, pool):
    # every field is optional: no body at all names nothing, as {} does
    await plant(pool, 2, "failed", code="x")
    before = await states(pool)
    for action in ("retry", "cancel"):
        r = await client.post(f"/api/admin/jobs/{action}", headers=BEARER)
        assert r.status_code == 422 and r.json()["error"]["code"] == "filter_required", r.text
    assert await states(pool) == before


async def test_an_empty_id_list_beside_a_filter_matches_nothing(client, pool):
    # alone it is the empty filter (below); beside a kind it must not widen to
    # the whole kind (a dashboard's empty selection): all given must match
    await plant(pool, 2, "failed", code="x")
    await plant(pool, 2, "queued")
    before = await states(pool)
    for action in ("retry", "cancel"):
        r = await client.post(f"/api/admin/jobs/{action}", json={"ids": [], "kind": "demo"}, headers=BEARER)
        assert r.status_code == 200 and r.json() == {"count": 0}, r.text
    assert await states(pool) == before


@pytest.mark.parametrize("ids", [None, []])
async def test_bulk_sql_refuses_an_empty_filter(pool, ids):
    import asyncpg
    for action in ("cancel", "retry"):
        with pytest.raises(asyncpg.PostgresError) as err:
            await pool.fetch(f"select * from jobfeed.bulk_{action}(null, null, null, $1::uuid[])", ids)
        assert err.value.hint == "filter_required"
