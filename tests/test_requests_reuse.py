"""A duplicate's policies: join (the default), reject_different (a different
payload is refused with 409 and changes nothing, also when 100 race) and
reuse_for (a recent completion answers instead of a new job; force skips
it)."""

from __future__ import annotations

import asyncio

import pytest

from jobfeed.worker import db
from jobfeed.worker.queue import Queue, QueueError, Submission

from request_kinds import k  # noqa: F401  (a fixture: the kinds these tests submit to)

from queue_sql import ATTEMPTS


async def _noop(job, ctx):
    return None

async def test_reject_different_refuses_a_different_payload_and_changes_nothing(pool, queue, k):
    first = await queue.submit("strict", "t", {"v": 1}, request=True)
    same = await queue.submit("strict", "t", {"v": 1}, request=True)
    assert same.id == first.id and not same.created
    before = await pool.fetchval("select count(*) from jobfeed.requests")
    with pytest.raises(QueueError) as e:
        await queue.submit("strict", "t", {"v": 2}, request=True)
    assert (e.value.code, e.value.status) == ("payload_conflict", 409)
    assert await pool.fetchval("select count(*) from jobfeed.requests") == before
    assert (await queue.get_job(first.id))["requesters"] == 2
    # in a batch: also against a job the same batch made
    with pytest.raises(QueueError):
        await queue.submit_many_requests_json("strict", [("u", {"v": 1}), ("u", {"v": 2})],
                                              requesters=[None, None], notify_urls=[None, None])
    assert await pool.fetchval("select count(*) from jobfeed.jobs where target = 'u'") == 0
    # join (the default) shares whatever the payload
    assert (await queue.submit("k", "t", {"v": 1}, request=True)).id == \
        (await queue.submit("k", "t", {"v": 2}, request=True)).id


async def test_100_concurrent_different_duplicates_all_but_matching_are_refused(dsn, k):
    big = await db.create_pool(dsn, min_size=20, max_size=20)
    try:
        q = Queue(big)
        first = await q.submit("strict", "race", {"v": 0}, request=True)
        results = await asyncio.gather(*(q.submit("strict", "race", {"v": n % 2}, request=True)
                                         for n in range(100)), return_exceptions=True)
        joined = [r for r in results if isinstance(r, Submission)]
        refused = [r for r in results if isinstance(r, QueueError)]
        assert len(joined) == 50 and len(refused) == 50
        assert {r.id for r in joined} == {first.id}
        assert {e.code for e in refused} == {"payload_conflict"}
        assert (await q.get_job(first.id))["requesters"] == 51
    finally:
        await big.close()


async def test_reuse_for_answers_with_the_recent_completion(pool, queue, k):
    s = await queue.submit("cached", "r", request=True)
    (job,) = await queue.claim(["cached"], 1, "w")
    assert await queue.complete(job.id, job.generation, {"n": 1})
    again = await queue.submit("cached", "r", request=True)
    assert (again.id, again.created, again.reused) == (s.id, False, True)
    assert again.request_id is not None
    assert await queue.claim(["cached"], 1, "w") == []  # no new attempt
    assert await pool.fetchval(f"select count(*) from {ATTEMPTS} a where job_id = $1", s.id) == 1
    forced = await queue.submit("cached", "r", request=True, force=True)
    assert forced.created and not forced.reused and forced.id != s.id
    # while the forced run is unfinished, the target's job is that run, not the
    # older result (before: the older result, reused, beside a run under way)
    joined = await queue.submit("cached", "r", request=True)
    assert (joined.id, joined.created, joined.reused) == (forced.id, False, False)
    await queue.leave(joined.request_id)
    # past reuse_for: a new job (time planted: the completion 11 minutes ago)
    await pool.execute("update jobfeed.jobs set finished_at = now() - interval '11 minutes' where id = $1", s.id)
    await queue.leave(forced.request_id)  # canceled: the target is free
    late = await queue.submit("cached", "r", request=True)
    assert late.created and not late.reused
    # kinds without reuse_for never reuse
    await queue.submit("k", "x", request=True)
    (job,) = await queue.claim(["k"], 1, "w")
    await queue.complete(job.id, job.generation, {})
    assert (await queue.submit("k", "x", request=True)).created


@pytest.mark.parametrize("path", ["one", "batch", "batch of two"])
async def test_a_submission_racing_the_completion_gets_its_result_not_a_second_run(dsn, pool, queue, k, path):
    """The target's job completes after the submission looked for a recent
    result, before it wrote its own (its write waits on the completion, held
    open here): it gets that result, reused, and no second run is made. Before,
    a new job ran the work again (found by a black-box pass: 10 of 30 bursts of
    12 sequential POSTs made two jobs)."""
    from waiting import eventually
    first = await queue.submit("cached", "race", request=True)
    (job,) = await queue.claim(["cached"], 1, "w")
    worker, submitter = await db.connect(dsn), await db.connect(dsn)
    try:
        completing = worker.transaction()
        await completing.start()
        assert await Queue(worker).complete(job.id, job.generation, {"n": 1})
        q = Queue(submitter)
        targets = ["race"] * (2 if path == "batch of two" else 1)
        if path == "one":
            call = asyncio.ensure_future(q.submit("cached", "race", request=True))
        else:
            call = asyncio.ensure_future(q.submit_many_requests_json(
                "cached", [(t, None) for t in targets], requesters=[None] * len(targets),
                notify_urls=[None] * len(targets)))

        async def waits_on_the_completion():
            return await pool.fetchval("select wait_event_type = 'Lock' from pg_stat_activity where pid = $1",
                                       submitter.get_server_pid())
        await eventually(waits_on_the_completion, timeout=10, what="the submission waiting on the completion")
        await completing.commit()
        got = await asyncio.wait_for(call, 10)
    finally:
        await worker.close()
        await submitter.close()
    answers = [(got.id, got.created, got.reused)] if path == "one" else [(i, c, r) for i, c, _, _, r in got]
    assert answers == [(first.id, False, True)] * len(targets), answers
    assert await pool.fetchval("select count(*) from jobfeed.jobs where target = 'race'") == 1
    assert await queue.claim(["cached"], 1, "w") == []  # nothing to run again
    # each answer is a request of the completed job, inactive
    assert await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1", first.id) == \
        1 + len(targets)


async def test_http_force_reused_and_payload_conflict(dsn, pool, queue):
    import httpx
    from servers import serve
    async with serve(dsn) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            await queue.set_kind_request_policy("demo", on_duplicate="reject_different", reuse_for=600)
            a = await http.post("/api/jobs", json={"kind": "demo", "target": "h", "payload": {"steps": 1}})
            assert a.status_code == 201
            conflict = await http.post("/api/jobs", json={"kind": "demo", "target": "h", "payload": {"steps": 2}})
            assert conflict.status_code == 409 and conflict.json()["error"]["code"] == "payload_conflict"
            (job,) = await queue.claim(["demo"], 1, "w")
            await queue.complete(job.id, job.generation, {"steps": 1})
            r = await http.post("/api/jobs", json={"kind": "demo", "target": "h"})
            assert r.status_code == 200 and r.json()["reused"] is True and r.json()["id"] == a.json()["id"]
            assert r.json()["status"] == "completed" and r.json()["request_id"]
            r = await http.post("/api/jobs", json={"kind": "demo", "target": "h", "force": True})
            assert r.status_code == 201 and r.json()["reused"] is False and r.json()["deduplicated"] is False
            bad = await http.post("/api/jobs", json={"kind": "demo", "target": "h", "force": "yes"})
            assert bad.status_code == 422


def test_task_refuses_bad_request_policies():
    from jobfeed.worker.tasks import Registry
    reg = Registry()
    kwargs: dict
    for kwargs in ({"on_abandon": "later"}, {"on_duplicate": "merge"},
                   {"reuse_for": "soon"}, {"reuse_for": -1}):
        with pytest.raises(ValueError):
            reg.task("x", **kwargs)
    reg.task("ok", reuse_for="10m", on_duplicate="reject_different", on_abandon="keep")(_noop)
    spec = reg.get("ok")
    assert (spec.reuse_for, spec.on_duplicate, spec.on_abandon) == (600, "reject_different", "keep")
