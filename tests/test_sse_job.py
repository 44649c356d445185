"""The job event stream against a real uvicorn server: the snapshot, one event
per change, retries invisible, resume by Last-Event-ID, heartbeats, the end of
the stream, and a listener connection killed under it."""

from __future__ import annotations

import asyncio
import threading
import uuid

from jobfeed.api.app import end_streams
from jobfeed.worker.states import TERMINAL

from servers import ADMIN_TOKEN, Watcher, read_events
from servers import http, server  # noqa: F401  (fixtures)
from waiting import eventually


async def submit(http, target: str, payload: dict | None = None) -> dict:
    response = await http.post("/api/jobs", json={"kind": "demo", "target": target, "payload": payload or {}})
    assert response.status_code in (200, 201), response.text
    return response.json()


async def claim(queue, job_id: str, timeout: float = 5.0):
    """Claim the job once it is due (after a transient failure's backoff)."""
    async def probe():
        return await queue.claim(["demo"], 1, "test-worker")
    (claimed,) = await eventually(probe, timeout=timeout, interval=0.02, what="a due job")
    assert str(claimed.id) == job_id
    return claimed


async def watch(http, job_id: str, headers: dict | None = None, query: str = "") -> tuple[Watcher, asyncio.Task]:
    """Start watching; returns once the server has subscribed (headers came back)."""
    watcher = Watcher(http, f"/api/jobs/{job_id}/events{query}", headers)
    task = asyncio.create_task(watcher.run())
    await asyncio.wait_for(watcher.opened.wait(), 5)
    return watcher, task


async def seen(watchers: list[Watcher], version: int) -> None:
    async def probe():
        return all(w.views and w.views[-1]["version"] >= version for w in watchers)
    await eventually(probe, timeout=10, interval=0.01, what=f"version {version} at every watcher")


def assert_clean_history(views: list[dict]) -> None:
    """In order, no repeats, progress never backwards, nothing after a final status."""
    versions = [v["version"] for v in views]
    assert versions == sorted(set(versions)), versions
    ranks = [v["progress"]["done"] / v["progress"]["total"] for v in views if v["progress"]]
    assert ranks == sorted(ranks), ranks
    assert all(v["status"] not in TERMINAL for v in views[:-1])
    order = {"queued": 0, "processing": 1, "completed": 2, "failed": 2, "canceled": 2}
    statuses = [order[v["status"]] for v in views]
    assert statuses == sorted(statuses), [v["status"] for v in views]


async def test_retries_are_invisible_in_the_stream(http, queue):
    job = await submit(http, "movie", {"steps": 3})
    watcher, task = await watch(http, job["id"])
    await seen([watcher], 1)

    first = await claim(queue, job["id"])
    await queue.progress(first.id, first.generation, 1, 3, "step 1")
    await queue.fail_transient(first.id, first.generation, "demo_transient", "passing trouble")
    second = await claim(queue, job["id"])
    await queue.progress(second.id, second.generation, 1, 3, "step 1")  # same as shown: no event
    await queue.progress(second.id, second.generation, 2, 3, "step 2")
    await queue.fail_transient(second.id, second.generation, "demo_transient", "passing trouble")
    third = await claim(queue, job["id"])
    await queue.progress(third.id, third.generation, 1, 3, "step 1")  # behind what was shown: no event
    await queue.progress(third.id, third.generation, 3, 3, "step 3")
    await queue.complete(third.id, third.generation, {"steps": 3})

    await asyncio.wait_for(task, 5)
    assert watcher.status == 200 and watcher.ended
    views = watcher.views
    assert views[0]["status"] == "queued" and views[0]["version"] == 1
    assert watcher.events[0].retry == 500 and watcher.events[0].id == "1"
    assert all(e.event == "job" and e.id == str(e.json()["version"]) for e in watcher.events)
    assert {v["status"] for v in views[1:-1]} == {"processing"}
    assert views[-1]["status"] == "completed" and views[-1]["result"] == {"steps": 3}
    assert all(v["error"] is None for v in views)
    assert_clean_history(views)
    # Nothing the public may not see went out.
    assert all("attempts" not in v and "generation" not in v for v in views)


async def test_two_requesters_share_the_job_and_see_every_change(http, queue):
    a = await submit(http, "video-42")
    b = await submit(http, "video-42")
    assert a["id"] == b["id"] and b["deduplicated"] is True
    (wa, ta), (wb, tb) = await watch(http, a["id"]), await watch(http, b["id"])
    await seen([wa, wb], 1)

    claimed = await claim(queue, a["id"])
    await seen([wa, wb], 2)
    for done in range(1, 4):
        await queue.progress(claimed.id, claimed.generation, done, 3, None)
        await seen([wa, wb], 2 + done)
    await queue.complete(claimed.id, claimed.generation, None)
    await asyncio.wait_for(asyncio.gather(ta, tb), 5)

    assert [v["version"] for v in wa.views] == [1, 2, 3, 4, 5, 6]
    assert wa.views == wb.views
    assert [v["status"] for v in wa.views] == ["queued"] + ["processing"] * 4 + ["completed"]


async def test_last_event_id_resumes_with_newer_views_only(http, queue):
    job = await submit(http, "doc")
    claimed = await claim(queue, job["id"])  # version 2

    # The client has version 2 already: nothing until the next change.
    resumed, task = await watch(http, job["id"], headers={"Last-Event-ID": "2"})
    stale, stale_task = await watch(http, job["id"], query="?last_event_id=1")
    garbage, garbage_task = await watch(http, job["id"], headers={"Last-Event-ID": "soon"})
    await seen([stale, garbage], 2)
    assert stale.views[0]["version"] == 2 and garbage.views[0]["version"] == 2
    await asyncio.sleep(0.1)
    assert resumed.views == [] and resumed.events[0].retry == 500  # retry: is still set
    await queue.progress(claimed.id, claimed.generation, 1, 2, None)
    await seen([resumed], 3)
    assert [v["version"] for v in resumed.views] == [3]

    await queue.complete(claimed.id, claimed.generation, None)
    await asyncio.wait_for(asyncio.gather(task, stale_task, garbage_task), 5)
    assert [v["version"] for v in resumed.views] == [3, 4]

    # A finished job: its final view once, then the end; a client that has it gets 204.
    final, final_task = await watch(http, job["id"])
    await asyncio.wait_for(final_task, 5)
    assert [v["status"] for v in final.views] == ["completed"] and final.ended
    done = await http.get(f"/api/jobs/{job['id']}/events", headers={"Last-Event-ID": "4"})
    assert done.status_code == 204


async def test_heartbeats_and_open_stream_gauge(http, server):
    job = await submit(http, "idle")
    watcher, task = await watch(http, job["id"])
    await eventually(lambda: asyncio.sleep(0, len(watcher.comments) >= 2), timeout=3, what="two pings")
    assert set(watcher.comments) == {"ping"}
    metrics = (await http.get("/metrics")).text
    assert 'jobfeed_sse_streams{stream="job"} 1' in metrics
    assert "jobfeed_feed_watched_jobs 1" in metrics
    task.cancel()
    feed = server.app.state.services.feed
    await eventually(lambda: asyncio.sleep(0, feed.watched_jobs == 0), timeout=5, what="unsubscribe on disconnect")
    metrics = (await http.get("/metrics")).text
    assert 'jobfeed_sse_streams{stream="job"} 0' in metrics


async def test_head_and_unknown_ids_leave_nothing_subscribed(http, server):
    job = await submit(http, "h")
    head = await http.head(f"/api/jobs/{job['id']}/events")
    assert head.status_code == 200 and head.headers["content-type"].startswith("text/event-stream")
    missing = await http.get(f"/api/jobs/{uuid.uuid4()}/events")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    feed = server.app.state.services.feed
    await eventually(lambda: asyncio.sleep(0, feed.watched_jobs == 0), timeout=5, what="no subscriptions left")


async def test_killing_the_listener_connection_loses_no_final_state(http, server, queue, pool):
    feed = server.app.state.services.feed
    job = await submit(http, "fragile")
    watcher, task = await watch(http, job["id"])
    claimed = await claim(queue, job["id"])
    await seen([watcher], 2)
    connects = feed.reconnects

    pid = await pool.fetchval(
        "select pid from pg_stat_activity where application_name = 'jobfeed-api-feed' "
        "and datname = current_database()")
    assert pid == feed.listener.backend_pid
    # The job finishes while the listener is down: its notification goes nowhere.
    assert await pool.fetchval("select pg_terminate_backend($1)", pid)
    await queue.progress(claimed.id, claimed.generation, 1, 2, "half")
    await queue.complete(claimed.id, claimed.generation, {"ok": 1})

    await asyncio.wait_for(task, 10)
    assert watcher.views[-1]["status"] == "completed" and watcher.views[-1]["result"] == {"ok": 1}
    assert_clean_history(watcher.views)
    assert feed.reconnects > connects and feed.listener.backend_pid != pid


async def test_admin_stream_sees_true_states(http, queue):
    assert (await http.get("/api/admin/events")).status_code == 401
    headers = {"authorization": f"Bearer {ADMIN_TOKEN}"}
    events = []

    async def run():
        async with http.stream("GET", "/api/admin/events", headers=headers) as response:
            assert response.status_code == 200
            async for event in read_events(response):
                if event.comment is None:
                    events.append(event)

    task = asyncio.create_task(run())
    await eventually(lambda: asyncio.sleep(0, bool(events)), timeout=5, what="ready")
    assert events[0].event == "ready" and events[0].retry == 500

    def states():
        return [e.json()["state"] for e in events if e.event == "job"]

    async def saw(*expected):
        await eventually(lambda: asyncio.sleep(0, states() == list(expected)), timeout=5,
                         what=f"admin states {expected}")

    # Changes of one job close together are coalesced, so step by step:
    job = await submit(http, "adm")
    await saw("queued")
    claimed = await claim(queue, job["id"])
    await saw("queued", "running")
    # The retry's return to 'queued' changes no public view, but admins see it.
    await queue.fail_transient(claimed.id, claimed.generation, "oops", "retry me")
    await saw("queued", "running", "queued")
    last = [e.json() for e in events if e.event == "job"][-1]
    assert last["last_error"] == {"code": "oops", "message": "retry me"} and last["attempts"] == 1
    task.cancel()


async def test_a_stream_opened_while_the_server_stops_ends_at_once(http, server):
    """Between a stop signal, which ends every stream, and the server closing
    its connections, a client may reconnect on its keep-alive connection: that
    stream ends at once too, with retry: (come back later), instead of holding
    the stop until the graceful timeout cancels it."""
    job = await submit(http, "while-stopping")
    stopped = threading.Event()
    server.call(lambda: (end_streams(server.app), stopped.set()))
    assert await asyncio.to_thread(stopped.wait, 5)
    for path, headers in ((f"/api/jobs/{job['id']}/events", {}),
                          ("/api/admin/events", {"authorization": f"Bearer {ADMIN_TOKEN}"})):
        async with http.stream("GET", path, headers=headers) as response:
            assert response.status_code == 200
            body = await asyncio.wait_for(response.aread(), 5)  # the response ends by itself
        assert b"retry:" in body and b"event: job" not in body, body
