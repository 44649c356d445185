"""on_duplicate="rerun" and "replace": a duplicate of a running job makes it run
once more afterwards (rerun) or starts it over now (replace), with the newest
payload; a duplicate of a job not running gives it the newest payload."""

from __future__ import annotations

import asyncio
import json

import pytest

from jobfeed.worker import db
from jobfeed.worker.queue import Queue
from jobfeed.worker.runner import Runner
from jobfeed.worker.tasks import Context, LeaseLost, TaskSpec

from queue_sql import ATTEMPTS, register
from waiting import eventually


@pytest.fixture
async def kinds(pool):
    for kind, policy in (("again", "rerun"), ("fresh", "replace")):
        await register(pool, kind, max_attempts=3)
        await pool.execute("select jobfeed.set_kind_request_policy_v2($1, 'cancel', $2)", kind, policy)


async def attempts(pool, job_id) -> list[str]:
    return [r["outcome"] for r in await pool.fetch(
        f"select outcome from {ATTEMPTS} a where job_id = $1 order by generation", job_id)]


@pytest.mark.parametrize("kind", ["again", "fresh"])
async def test_a_duplicate_of_a_job_not_running_gives_it_the_newest_payload(pool, queue, kinds, kind):
    first = await queue.submit(kind, "t", {"v": 1}, request=True)
    dup = await queue.submit(kind, "t", {"v": 2}, request=True)
    assert dup.id == first.id and not dup.created
    (job,) = await queue.claim([kind], 1, "w")
    assert job.payload == {"v": 2}
    # between attempts (a transient failure): the next attempt gets the newest
    assert await queue.fail_transient(job.id, job.generation, "flaky", None, retry_after=0)
    await queue.submit(kind, "t", {"v": 3})
    view = await queue.get_job(first.id)
    assert view["status"] == "processing"
    await pool.execute(  # due now (time planted, not waited for)
        "update jobfeed.jobs set run_after = now() where id = $1", first.id)
    (job,) = await queue.claim([kind], 1, "w")
    assert job.payload == {"v": 3}


async def test_rerun_runs_once_more_with_the_newest_payload_status_staying_processing(pool, queue, kinds):
    s = await queue.submit("again", "r", {"v": 1}, request=True)
    (job,) = await queue.claim(["again"], 1, "w")
    before = await queue.get_job(s.id)
    assert before["status"] == "processing"
    for v in (2, 3, 4):  # several duplicates in one attempt: one rerun, the newest payload
        dup = await queue.submit("again", "r", {"v": v}, requester=f"u{v}")
        assert dup.id == s.id and not dup.created
    assert await queue.complete(job.id, job.generation, {"ran": 1})
    view = await queue.get_job(s.id)
    # no flash of completed: the public view did not change at all
    assert (view["status"], view["version"], view["result"]) == ("processing", before["version"], None)
    assert view["requesters"] == 4  # every request stays active through the rerun
    (rerun,) = await queue.claim(["again"], 1, "w")
    assert rerun.payload == {"v": 4} and rerun.generation == job.generation + 1
    assert rerun.checkpoint is None
    assert (await queue.get_job(s.id))["version"] == before["version"]
    assert await queue.complete(rerun.id, rerun.generation, {"ran": 2})
    view = await queue.get_job(s.id)
    assert (view["status"], view["result"], view["requesters"]) == ("completed", {"ran": 2}, 0)
    assert await attempts(pool, s.id) == ["completed", "completed"]
    assert await queue.claim(["again"], 1, "w") == []  # exactly once more


async def test_rerun_after_a_failed_attempt_runs_the_newest_payload_with_fresh_attempts(pool, queue, kinds):
    s = await queue.submit("again", "f", {"v": 1})
    for n in range(3):  # use up all but... every attempt
        (job,) = await queue.claim(["again"], 1, "w")
        if n < 2:
            await queue.fail_transient(job.id, job.generation, "flaky", None)
            await pool.execute("update jobfeed.jobs set run_after = now() where id = $1", s.id)
    await queue.submit("again", "f", {"v": 2})
    # the last attempt fails for good, but the newest payload still gets its run
    assert await queue.fail_permanent(job.id, job.generation, "bad_input", "v1 was wrong")
    assert (await queue.get_job(s.id))["status"] == "processing"
    (rerun,) = await queue.claim(["again"], 1, "w")
    assert rerun.payload == {"v": 2} and rerun.attempt == 4 and rerun.max_attempts == 6
    assert await queue.fail_transient(rerun.id, rerun.generation, "flaky", None)
    assert (await queue.get_job(s.id))["status"] == "processing"  # attempts left for the rerun


async def test_rerun_survives_a_lease_expiring_with_no_attempts_left(pool, queue, kinds):
    s = await queue.submit("again", "gone", {"v": 1})
    (job,) = await queue.claim(["again"], 1, "w")
    await pool.execute("update jobfeed.jobs set attempts = max_attempts, lease_until = now() - interval '1 minute' "
                       "where id = $1", s.id)
    await queue.submit("again", "gone", {"v": 2})
    await pool.execute("select jobfeed.fail_expired(null, now())")
    assert (await queue.get_job(s.id))["status"] == "processing"
    (rerun,) = await queue.claim(["again"], 1, "w")
    assert rerun.payload == {"v": 2}


async def test_a_lease_expiring_with_attempts_left_runs_the_rerun_not_the_old_payload(pool, queue, kinds):
    """A worker killed while a rerun was pending: the reclaim ran the old
    payload again, to completion, and only then the rerun (three runs where
    one more was asked for)."""
    s = await queue.submit("again", "killed", {"v": 1})
    (job,) = await queue.claim(["again"], 1, "w")
    await queue.submit("again", "killed", {"v": 2})
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 minute' where id = $1", s.id)
    (rerun,) = await queue.claim(["again"], 1, "w2")  # the claim finds the expired lease itself
    assert (rerun.id, rerun.payload, rerun.generation) == (s.id, {"v": 2}, job.generation + 1)
    assert await queue.complete(rerun.id, rerun.generation, {"ok": 1})
    assert (await queue.get_job(s.id))["status"] == "completed"
    assert await attempts(pool, s.id) == ["lease_expired", "completed"]


async def test_100_concurrent_duplicates_during_one_attempt_give_exactly_one_rerun(dsn, kinds):
    big = await db.create_pool(dsn, min_size=20, max_size=20)
    try:
        q = Queue(big)
        s = await q.submit("again", "race", {"v": -1}, request=True)
        (job,) = await q.claim(["again"], 1, "w")

        async def dup(n: int):
            if n % 4 == 0:  # batches too (the API's group commit)
                return (await q.submit_many_requests_json("again", [("race", {"v": n}), ("race", {"v": n})],
                                                          requesters=[None, None], notify_urls=[None, None]))[0][0]
            return (await q.submit("again", "race", {"v": n}, request=True)).id

        # the attempt completes while the duplicates arrive
        ids = await asyncio.gather(*(dup(n) for n in range(100)), q.complete(job.id, job.generation, {"n": 0}))
        assert set(ids[:-1]) == {s.id} and ids[-1] is True
        (rerun,) = await q.claim(["again"], 1, "w")
        assert await q.complete(rerun.id, rerun.generation, {"n": 1})
        more = await q.claim(["again"], 1, "w")
        # duplicates that arrived during the rerun ask for one more: at most one
        if more:
            (third,) = more
            assert await q.complete(third.id, third.generation, {"n": 2})
            assert await q.claim(["again"], 1, "w") == []
        assert (await q.get_job(s.id))["status"] == "completed"
        assert await big.fetchval("select count(*) from jobfeed.jobs where kind = 'again'") == 1
    finally:
        await big.close()


async def test_100_racing_duplicates_while_running_give_one_rerun_and_newest_payload(dsn, kinds):
    big = await db.create_pool(dsn, min_size=20, max_size=20)
    try:
        q = Queue(big)
        s = await q.submit("again", "burst", {"v": -1}, request=True)
        (job,) = await q.claim(["again"], 1, "w")
        await asyncio.gather(*(q.submit("again", "burst", {"v": n}, request=True) for n in range(100)))
        pending = await big.fetchval("select rerun_payload from jobfeed.jobs where id = $1", s.id)
        assert pending is not None
        assert await q.complete(job.id, job.generation, {})
        (rerun,) = await q.claim(["again"], 1, "w")
        assert rerun.payload == json.loads(pending)  # the last duplicate written wins
        assert await q.complete(rerun.id, rerun.generation, {})
        assert await q.claim(["again"], 1, "w") == []
        assert (await q.get_job(s.id))["requesters"] == 0
        assert len(await attempts(big, s.id)) == 2
    finally:
        await big.close()


async def test_replace_fences_out_the_running_attempt_uncounted(pool, queue, kinds):
    s = await queue.submit("fresh", "x", {"v": 1}, request=True)
    (job,) = await queue.claim(["fresh"], 1, "w")
    version = (await queue.get_job(s.id))["version"]
    await queue.submit("fresh", "x", {"v": 2}, request=True)
    # the old attempt is fenced out: no renewal, no outcome
    assert await queue.extend_many([(job.id, job.generation)]) == {job.id}
    assert not await queue.complete(job.id, job.generation, {"stale": True})
    assert not await queue.progress(job.id, job.generation, 1, 2, None)
    view = await queue.get_job(s.id)
    assert (view["status"], view["version"], view["requesters"]) == ("processing", version, 2)
    (new,) = await queue.claim(["fresh"], 1, "w")
    assert new.payload == {"v": 2} and new.attempt == 1  # the replaced attempt is not counted
    assert new.generation > job.generation
    assert await queue.complete(new.id, new.generation, {"v": 2})
    assert (await queue.get_job(s.id))["result"] == {"v": 2}
    assert await attempts(pool, s.id) == ["replaced", "completed"]


async def test_100_concurrent_duplicates_replace_the_attempt_once(dsn, kinds):
    big = await db.create_pool(dsn, min_size=20, max_size=20)
    try:
        q = Queue(big)
        s = await q.submit("fresh", "race", {"v": -1}, request=True)
        (job,) = await q.claim(["fresh"], 1, "w")
        ids = await asyncio.gather(*(q.submit("fresh", "race", {"v": n}, request=True) for n in range(100)))
        assert {i.id for i in ids} == {s.id}
        assert await attempts(big, s.id) == ["replaced"]
        payload = await big.fetchval("select payload from jobfeed.jobs where id = $1", s.id)
        (new,) = await q.claim(["fresh"], 1, "w")
        assert new.payload == json.loads(payload) and new.attempt == 1
        assert not await q.complete(job.id, job.generation, {})
        assert (await q.get_job(s.id))["requesters"] == 101
    finally:
        await big.close()


async def test_replace_with_a_real_runner_old_handler_loses_its_lease(queue, pool, dsn, kinds):
    seen: list[dict] = []
    lost, entered = asyncio.Event(), asyncio.Event()

    async def handler(job, ctx: Context):
        seen.append(job.payload)
        if job.payload["v"] == 1:
            entered.set()
            try:
                while True:  # reports until the lease is gone
                    await ctx.progress(1, 10)
                    await asyncio.sleep(0.05)
            except (LeaseLost, asyncio.CancelledError):
                lost.set()
                raise
        return {"ran": job.payload["v"]}

    spec = TaskSpec("fresh", handler, max_attempts=3, lease=1.0, backoff=(0.05,), jitter=0.0)
    runner = Runner(queue, dsn, [spec], poll_interval=0.1, grace=1.0)
    task = asyncio.create_task(runner.run())
    try:
        s = await queue.submit("fresh", "live", {"v": 1}, request=True)
        await asyncio.wait_for(entered.wait(), 10)
        await queue.submit("fresh", "live", {"v": 2}, request=True)
        await asyncio.wait_for(lost.wait(), 10)
        view = await asyncio.wait_for(queue.wait(s.id, 10), 15)
        assert view["status"] == "completed" and view["result"] == {"ran": 2}
        assert seen == [{"v": 1}, {"v": 2}]
    finally:
        runner.stop()
        await asyncio.wait_for(task, 10)


async def test_rerun_and_replace_through_the_http_group_commit(dsn, queue):
    import httpx
    from servers import serve
    async with serve(dsn) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
            await queue.set_kind_request_policy("demo", on_duplicate="rerun")
            first = (await http.post("/api/jobs", json={"kind": "demo", "target": "h",
                                                        "payload": {"steps": 1}})).json()
            (job,) = await queue.claim(["demo"], 1, "w")
            answers = await asyncio.gather(*(http.post("/api/jobs", json={
                "kind": "demo", "target": "h", "payload": {"steps": n}}) for n in range(2, 30)))
            assert {a.json()["id"] for a in answers} == {first["id"]}
            assert await queue.complete(job.id, job.generation, {})
            assert (await http.get(f"/api/jobs/{first['id']}")).json()["status"] == "processing"
            (rerun,) = await queue.claim(["demo"], 1, "w")
            assert rerun.payload["steps"] in range(2, 30)
            await queue.set_kind_request_policy("demo", on_duplicate="replace")
            await asyncio.gather(*(http.post("/api/jobs", json={
                "kind": "demo", "target": "h", "payload": {"steps": n}}) for n in range(30, 40)))
            assert not await queue.complete(rerun.id, rerun.generation, {})
            (new,) = await queue.claim(["demo"], 1, "w")
            assert new.payload["steps"] in range(30, 40)


@pytest.mark.parametrize("kind", ["again", "fresh"])
async def test_a_batch_duplicate_of_a_job_finishing_meanwhile_still_runs_its_payload(dsn, pool, queue, kinds, kind):
    # submit_many's INSERT trips the dedupe index (the job is running) and its
    # look finds the job; the job's row is held (locked, not yet changed), so
    # the batch waits for it to hand over the payload, and the job completes
    # meanwhile: it is final and did not take it, so the item is submitted
    # again as a new job.
    first, _ = await queue.submit(kind, "t", {"v": 1})
    (job,) = await queue.claim([kind], 1, "w")
    holder = await db.connect(dsn)
    try:
        tx = holder.transaction()
        await tx.start()
        await holder.execute("select from jobfeed.jobs where id = $1 for update", job.id)
        batch = asyncio.create_task(queue.submit_many(kind, [("t", {"v": 2})]))

        async def blocked():
            return await pool.fetchval("select count(*) from pg_stat_activity where wait_event_type = 'Lock' "
                                       "and datname = current_database()")
        await eventually(blocked, what="the batch waiting for the job's row")
        assert await holder.fetchval("select cardinality(jobfeed.complete_many(array[$1::uuid], array[$2::int], "
                                     "array[null::jsonb]))", job.id, job.generation) == 1
        await tx.commit()
        [(item, created)] = await asyncio.wait_for(batch, 10)
    finally:
        await holder.close()
    assert (await queue.get_job(first))["status"] == "completed"
    assert item != first and created
    (again,) = await queue.claim([kind], 1, "w")
    assert again.id == item and again.payload == {"v": 2}
