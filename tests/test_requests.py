"""Requests: who waits for a job. Joining, leaving, abandoning (cancel or keep),
the requesters count, and a race of joins and leaves that never cancels a job
someone still waits for. Over HTTP: test_requests_http.py; identities, caps
and private jobs: test_requests_access.py; duplicates and reuse:
test_requests_reuse.py."""

from __future__ import annotations

import asyncio
import json
import random
import uuid

import pytest

from jobfeed.worker import db
from jobfeed.worker.queue import Queue, QueueError, Submission
from jobfeed.worker.settings import Settings

from queue_sql import ATTEMPTS
from request_kinds import k  # noqa: F401  (a fixture: the kinds these tests submit to)


async def active(pool, job_id) -> int:
    return await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1 and left_at is null", job_id)


async def test_python_submit_records_a_request_only_when_asked(pool, k):
    queue = Queue(pool, settings=Settings(webhook_hosts=("127.0.0.1",)))  # notify_url's host allowed
    plain = await queue.submit("k", "plain")
    assert plain == Submission(plain.id, True, False, None)
    assert await pool.fetchval("select count(*) from jobfeed.requests") == 0
    assert (await queue.get_job(plain.id))["requesters"] == 0

    first = await queue.submit("k", "t", request=True)
    second = await queue.submit("k", "t", requester="bob")
    third = await queue.submit("k", "t", notify_url="http://127.0.0.1/hook")
    assert first.created and not second.created and not third.created
    assert first.id == second.id == third.id
    assert len({first.request_id, second.request_id, third.request_id}) == 3
    assert (await queue.get_job(first.id))["requesters"] == 3
    row = await pool.fetchrow("select * from jobfeed.requests where id = $1", second.request_id)
    assert (row["job_id"], row["requester"], row["left_at"]) == (first.id, "bob", None)


async def test_the_last_leave_cancels_and_leaving_is_idempotent(pool, queue, k):
    a = await queue.submit("k", "t", request=True)
    b = await queue.submit("k", "t", request=True)
    view = await queue.leave(a.request_id)
    assert (view["status"], view["requesters"]) == ("queued", 1)
    version = view["version"]
    again = await queue.leave(a.request_id)  # idempotent: nothing more changes
    assert (again["status"], again["requesters"], again["version"]) == ("queued", 1, version)
    view = await queue.leave(b.request_id)
    assert (view["status"], view["requesters"]) == ("canceled", 0)
    assert view["version"] == version + 1  # the status changed; requesters alone never bump it
    assert (await queue.leave(b.request_id))["status"] == "canceled"
    # the target is free again: the next submission makes a new job
    c = await queue.submit("k", "t", request=True)
    assert c.created and c.id != a.id


async def test_unknown_request_is_not_found(queue, k):
    with pytest.raises(QueueError) as e:
        await queue.leave(uuid.uuid4())
    assert (e.value.code, e.value.status) == ("not_found", 404)


async def test_keep_lets_an_abandoned_job_run(queue, k):
    s = await queue.submit("kept", "t", request=True)
    view = await queue.leave(s.request_id)
    assert (view["status"], view["requesters"]) == ("queued", 0)
    (job,) = await queue.claim(["kept"], 1, "w")
    assert await queue.complete(job.id, job.generation, {"ok": 1})


async def test_an_abandoned_running_job_loses_its_lease(pool, queue, k):
    s = await queue.submit("k", "t", request=True)
    (job,) = await queue.claim(["k"], 1, "w")
    view = await queue.leave(s.request_id)
    assert view["status"] == "canceled"
    assert await queue.extend_many([(job.id, job.generation)]) == {job.id}
    assert not await queue.complete(job.id, job.generation, {})
    log = await pool.fetchrow(f"select outcome, error_code from {ATTEMPTS} a where job_id = $1", job.id)
    assert tuple(log) == ("canceled", "abandoned")


async def test_a_request_of_a_final_job_is_not_active(queue, k):
    s = await queue.submit("k", "t", request=True)
    (job,) = await queue.claim(["k"], 1, "w")
    assert await queue.complete(job.id, job.generation, {"n": 1})
    view = await queue.get_job(s.id)
    assert (view["status"], view["requesters"]) == ("completed", 0)
    assert (await queue.leave(s.request_id))["status"] == "completed"


async def test_jobs_without_requests_are_never_abandoned(pool, queue, k):
    plain = await queue.submit("k", "t")
    other = await queue.submit("k", "u", request=True)
    await queue.leave(other.request_id)
    assert (await queue.get_job(plain.id))["status"] == "queued"
    assert (await queue.get_job(other.id))["status"] == "canceled"


async def test_batch_requests_count_per_item(pool, queue, k):
    answers = await queue.submit_many_requests_json(
        "k", [("a", {}), ("a", {}), ("b", {})], requesters=["x", None, "y"], notify_urls=[None, None, None])
    (a1, c1, _, r1, _), (a2, c2, _, r2, _), (b, c3, _, r3, _) = answers
    assert a1 == a2 and (c1, c2, c3) == (True, False, True)
    assert len({r1, r2, r3}) == 3
    assert (await queue.get_job(a1))["requesters"] == 2
    assert await active(pool, a1) == 2
    again = await queue.submit_many_requests_json("k", [("a", {}), ("b", {})], requesters=[None, None],
                                                  notify_urls=[None, None])
    assert [a[0] for a in again] == [a1, b] and not any(a[1] for a in again)
    assert (await queue.get_job(b))["requesters"] == 2


async def test_joins_and_leaves_racing_never_cancel_a_job_someone_waits_for(dsn, pool, k):
    """Requesters join one target and leave at random, concurrently, while a
    worker claims: the job is abandoned (canceled) again and again. While a
    request is active its job is never canceled; afterwards no canceled job has
    a request that never left, and every unfinished job's count equals its
    active requests (none is left running with nobody waiting)."""
    big = await db.create_pool(dsn, min_size=30, max_size=30)
    rng = random.Random(7)
    try:
        q = Queue(big)

        async def requester(n: int) -> None:
            for _ in range(30):
                s = await q.submit("k", "hot", request=True)
                await asyncio.sleep(rng.random() * 0.002)
                # while this request is active, its job is never canceled
                assert (await q.get_job(s.id))["status"] != "canceled"
                await q.leave(s.request_id)
                await asyncio.sleep(rng.random() * 0.04)  # away: often nobody waits

        async def worker() -> None:
            for _ in range(40):
                await q.claim(["k"], 1, "w")
                await asyncio.sleep(0.002)

        await asyncio.gather(*(requester(n) for n in range(6)), worker())
        bad = await big.fetch("""
            select j.id, r.id as request from jobfeed.jobs j join jobfeed.requests r on r.job_id = j.id
             where j.state = 'canceled' and r.left_at is null""")
        assert bad == []
        mismatched = await big.fetch("""
            select j.id, j.requesters,
                   (select count(*) from jobfeed.requests r where r.job_id = j.id and r.left_at is null) as live
              from jobfeed.jobs j where j.state in ('queued', 'running')""")
        assert all(m["requesters"] == m["live"] for m in mismatched), mismatched
        # everyone left: every job with requests was abandoned
        assert await big.fetchval("select count(*) from jobfeed.jobs where state <> 'canceled'") == 0
        assert await big.fetchval("select count(*) from jobfeed.jobs") > 5  # abandoned again and again
    finally:
        await big.close()


async def test_requesters_never_bump_the_version(pool, queue, k):
    a = await queue.submit("k", "t", request=True)
    v1 = (await queue.get_job(a.id))["version"]
    b = await queue.submit("k", "t", request=True)
    await queue.leave(b.request_id)
    assert (await queue.get_job(a.id))["version"] == v1


async def test_requests_of_a_final_job_do_not_count_after_an_admin_retry(queue, k):
    """Requests end when their job is final: after a retry, an old request
    leaving must not abandon the job a new requester waits for."""
    old = await queue.submit("k", "again", request=True)
    (job,) = await queue.claim(["k"], 1, "w")
    await queue.fail_permanent(job.id, job.generation, "boom", "no")
    await queue.retry(old.id)
    new = await queue.submit("k", "again", request=True)
    assert new.id == old.id and (await queue.get_job(old.id))["requesters"] == 1
    view = await queue.leave(old.request_id)
    assert (view["status"], view["requesters"]) == ("processing", 1)
    assert (await queue.leave(new.request_id))["status"] == "canceled"


async def test_requests_of_a_final_job_do_not_count_after_a_bulk_retry(pool, queue, k):
    """bulk_retry ends a retried job's old requests, as retry() does."""
    old = await queue.submit("k", "bulk-again", request=True)
    (job,) = await queue.claim(["k"], 1, "w")
    await queue.fail_permanent(job.id, job.generation, "boom", "no")
    await pool.execute("select * from jobfeed.bulk_retry(null, null, null, array[$1::uuid])", old.id)
    new = await queue.submit("k", "bulk-again", request=True)
    assert new.id == old.id and (await queue.get_job(old.id))["requesters"] == 1
    view = await queue.leave(old.request_id)
    assert (view["status"], view["requesters"]) == ("processing", 1)


async def test_requests_carry_the_scheduling_fields_in_one_statement(pool, queue, k):
    """The request-writing functions take run_at, priority and concurrency key:
    one call schedules the job and records its request (alone and batched)."""
    import datetime as dt
    at = dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    job_id, created, text, request_id, _ = await queue.submit_request_json(
        "k", "later", {}, run_after=at, priority=7, concurrency_key="tenant-1", requester="ann")
    assert created and request_id is not None
    batch = await queue.submit_many_requests_json(
        "k", [("b1", {}), ("b2", {})], requesters=["bo", None], notify_urls=[None, None],
        run_after=at, priority=-3, concurrency_key="tenant-2")
    rows = {r["target"]: r for r in await pool.fetch(
        "select j.target, j.run_after, j.priority, j.concurrency_key, j.requesters,"
        "       (select count(*) from jobfeed.requests q where q.job_id = j.id) as requests"
        "  from jobfeed.jobs j where j.kind = 'k'")}
    assert {t: (r["run_after"], r["priority"], r["concurrency_key"], r["requesters"], r["requests"])
            for t, r in rows.items()} == {"later": (at, 7, "tenant-1", 1, 1),
                                          "b1": (at, -3, "tenant-2", 1, 1), "b2": (at, -3, "tenant-2", 1, 1)}
    for view_text in (text, batch[0][2]):
        view = json.loads(view_text)
        assert view["requesters"] == 1 and view["scheduled_for"] is not None
