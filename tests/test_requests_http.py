"""Requests over HTTP: every POST /api/jobs records one, DELETE (or the
beacon's POST) leaves it, at once or with ?grace= later unless it stays, the
stream follows the requesters count, and a read may wait (?wait=) until the
job is final."""

from __future__ import annotations

import asyncio
import datetime as dt
import uuid

import httpx
import pytest

from request_kinds import k  # noqa: F401  (a fixture: the kinds these tests submit to)
from servers import http, server  # noqa: F401  (fixtures)


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
    # zero in any unit answers at once; past 60 s, however far, is clamped
    for now in ("0", "0s", "0ms", "99999999999999d"):
        r = await http.get(f"/api/jobs/{job['id']}", params={"wait": now})
        assert r.status_code == 200 and r.json()["status"] == "completed", now
    for bad in ("soon", "-1s", "1y", "\u00b2", "1\u00b2"):  # '²' passes str.isdigit(), not float()
        r = await http.get(f"/api/jobs/{job['id']}", params={"wait": bad})
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_query", bad


def test_wait_is_clamped_to_60_seconds():
    from jobfeed.api.waiting import wait_seconds
    assert wait_seconds("90s") == 60 and wait_seconds("2m") == 60 and wait_seconds("1.5") == 1.5
    assert wait_seconds("30s") == 30 and wait_seconds(None) is None


async def test_http_deferred_leave_stay_and_the_grace_cap(dsn, pool):
    """?grace= defers the leave (capped by JOBFEED_LEAVE_GRACE), /stay calls it
    off, and without ?grace=, DELETE and POST .../leave still leave at once."""
    from servers import serve
    async with serve(dsn, leave_grace=30.0) as server, httpx.AsyncClient(base_url=server.url) as http:
        a, b = await post_job(http, "d"), await post_job(http, "d")
        before = await pool.fetchval("select now()")
        r = await http.post(f"/api/requests/{a['request_id']}/leave?grace=10s")
        assert r.status_code == 200 and set(r.json()) == {"job", "leave_at"}
        assert (r.json()["job"]["status"], r.json()["job"]["requesters"]) == ("queued", 2)
        leave_at = dt.datetime.fromisoformat(r.json()["leave_at"])
        assert dt.timedelta(seconds=10) <= leave_at - before < dt.timedelta(seconds=12)
        assert await pool.fetchval("select leave_at from jobfeed.requests where id = $1",
                                   uuid.UUID(a["request_id"])) == leave_at

        r = await http.post(f"/api/requests/{a['request_id']}/stay")
        assert r.status_code == 200 and set(r.json()) == {"job", "called_off"}
        assert (r.json()["job"]["requesters"], r.json()["called_off"]) == (2, True)
        assert await pool.fetchval("select leave_at from jobfeed.requests where id = $1",
                                   uuid.UUID(a["request_id"])) is None
        r = await http.post(f"/api/requests/{a['request_id']}/stay")  # again: nothing to call off
        assert (r.status_code, r.json()["called_off"]) == (200, False)

        # the server's cap: a day asked, 30 s given
        r = await http.post(f"/api/requests/{a['request_id']}/leave", params={"grace": "1d"})
        leave_at = dt.datetime.fromisoformat(r.json()["leave_at"])
        assert dt.timedelta(seconds=30) <= leave_at - before < dt.timedelta(seconds=32)
        for bad in ("soon", "-1s", "\u00b2"):
            r = await http.post(f"/api/requests/{a['request_id']}/leave", params={"grace": bad})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_query", bad

        # explicit leaves: at once, the pending one too
        r = await http.delete(f"/api/requests/{b['request_id']}")
        assert set(r.json()) == {"job"} and r.json()["job"]["requesters"] == 1
        r = await http.post(f"/api/requests/{a['request_id']}/leave")
        assert set(r.json()) == {"job"} and r.json()["job"]["status"] == "canceled"
        r = await http.post(f"/api/requests/{a['request_id']}/stay")
        assert r.status_code == 409 and r.json()["error"]["code"] == "request_left"
        r = await http.post(f"/api/requests/{a['request_id']}/leave?grace=5")  # left: idempotent
        assert r.status_code == 200 and r.json()["leave_at"] is None
        assert r.json()["job"]["status"] == "canceled"

        c = await post_job(http, "d0")  # grace 0: at once
        r = await http.post(f"/api/requests/{c['request_id']}/leave?grace=0")
        assert (r.json()["job"]["status"], r.json()["leave_at"]) == ("canceled", None)
        for unknown in (str(uuid.UUID(int=5)), "not-a-uuid"):
            r = await http.post(f"/api/requests/{unknown}/stay")
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"
            assert (await http.post(f"/api/requests/{unknown}/leave?grace=5")).status_code == 404
