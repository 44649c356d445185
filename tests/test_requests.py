"""Requests: who waits for a job. Joining, leaving, abandoning (cancel or keep),
the requesters count, and a race of joins and leaves that never cancels a job
someone still waits for."""

from __future__ import annotations

import asyncio
import json
import random
import uuid

import pytest

from jobfeed.worker import db
from jobfeed.worker.queue import Queue, QueueError, Submission

from queue_sql import ATTEMPTS, register


@pytest.fixture
async def k(pool):
    await register(pool, "k")
    await register(pool, "kept")
    await pool.execute("select jobfeed.set_kind_request_policy('kept', 'keep')")
    await register(pool, "strict")
    await pool.execute("select jobfeed.set_kind_request_policy('strict', 'cancel', 'reject_different')")
    await register(pool, "cached")
    await pool.execute("select jobfeed.set_kind_request_policy('cached', 'cancel', 'join', '10 minutes')")


async def active(pool, job_id) -> int:
    return await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1 and left_at is null", job_id)


async def test_python_submit_records_a_request_only_when_asked(pool, queue, k):
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


# ---------------------------------------------------------------- over HTTP

@pytest.fixture
async def server(dsn):
    from servers import serve
    async with serve(dsn) as s:
        yield s


@pytest.fixture
async def http(server):
    import httpx
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        yield client


async def post_job(http, target: str) -> dict:
    r = await http.post("/api/jobs", json={"kind": "demo", "target": target})
    assert r.status_code in (200, 201), r.text
    return r.json()


async def test_http_submissions_are_requests_and_leave(http, pool):
    a = await post_job(http, "v")
    b = await post_job(http, "v")
    assert a["id"] == b["id"] and (a["requesters"], b["requesters"]) == (1, 2)
    assert uuid.UUID(a["request_id"]) != uuid.UUID(b["request_id"])

    r = await http.delete(f"/api/requests/{a['request_id']}")
    assert r.status_code == 200
    assert set(r.json()) == {"job"}
    assert (r.json()["job"]["id"], r.json()["job"]["status"], r.json()["job"]["requesters"]) == (a["id"], "queued", 1)
    again = await http.delete(f"/api/requests/{a['request_id']}")
    assert again.status_code == 200 and again.json()["job"]["requesters"] == 1

    # the beacon's route: no body, no Content-Type
    r = await http.post(f"/api/requests/{b['request_id']}/leave")
    assert r.status_code == 200 and r.json()["job"]["status"] == "canceled"
    assert (await http.get(f"/api/jobs/{a['id']}")).json()["status"] == "canceled"


@pytest.mark.parametrize("request_id", [str(uuid.UUID(int=5)), "not-a-uuid", "x" * 100])
async def test_http_unknown_request_is_404_and_changes_nothing(http, pool, request_id):
    job = await post_job(http, "v")
    for response in (await http.delete(f"/api/requests/{request_id}"),
                     await http.post(f"/api/requests/{request_id}/leave")):
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert (await http.get(f"/api/jobs/{job['id']}")).json()["requesters"] == 1


async def test_sse_sends_requesters_changes_under_the_same_id(http):
    from servers import Watcher
    from waiting import eventually
    first = await post_job(http, "w")
    watcher = Watcher(http, f"/api/jobs/{first['id']}/events")
    task = asyncio.create_task(watcher.run())
    try:
        await asyncio.wait_for(watcher.opened.wait(), 5)
        second = await post_job(http, "w")

        async def counts():
            return [e.json()["requesters"] for e in watcher.events if e.event == "job"][-1:] == [2]
        await eventually(counts, timeout=10, interval=0.02, what="requesters 2 on the stream")
        await http.delete(f"/api/requests/{second['request_id']}")

        async def back_to_one():
            return [e.json()["requesters"] for e in watcher.events if e.event == "job"][-1:] == [1]
        await eventually(back_to_one, timeout=10, interval=0.02, what="requesters 1 on the stream")
        events = [e for e in watcher.events if e.event == "job"]
        assert [e.json()["requesters"] for e in events] == [1, 2, 1]
        assert {e.id for e in events} == {"1"}  # version never moved
        await http.delete(f"/api/requests/{first['request_id']}")  # the last leaves: canceled, stream ends
        await asyncio.wait_for(task, 10)
        final = watcher.views[-1]
        assert (final["status"], final["requesters"], final["version"]) == ("canceled", 0, 2)
    finally:
        task.cancel()


# ---------------------------------------------------------------- waiting

async def test_queue_wait_answers_when_final(pool, queue, k):
    s = await queue.submit("k", "w")
    view = await queue.wait(s.id, 0.05)  # time is up: the current view
    assert view["status"] == "queued"
    waiter = asyncio.create_task(queue.wait(s.id, 30))
    await asyncio.sleep(0.1)
    (job,) = await queue.claim(["k"], 1, "w")
    await queue.progress(job.id, job.generation, 1, 2, "half")
    assert not waiter.done()
    await queue.complete(job.id, job.generation, {"ok": True})
    view = await asyncio.wait_for(waiter, 10)
    assert (view["status"], view["result"]) == ("completed", {"ok": True})
    assert await queue.wait(uuid.uuid4(), 1) is None


async def test_http_wait(http, pool, queue):
    job = await post_job(http, "waited")
    started = asyncio.get_running_loop().time()
    r = await http.get(f"/api/jobs/{job['id']}?wait=200ms")
    assert r.status_code == 200 and r.json()["status"] == "queued"
    assert asyncio.get_running_loop().time() - started >= 0.19

    waiting = asyncio.create_task(http.get(f"/api/jobs/{job['id']}", params={"wait": "30s"}))
    await asyncio.sleep(0.2)
    assert not waiting.done()
    (claimed,) = await queue.claim(["demo"], 1, "w")
    await queue.complete(claimed.id, claimed.generation, {"steps": 0})
    r = await asyncio.wait_for(waiting, 10)
    assert r.status_code == 200 and r.json()["status"] == "completed"
    # already final: at once
    r = await http.get(f"/api/jobs/{job['id']}?wait=60s")
    assert r.json()["status"] == "completed"
    assert (await http.get(f"/api/jobs/{uuid.uuid4()}?wait=1s")).status_code == 404
    for bad in ("soon", "-1s", "1y", "\u00b2", "1\u00b2"):  # '²' passes str.isdigit(), not float()
        r = await http.get(f"/api/jobs/{job['id']}", params={"wait": bad})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_query", bad


def test_wait_is_clamped_to_60_seconds():
    from jobfeed.api.waiting import wait_seconds
    assert wait_seconds("90s") == 60 and wait_seconds("2m") == 60 and wait_seconds("1.5") == 1.5
    assert wait_seconds("30s") == 30 and wait_seconds(None) is None


# ---------------------------------------------------------------- identity and caps

async def test_requester_header_and_the_cap(dsn, pool):
    import httpx
    from servers import serve
    async with serve(dsn, requester_header="x-user", max_active_per_requester=2) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            def post(target, user):
                return http.post("/api/jobs", json={"kind": "demo", "target": target},
                                 headers={"X-User": user} if user else {})
            assert (await post("a", "alice")).status_code == 201
            assert (await post("b", "alice")).status_code == 201
            before = await pool.fetchval("select count(*) from jobfeed.requests")
            refused = await post("c", "alice")
            assert refused.status_code == 429
            assert refused.json()["error"]["code"] == "too_many_jobs"
            assert int(refused.headers["retry-after"]) > 0
            assert await pool.fetchval("select count(*) from jobfeed.requests") == before  # nothing changed
            assert await pool.fetchval("select count(*) from jobfeed.jobs where target = 'c'") == 0
            # others are not affected; anonymous callers are never capped
            assert (await post("c", "bob")).status_code == 201
            for n in range(3):
                assert (await post(f"anon{n}", None)).status_code == 201
            rows = await pool.fetch("select requester, count(*) from jobfeed.requests group by 1")
            assert {r[0]: r[1] for r in rows} == {"alice": 2, "bob": 1, None: 3}
            # leaving frees a place
            first = await pool.fetchval("select id from jobfeed.requests where requester = 'alice' limit 1")
            assert (await http.delete(f"/api/requests/{first}")).status_code == 200
            assert (await post("c", "alice")).status_code == 200  # joins bob's job


async def test_the_cap_holds_under_concurrent_submissions(pool, queue, k):
    results = await asyncio.gather(*(queue.submit_request_json("k", f"t{n}", requester="eve", max_active=5)
                                     for n in range(30)), return_exceptions=True)
    refused = [r for r in results if isinstance(r, QueueError)]
    assert len(results) - len(refused) == 5
    assert {(e.code, e.status) for e in refused} == {("too_many_jobs", 429)}
    batch = [(f"b{n}", {}) for n in range(3)]
    with pytest.raises(QueueError):
        await queue.submit_many_requests_json("k", batch, requesters=["eve", None, None],
                                              notify_urls=[None] * 3, max_active=5)
    assert await pool.fetchval("select count(*) from jobfeed.jobs where target like 'b%'") == 0


def test_request_settings_are_checked_at_start():
    from jobfeed.worker.settings import SettingError, Settings
    s = Settings.from_env({"JOBFEED_REQUESTER_HEADER": "X-User", "JOBFEED_MAX_ACTIVE_PER_REQUESTER": "3",
                           "JOBFEED_JOB_ACCESS": "requesters"})
    assert (s.requester_header, s.max_active_per_requester, s.job_access) == ("x-user", 3, "requesters")
    for env in ({"JOBFEED_REQUESTER_HEADER": "bad header"}, {"JOBFEED_MAX_ACTIVE_PER_REQUESTER": "0"},
                {"JOBFEED_JOB_ACCESS": "everyone"}):
        with pytest.raises(SettingError) as e:
            Settings.from_env(env)
        assert next(iter(env)) in str(e.value)


# ---------------------------------------------------------------- private jobs

async def test_private_jobs_are_only_for_their_requesters(dsn, pool, queue):
    import httpx
    from servers import serve
    async with serve(dsn, requester_header="x-user", job_access="requesters") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            mine = (await http.post("/api/jobs", json={"kind": "demo", "target": "p"},
                                    headers={"X-User": "alice"})).json()
            url = f"/api/jobs/{mine['id']}"

            async def status(path, headers=None, params=None) -> int:
                return (await http.get(path, headers=headers or {}, params=params or {})).status_code

            assert await status(url, {"X-User": "alice"}) == 200
            for headers in ({"X-User": "bob"}, {}, {"X-Jobfeed-Request": str(uuid.uuid4())},
                            {"X-Jobfeed-Request": "junk"}):
                assert await status(url, headers) == 404, headers
                assert await status(url + "/events", headers) == 404, headers
                assert await status(url, headers, {"wait": "1s"}) == 404, headers
            assert (await http.get(url, headers={"X-User": "bob"})).json()["error"]["code"] == "not_found"
            # the request id is a capability: as a header, or in the query (EventSource)
            assert await status(url, {"X-Jobfeed-Request": mine["request_id"]}) == 200
            assert await status(url, params={"request": mine["request_id"]}) == 200
            async with http.stream("GET", url + "/events", params={"request": mine["request_id"]}) as r:
                assert r.status_code == 200
            # dedupe="global": a duplicate joins the job and becomes one of its requesters
            joined = (await http.post("/api/jobs", json={"kind": "demo", "target": "p"},
                                      headers={"X-User": "bob"})).json()
            assert joined["id"] == mine["id"]
            assert await status(url, {"X-User": "bob"}) == 200
            # requesters still see it when it is final (and after leaving)
            await http.delete(f"/api/requests/{joined['request_id']}")
            (job,) = await queue.claim(["demo"], 1, "w")
            await queue.complete(job.id, job.generation, {"steps": 0})
            assert (await http.get(url, headers={"X-User": "bob"})).json()["status"] == "completed"
            assert await status(url, {"X-User": "carol"}) == 404


# ---------------------------------------------------------------- duplicates and reuse

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
            assert r.status_code == 201 and "reused" not in r.json()
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
    reg.task("ok", reuse_for="10m", on_duplicate="reject_different", on_abandon="keep")(lambda job, ctx: None)
    spec = reg.get("ok")
    assert (spec.reuse_for, spec.on_duplicate, spec.on_abandon) == (600, "reject_different", "keep")


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


async def test_http_scheduled_submissions_are_requests(http, pool):
    """POST /api/jobs with delay and priority: one job, scheduled and with its
    request, for a lone submission and for many at once (the group commit)."""
    r = await http.post("/api/jobs", json={"kind": "demo", "target": "s-0", "delay": "1h", "priority": 4,
                                           "concurrency_key": "c"})
    assert r.status_code == 201, r.text
    one = r.json()
    assert one["requesters"] == 1 and one["scheduled_for"] is not None and uuid.UUID(one["request_id"])
    many = await asyncio.gather(*(http.post("/api/jobs", json={"kind": "demo", "target": f"s-{n}", "delay": "1h",
                                                               "priority": 4, "concurrency_key": "c"})
                                  for n in range(1, 9)))
    assert all(m.status_code == 201 and m.json()["scheduled_for"] is not None for m in many)
    rows = await pool.fetch("select j.priority, j.concurrency_key, j.run_after > now() + interval '50 minutes' as later,"
                            "       (select count(*) from jobfeed.requests q where q.job_id = j.id) as requests"
                            "  from jobfeed.jobs j where j.target like 's-%'")
    assert len(rows) == 9 and all(tuple(r) == (4, "c", True, 1) for r in rows)


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
