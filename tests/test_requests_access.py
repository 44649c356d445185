"""Who a request belongs to: the requester header, the cap on how many jobs
one requester waits for (refused with 429, changing nothing, even when
submissions race), and private jobs only their requesters may see."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from jobfeed.worker.queue import QueueError

from queue_sql import register
from request_kinds import k  # noqa: F401  (a fixture: the kinds these tests submit to)


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
            # the header twice (a proxy that added its own to the client's): whose? refused, nothing written
            before = await pool.fetchval("select count(*) from jobfeed.requests")
            twice = await http.post("/api/jobs", json={"kind": "demo", "target": "d"},
                                    headers=[("X-User", "bob"), ("X-User", "alice")])
            assert twice.status_code == 422 and twice.json()["error"]["code"] == "invalid_requester", twice.text
            assert "came more than once" in twice.json()["error"]["message"]
            assert await pool.fetchval("select count(*) from jobfeed.requests") == before


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


async def test_a_submission_that_reuses_a_recent_result_is_not_capped(pool, queue, k):
    """It adds no active request (the job is completed). Before: refused with
    429 too_many_jobs like a new job, alone and in a batch."""
    done = await queue.submit("cached", "old", request=True)
    (job,) = await queue.claim(["cached"], 1, "w")
    assert await queue.complete(job.id, job.generation, {"n": 1})
    for n in range(2):
        await queue.submit_request_json("cached", f"busy{n}", requester="cap", max_active=2)
    job_id, created, _, request_id, reused = await queue.submit_request_json("cached", "old", requester="cap",
                                                                             max_active=2)
    assert (job_id, created, reused) == (done.id, False, True)
    rows = await queue.submit_many_requests_json("cached", [("old", {}), ("old", {})], requesters=["cap", "cap"],
                                                 notify_urls=[None, None], max_active=2)
    assert len(rows) == 2
    assert await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1", done.id) == 4
    with pytest.raises(QueueError) as refused:  # a new job still counts, alone or beside a reuse
        await queue.submit_many_requests_json("cached", [("old", {}), ("new", {})], requesters=["cap", "cap"],
                                              notify_urls=[None, None], max_active=2)
    assert refused.value.code == "too_many_jobs"
    with pytest.raises(QueueError):  # and so does a forced run of a reusable target
        await queue.submit_request_json("cached", "old", requester="cap", max_active=2, force=True)


async def test_a_plain_item_joining_a_forced_run_of_its_batch_is_capped(pool, queue, k):
    """dedupe="requester": items go one by one, so a plain item after a forced
    one of the same target and requester joins its new run instead of the
    recent result. Before: counted as a reuse, the batch passed the cap."""
    await register(pool, "mine")
    await pool.execute("select jobfeed.set_kind_request_policy_v2('mine', 'cancel', 'join', '10 minutes', 'requester')")
    await queue.submit("mine", "A", requester="u")
    (job,) = await queue.claim(["mine"], 1, "w")
    assert await queue.complete(job.id, job.generation, {"n": 1})
    await queue.submit_request_json("mine", "busy", requester="u", max_active=2)
    with pytest.raises(QueueError) as refused:
        await queue.submit_many_requests_json("mine", [("A", {"s": 30})] * 2, requesters=["u"] * 2,
                                              notify_urls=[None] * 2, max_active=2, forces=[True, False])
    assert refused.value.code == "too_many_jobs"
    # the other order: the plain item goes first and reuses the result
    rows = await queue.submit_many_requests_json("mine", [("A", {"s": 30})] * 2, requesters=["u"] * 2,
                                                 notify_urls=[None] * 2, max_active=2, forces=[False, True])
    assert [r[4] for r in rows] == [True, False]
    assert await pool.fetchval("select count(*) from jobfeed.requests r join jobfeed.jobs j on j.id = r.job_id"
                               " where r.requester = 'u' and j.state <> 'completed'") == 2


@pytest.mark.parametrize("waiting", [False, True])
async def test_python_submissions_with_a_requester_keep_the_cap_too(pool, k, waiting):
    """Before: Queue.submit(requester=...) never passed the setting on, so a
    Python producer's requesters waited for any number of jobs."""
    from jobfeed.worker.queue import Queue
    from jobfeed.worker.settings import Settings
    queue = Queue(pool, settings=Settings.from_env({"JOBFEED_MAX_ACTIVE_PER_REQUESTER": "2"}))
    extra = {"await_signals": ["go"]} if waiting else {}
    results = await asyncio.gather(*(queue.submit("k", f"py{n}", requester="pyuser", **extra) for n in range(6)),
                                   return_exceptions=True)
    refused = [r for r in results if isinstance(r, QueueError)]
    assert len(refused) == 4 and {e.code for e in refused} == {"too_many_jobs"}, results
    assert await pool.fetchval("select count(*) from jobfeed.requests where requester = 'pyuser'") == 2
    for n in range(3):  # a submission without a requester is never capped
        await queue.submit("k", f"anon{n}", request=True, **extra)


def test_request_settings_are_checked_at_start():
    from jobfeed.worker.settings import SettingError, Settings
    s = Settings.from_env({"JOBFEED_REQUESTER_HEADER": "X-User", "JOBFEED_MAX_ACTIVE_PER_REQUESTER": "3",
                           "JOBFEED_JOB_ACCESS": "requesters", "JOBFEED_LEAVE_GRACE": "45s"})
    assert (s.requester_header, s.max_active_per_requester, s.job_access, s.leave_grace) == \
        ("x-user", 3, "requesters", 45)
    assert Settings.from_env({"JOBFEED_LEAVE_GRACE": "0s"}).leave_grace == 0  # every leave at once
    for env in ({"JOBFEED_REQUESTER_HEADER": "bad header"}, {"JOBFEED_MAX_ACTIVE_PER_REQUESTER": "0"},
                {"JOBFEED_JOB_ACCESS": "everyone"}, {"JOBFEED_LEAVE_GRACE": "soon"}):
        with pytest.raises(SettingError) as e:
            Settings.from_env(env)
        assert next(iter(env)) in str(e.value)


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


async def test_after_names_only_jobs_the_sender_may_see(dsn, pool, queue):
    """`after` must not tell whether a private job exists or how it ended: a
    job the sender may not see is refused as no job at all, writing nothing."""
    import httpx
    from servers import ADMIN_TOKEN, serve
    async with serve(dsn, requester_header="x-user", job_access="requesters") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            private = (await http.post("/api/jobs", json={"kind": "demo", "target": "secret"},
                                       headers={"X-User": "alice"})).json()

            async def probe(target, headers):
                return await http.post("/api/jobs", json={"kind": "demo", "target": target, "after": [private["id"]]},
                                       headers=headers)

            before = await pool.fetchval("select count(*) from jobfeed.jobs")
            for headers in ({"X-User": "bob"}, {}):
                refused = await probe("bob-probe", headers)
                assert refused.status_code == 422, refused.text
                assert refused.json()["error"] == {"code": "unknown_dependency",
                                                   "message": f"no such job: {private['id']}"}
            assert await pool.fetchval("select count(*) from jobfeed.jobs") == before
            # its requesters may, by identity or by presenting the request, and so may an admin
            assert (await probe("alice-next", {"X-User": "alice"})).status_code == 201
            assert (await probe("holder-next", {"X-User": "carol",
                                                "X-Jobfeed-Request": private["request_id"]})).status_code == 201
            assert (await probe("admin-next", {"Authorization": f"Bearer {ADMIN_TOKEN}"})).status_code == 201
