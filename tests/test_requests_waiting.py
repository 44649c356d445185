"""Submissions that wait (after, await_signals) are requests like any other and
combine with run_at/delay, priority, concurrency_key and notify_url: a job
waiting on dependencies that also has a run_at is due at the later of the two."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import pytest

from jobfeed.api.app import create_app

from queue_sql import register
from servers import asgi_client, make_settings

HOUR = dt.timedelta(hours=1)


@pytest.fixture
async def k(pool):
    await register(pool, "k")


@pytest.fixture
async def client(dsn, k):
    async with asgi_client(create_app(make_settings(dsn, webhook_hosts=("127.0.0.1",)))) as c:
        yield c


async def row(pool, job_id):
    return await pool.fetchrow("select * from jobfeed.jobs where id = $1", uuid.UUID(str(job_id)))


async def finish(queue, job_id):
    (job,) = [j for j in await queue.claim(["k"], 10, "w") if str(j.id) == str(job_id)]
    assert await queue.complete(job.id, job.generation, {})


async def test_http_waiting_submission_is_a_request(client, queue, pool):
    dep, _ = await queue.submit("k", "dep")
    r = await client.post("/api/jobs", json={"kind": "k", "target": "w", "after": [str(dep)]})
    assert r.status_code == 201 and r.json()["request_id"] and r.json()["requesters"] == 1
    again = await client.post("/api/jobs", json={"kind": "k", "target": "w", "after": [str(dep)]})
    assert again.json()["id"] == r.json()["id"] and again.json()["requesters"] == 2
    assert again.json()["deduplicated"] is True
    assert await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1",
                               uuid.UUID(r.json()["id"])) == 2
    sig = await client.post("/api/jobs", json={"kind": "k", "target": "s", "await_signals": ["go"]})
    assert sig.status_code == 201 and sig.json()["request_id"]
    # leaving works as for any request: the last one out cancels the waiting job
    await client.delete(f"/api/requests/{sig.json()['request_id']}")
    assert (await row(pool, sig.json()["id"]))["state"] == "canceled"


async def test_python_waiting_submission_records_a_request_when_asked(queue, pool, k):
    dep, _ = await queue.submit("k", "dep")
    bare = await queue.submit("k", "bare", after=[dep])
    assert bare.request_id is None
    asked = await queue.submit("k", "asked", after=[dep], requester="alice")
    assert asked.request_id is not None and asked.created
    r = await pool.fetchrow("select * from jobfeed.requests where id = $1", asked.request_id)
    assert (r["job_id"], r["requester"]) == (asked.id, "alice")
    signalled = await queue.submit("k", "sig", await_signals=["go"], request=True)
    assert signalled.request_id is not None and (await queue.get_job(signalled.id))["requesters"] == 1


@pytest.mark.parametrize("when", ["run_at", "delay"])
async def test_after_with_a_later_run_at_is_due_at_the_later(client, queue, pool, when):
    dep, _ = await queue.submit("k", "dep")
    later = dt.datetime.now(dt.timezone.utc) + HOUR
    field = {"run_at": later.isoformat()} if when == "run_at" else {"delay": "1h"}
    r = await client.post("/api/jobs", json={"kind": "k", "target": "w", "after": [str(dep)], **field})
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    assert (await row(pool, job_id))["state"] == "waiting"
    await finish(queue, dep)
    # the dependency is done, the run_at not yet: queued, not due
    job = await row(pool, job_id)
    assert job["state"] == "queued" and job["run_after"] > dt.datetime.now(dt.timezone.utc) + HOUR / 2
    assert await queue.claim(["k"], 10, "w") == []
    await pool.execute("update jobfeed.jobs set run_after = now() - interval '1 second' where id = $1",
                       uuid.UUID(job_id))  # the hour has passed (time planted)
    assert [str(j.id) for j in await queue.claim(["k"], 10, "w")] == [job_id]


async def test_after_with_a_run_at_already_past_is_due_when_the_dependency_is_done(client, queue, pool):
    dep, _ = await queue.submit("k", "dep")
    past = (dt.datetime.now(dt.timezone.utc) - HOUR).isoformat()
    r = await client.post("/api/jobs", json={"kind": "k", "target": "w", "after": [str(dep)], "run_at": past})
    assert r.status_code == 201, r.text
    await finish(queue, dep)
    job = await row(pool, r.json()["id"])
    # due now (not an hour ago: it queues behind what became due before it)
    assert job["state"] == "queued" and job["run_after"] > dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=1)
    assert [str(j.id) for j in await queue.claim(["k"], 10, "w")] == [r.json()["id"]]


async def test_signals_with_a_later_run_at_wait_for_both(client, queue, pool):
    r = await client.post("/api/jobs", json={"kind": "k", "target": "s", "await_signals": ["go"], "delay": "1h"})
    assert r.status_code == 201, r.text
    await queue.signal(r.json()["id"], "go", {})
    job = await row(pool, r.json()["id"])
    assert job["state"] == "queued" and job["run_after"] > dt.datetime.now(dt.timezone.utc) + HOUR / 2
    assert r.json()["scheduled_for"] is not None  # waiting, and scheduled too
    assert (await queue.get_job(r.json()["id"]))["scheduled_for"] == r.json()["scheduled_for"]


async def test_a_waiting_job_due_at_once_shows_no_scheduled_for(client, queue, pool):
    """Nothing asked for a later time: once its dependency or signal is there the
    job is due now, and scheduled_for stays null (it is not "scheduled")."""
    dep, _ = await queue.submit("k", "dep")
    after = (await client.post("/api/jobs", json={"kind": "k", "target": "a", "after": [str(dep)]})).json()
    signalled = (await client.post("/api/jobs", json={"kind": "k", "target": "s", "await_signals": ["go"]})).json()
    assert after["scheduled_for"] is None and signalled["scheduled_for"] is None
    await asyncio.sleep(0.01)  # the release comes measurably later than the submission
    await finish(queue, dep)
    _, view = await queue.signal(signalled["id"], "go", {})
    assert view["status"] == "queued" and view["scheduled_for"] is None
    for job_id in (after["id"], signalled["id"]):
        assert (await row(pool, job_id))["state"] == "queued"
        view = await queue.get_job(job_id)
        assert view["status"] == "queued" and view["scheduled_for"] is None and view["position"] is not None
    # released at a planted time the clock has not reached: due from then, not "scheduled" for it
    planted = (await client.post("/api/jobs", json={"kind": "k", "target": "p", "await_signals": ["go"]})).json()
    await pool.execute("select jobfeed.signal($1, 'go', '{}'::jsonb, now() + interval '1 hour')",
                       uuid.UUID(planted["id"]))
    assert (await queue.get_job(planted["id"]))["scheduled_for"] is None


async def test_after_with_priority_and_concurrency_key(client, queue, pool):
    dep, _ = await queue.submit("k", "dep")
    r = await client.post("/api/jobs", json={"kind": "k", "target": "w", "after": [str(dep)], "priority": 7,
                                             "concurrency_key": "acct-1"})
    assert r.status_code == 201, r.text
    job = await row(pool, r.json()["id"])
    assert (job["priority"], job["concurrency_key"]) == (7, "acct-1")
    # with signals too, in Python
    s = await queue.submit("k", "p", await_signals=["go"], priority=3, concurrency_key="acct-2")
    job = await row(pool, s.id)
    assert (job["state"], job["priority"], job["concurrency_key"]) == ("waiting", 3, "acct-2")


async def test_after_with_notify_url_delivers_when_final(client, queue, pool):
    dep, _ = await queue.submit("k", "dep")
    r = await client.post("/api/jobs", json={"kind": "k", "target": "w", "after": [str(dep)],
                                             "notify_url": "http://127.0.0.1:9/hook"})
    assert r.status_code == 201, r.text
    bad = await client.post("/api/jobs", json={"kind": "k", "target": "x", "after": [str(dep)],
                                               "notify_url": "http://evil.example/hook"})
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "notify_url_not_allowed")
    await finish(queue, dep)
    await finish(queue, r.json()["id"])
    deliveries = await pool.fetch("select payload from jobfeed.jobs where kind = 'jobfeed.webhook'")
    assert len(deliveries) == 1
    assert '"url": "http://127.0.0.1:9/hook"' in deliveries[0]["payload"]
