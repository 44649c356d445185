"""The database goes away under a running API: its answers say so with a 503
(retry shortly), not a 500 that reads as a bug, and it serves again once the
database is back. The API reaches the test database through a TCP relay the
test shuts, as a network failure or a restarting server would."""

from __future__ import annotations

import asyncio
import contextlib
import uuid

import pytest

from jobfeed import create_pool
from jobfeed.api import health
from jobfeed.api.app import create_app
from jobfeed.worker import db
from migration_dbs import as_user
from relay import Relay
from servers import asgi_client, make_settings
from waiting import eventually


@pytest.mark.parametrize("over", ["tcp", "unix"])
async def test_a_lost_database_answers_503_and_the_api_recovers(dsn, tmp_path, over):
    relay = Relay(dsn, str(tmp_path) if over == "unix" else None)
    await relay.open()
    pool = await create_pool(relay.dsn, min_size=1, max_size=4, name="jobfeed-test-relayed")
    try:
        async with asgi_client(create_app(make_settings(dsn), pool=pool)) as client:
            unknown = f"/api/jobs/{uuid.uuid4()}"
            assert (await client.get(unknown)).status_code == 404
            assert (await client.get("/readyz")).status_code == 200

            await relay.shut()
            for r in (await client.get(unknown),
                      await asyncio.wait_for(client.post("/api/jobs", json={"kind": "demo", "target": "t"}), 10)):
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "database_unavailable"
                assert r.headers["retry-after"] == "1"
            assert (await client.get("/readyz")).status_code == 503

            async def feed_is(live: bool) -> bool:
                return (await client.get("/api/live")).json() == {"live": live}
            await eventually(lambda: feed_is(False), timeout=10, what="api/live to say the feed is down")
            # the process's own metrics are what an operator needs now (before: a 503 too)
            scraped = await client.get("/metrics")
            assert scraped.status_code == 200 and "jobfeed_http_requests_total{" in scraped.text, scraped.text[:300]
            assert "jobfeed_kind_paused{" not in scraped.text  # not shown stale
            assert "jobfeed_oldest_due_seconds " not in scraped.text  # nor as 0, an all-clear

            await relay.open()

            async def served() -> bool:
                return (await client.get(unknown)).status_code == 404
            await eventually(served, timeout=10, what="the API serves again")
            await eventually(lambda: feed_is(True), timeout=10, what="api/live to say the feed is back")
            assert (await client.post("/api/jobs", json={"kind": "demo", "target": "t"})).status_code == 201
    finally:
        await relay.shut()
        await pool.close()


@contextlib.asynccontextmanager
async def relayed_api(dsn: str, *, min_size: int = 1, max_size: int = 2):
    """An API whose pool reaches the database through a relay the test cuts;
    its connections give up opening after a second."""
    relay = Relay(dsn)
    await relay.open()
    pool = await create_pool(relay.dsn, min_size=min_size, max_size=max_size, name="jobfeed-test-relayed",
                             timeout=1.0)
    try:
        async with asgi_client(create_app(make_settings(dsn), pool=pool)) as client:
            yield relay, client
    finally:
        await relay.shut()
        pool.terminate()


@pytest.mark.parametrize("how", ["hang", "freeze"])
async def test_a_database_that_never_answers_is_503_in_bounded_time(dsn, monkeypatch, how):
    """hang: a stopped proxy takes the connection and never answers its
    startup (before: asyncpg's connect gave up after a minute, and its
    TimeoutError was a 500). freeze: a frozen host keeps the open connections
    open and carries nothing (before: a query on one waited for ever, as
    asyncpg does unless given a timeout, and so did /readyz)."""
    monkeypatch.setattr(db, "QUERY_TIMEOUT", 1.0)
    async with relayed_api(dsn, min_size=2, max_size=4) as (relay, client):
        unknown = f"/api/jobs/{uuid.uuid4()}"
        assert (await client.get(unknown)).status_code == 404
        relay.hang() if how == "hang" else relay.freeze()
        for _ in range(3):  # the first may find its pooled connection cut; the next ones connect anew
            r = await asyncio.wait_for(client.get(unknown), 15)
            assert r.status_code == 503, r.text
            assert r.json()["error"]["code"] == "database_unavailable"
        ready = await asyncio.wait_for(client.get("/readyz"), 2 * health.READY_WAIT + 2)
        assert ready.status_code == 503 and ready.json()["database"] is False
        await relay.open()

        async def served() -> bool:
            return (await client.get(unknown)).status_code == 404
        await eventually(served, timeout=15, what="the API serves again")
        assert (await client.get("/readyz")).status_code == 200


async def test_a_query_in_flight_when_the_database_froze_is_503_without_waiting_for_its_cancel(dsn, monkeypatch):
    """A frozen host takes the connection asyncpg opens to cancel the timed-out
    query and never answers it either. The request answers 503 soon after its
    query's bound (db.QUERY_TIMEOUT), not after a second such bound spent
    waiting for the cancel (before: 2 x QUERY_TIMEOUT, a minute in production)."""
    monkeypatch.setattr(db, "QUERY_TIMEOUT", 3.0)
    monkeypatch.setattr(db, "CANCEL_WAIT", 0.5)
    async with relayed_api(dsn) as (relay, client):
        unknown = f"/api/jobs/{uuid.uuid4()}"
        assert (await client.get(unknown)).status_code == 404
        relay.freeze()
        loop = asyncio.get_running_loop()
        started = loop.time()
        r = await asyncio.wait_for(client.get(unknown), 15)
        took = loop.time() - started
        assert r.status_code == 503, r.text
        assert 3.0 <= took < 3.0 + 0.5 + 1.0, took  # its query's bound, then the cancel's short wait
        await relay.open()


async def test_readyz_answers_a_frozen_database_within_its_own_bounds(dsn):
    """A load balancer asks /readyz to route around a frozen database: it
    answers 503 within READY_WAIT per step, not after the pool's far longer
    bound on a query (db.QUERY_TIMEOUT) and then on its cancel."""
    async with relayed_api(dsn) as (relay, client):
        assert (await client.get("/readyz")).status_code == 200
        relay.freeze()
        for _ in range(2):  # a second look finds the first's connection dropped
            ready = await asyncio.wait_for(client.get("/readyz"), 2 * health.READY_WAIT + 2)
            assert ready.status_code == 503 and ready.json()["database"] is False
        await relay.open()


async def test_a_database_that_turns_connections_away_for_now_is_503(dsn, pool):
    """From a black-box pass: with new connections refused (pg_hba.conf's
    reject while an operator works; here the API's login role made NOLOGIN),
    a submission answered 500 internal_error; now 503, and served once it is back."""
    role = f"jobfeed_test_login_{uuid.uuid4().hex[:8]}"
    await pool.execute(f"create role {role} login in role jobfeed_api")
    api_pool = await create_pool(as_user(dsn, role), min_size=0, max_size=4, name="jobfeed-test-turned-away")
    try:
        async with asgi_client(create_app(make_settings(dsn), pool=api_pool)) as client:
            await pool.execute(f"alter role {role} nologin")
            await pool.execute("select pg_terminate_backend(pid) from pg_stat_activity where usename = $1", role)
            r = await asyncio.wait_for(client.post("/api/jobs", json={"kind": "demo", "target": "away"}), 10)
            assert (r.status_code, r.json()["error"]["code"]) == (503, "database_unavailable"), r.text
            await pool.execute(f"alter role {role} login")

            async def served() -> bool:
                return (await client.post("/api/jobs", json={"kind": "demo", "target": "away"})).status_code == 201
            await eventually(served, timeout=10, what="the API serves again")
    finally:
        await api_pool.close()
        await pool.execute(f"drop owned by {role}")
        await pool.execute(f"drop role {role}")
