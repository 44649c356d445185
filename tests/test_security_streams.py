"""Event streams under attack (issue 9's attacks 2, 5 and 6), on a real uvicorn:
bad numbers never become 500s nor leak subscriptions, a malformed NOTIFY never
blinds the feed, and one client cannot hold unbounded streams."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest

from servers import ADMIN_TOKEN, Watcher, read_events, serve
from waiting import eventually

BEARER = {"authorization": f"Bearer {ADMIN_TOKEN}"}


async def finished_job(http, queue) -> str:
    job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": str(uuid.uuid4())})).json()["id"]
    (claimed,) = await queue.claim(["demo"], 1, "w")
    assert await queue.complete(claimed.id, claimed.generation, {"ok": True})
    return job_id


def feed_of(server):
    return server.app.state.services.feed


BAD_IDS = [("query", "%C2%B2"), ("query", "1" * 5000), ("query", "-1"), ("query", "1e3"),
           ("header", "²".encode()), ("header", "9" * 5000), ("header", "٣".encode())]


async def test_bad_last_event_ids_are_ignored_and_leak_nothing(dsn, queue):
    """Before: '²' and 5,000 digits passed isdigit() and int() raised: a 500, and
    the feed subscription opened before it was never closed (100 requests took
    jobfeed_feed_watched_jobs from 2 to 102)."""
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        job_id = await finished_job(http, queue)
        for i in range(105):
            where, value = BAD_IDS[i % len(BAD_IDS)]
            url = f"/api/jobs/{job_id}/events" + (f"?last_event_id={value}" if where == "query" else "")
            headers = {"last-event-id": value} if where == "header" else {}
            async with http.stream("GET", url, headers=headers) as response:
                assert response.status_code == 200, (where, value)
                events = [e async for e in read_events(response)]
            assert [e.event for e in events if e.comment is None] == ["job"]  # the view, then the end
        await eventually(lambda: asyncio.sleep(0, feed_of(server).watched_jobs == 0), timeout=5,
                         what="every subscription released")
        assert feed_of(server).open_streams == 0
        metrics = await http.get("/metrics")
        assert "jobfeed_feed_watched_jobs 0" in metrics.text


async def test_streams_that_fail_before_they_start_release_their_subscription(dsn):
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        for _ in range(50):
            assert (await http.get(f"/api/jobs/{uuid.uuid4()}/events")).status_code == 404
            assert (await http.head(f"/api/jobs/{uuid.uuid4()}/events")).status_code == 404
        assert feed_of(server).watched_jobs == 0 and feed_of(server).open_streams == 0


@pytest.mark.parametrize("limit", ["0", "²", "1" * 5000, "-5", "5.0"])
async def test_bad_admin_limit_is_422(dsn, limit):
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        response = await http.get(f"/api/admin/jobs?limit={limit}", headers=BEARER)
        assert response.status_code == 422 and response.json()["error"]["code"] == "invalid_query"


GARBAGE = ["garbage", "", ",,,", ":", "x:1", "²:²", f"{uuid.uuid4()}:", f"{uuid.uuid4()}:²",
           f"{uuid.uuid4()}:{'9' * 40}", f"{str(uuid.uuid4()).upper()}:3", "' or 1=1 --:1",
           f"not-a-uuid:1,{uuid.uuid4()}:1"]


async def test_a_malformed_notify_never_blinds_the_feed(dsn, queue, pool):
    """Before: one bad NOTIFY made the re-read fail again every 0.5 s, and no job
    events reached an open admin stream until the listener reconnected."""
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": "n"})).json()["id"]
        job_watcher = Watcher(http, f"/api/jobs/{job_id}/events")
        admin_watcher = Watcher(http, "/api/admin/events", BEARER)
        tasks = [asyncio.create_task(w.run()) for w in (job_watcher, admin_watcher)]
        await asyncio.wait_for(asyncio.gather(job_watcher.opened.wait(), admin_watcher.opened.wait()), 5)
        await eventually(lambda: asyncio.sleep(0, job_watcher.views and any(
            e.event == "ready" for e in admin_watcher.events)), timeout=5, what="both streams ready")

        for payload in GARBAGE:  # any role may send these
            await pool.execute("select pg_notify('jobfeed_changed', $1)", payload)
        await eventually(lambda: asyncio.sleep(0, feed_of(server).bad_notifications >= len(GARBAGE)),
                         timeout=5, what="the garbage to arrive")

        (claimed,) = await queue.claim(["demo"], 1, "w")
        await queue.progress(claimed.id, claimed.generation, 1, 2, "half")

        def admin_saw_running():
            return any(e.event == "job" and e.json()["id"] == job_id and e.json()["state"] == "running"
                       for e in admin_watcher.events)
        await eventually(lambda: asyncio.sleep(0, admin_saw_running()), timeout=5, what="the admin stream")
        await eventually(lambda: asyncio.sleep(0, job_watcher.views[-1]["progress"] is not None),
                         timeout=5, what="the job stream")
        assert await queue.complete(claimed.id, claimed.generation, {})
        await asyncio.wait_for(tasks[0], 5)
        assert job_watcher.views[-1]["status"] == "completed"
        tasks[1].cancel()
        await asyncio.gather(tasks[1], return_exceptions=True)


async def test_one_client_cannot_hold_more_streams_than_its_cap(dsn):
    """Before: one client held 190 streams."""
    async with serve(dsn, max_streams_per_client=3) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": "cap"})).json()["id"]
        watchers = [Watcher(http, f"/api/jobs/{job_id}/events") for _ in range(2)]
        watchers.append(Watcher(http, "/api/admin/events", BEARER))  # admin streams count too
        tasks = [asyncio.create_task(w.run()) for w in watchers]
        await asyncio.wait_for(asyncio.gather(*(w.opened.wait() for w in watchers)), 5)
        assert all(w.status == 200 for w in watchers)

        refused = await http.get(f"/api/jobs/{job_id}/events")
        assert refused.status_code == 429
        assert refused.json()["error"]["code"] == "too_many_streams"
        assert refused.headers["retry-after"]
        assert (await http.get("/api/admin/events", headers=BEARER)).status_code == 429
        # answers that hold no stream stay what they are below the cap
        assert (await http.get(f"/api/jobs/{uuid.uuid4()}/events")).status_code == 404
        done = (await http.post("/api/jobs", json={"kind": "demo", "target": "cap-done"})).json()["id"]
        assert (await http.post(f"/api/admin/jobs/{done}/cancel", headers=BEARER)).status_code == 200
        final = (await http.get(f"/api/jobs/{done}")).json()["version"]
        has_it = await http.get(f"/api/jobs/{done}/events", headers={"Last-Event-ID": str(final)})
        assert has_it.status_code == 204, has_it.text
        assert (await http.get(f"/api/jobs/{done}/events")).status_code == 429  # its final view: a stream

        tasks[0].cancel()  # one leaves: room for one more
        await asyncio.gather(tasks[0], return_exceptions=True)
        await eventually(lambda: asyncio.sleep(0, feed_of(server).open_streams == 2), timeout=5,
                         what="the stream to be released")
        again = Watcher(http, f"/api/jobs/{job_id}/events")
        tasks.append(asyncio.create_task(again.run()))
        await asyncio.wait_for(again.opened.wait(), 5)
        assert again.status == 200
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_the_process_caps_its_total_streams(dsn):
    async with serve(dsn, max_streams=2) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": "total"})).json()["id"]
        watchers = [Watcher(http, f"/api/jobs/{job_id}/events") for _ in range(2)]
        tasks = [asyncio.create_task(w.run()) for w in watchers]
        await asyncio.wait_for(asyncio.gather(*(w.opened.wait() for w in watchers)), 5)
        refused = await http.get(f"/api/jobs/{job_id}/events")
        assert refused.status_code == 429 and refused.json()["error"]["code"] == "too_many_streams"
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
