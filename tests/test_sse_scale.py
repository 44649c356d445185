"""Streams across processes: many watchers of one job, two API processes fed by
a separate worker process, and a server stopping with streams open."""

from __future__ import annotations

import asyncio
import time

import httpx

from jobfeed.worker.states import TERMINAL

from conftest import JOBFEED, worker_env
from servers import Process, RawWatcher, Watcher, start_api_process
from waiting import eventually


def assert_public_history(views: list[dict]) -> None:
    """queued at most first, then only processing, then one final status; in
    order, no repeats, progress never backwards."""
    statuses = [v["status"] for v in views]
    assert statuses[-1] in TERMINAL, statuses
    middle = statuses[1:-1] if statuses[0] == "queued" else statuses[:-1]
    assert set(middle) <= {"processing"}, statuses
    versions = [v["version"] for v in views]
    assert versions == sorted(set(versions)), versions
    ranks = [v["progress"]["done"] / v["progress"]["total"] for v in views if v["progress"]]
    assert ranks == sorted(ranks), ranks


async def open_watchers(client: httpx.AsyncClient, job_id: str, n: int) -> tuple[list[Watcher], list[asyncio.Task]]:
    watchers = [Watcher(client, f"/api/jobs/{job_id}/events") for _ in range(n)]
    tasks = [asyncio.create_task(w.run()) for w in watchers]
    await asyncio.wait_for(asyncio.gather(*(w.opened.wait() for w in watchers)), 30)
    return watchers, tasks


async def test_500_watchers_of_one_job_all_see_the_end(dsn, queue):
    # Default heartbeats: at 200 ms, 500 streams would mostly carry pings.
    api, url = await start_api_process(dsn, JOBFEED_SSE_PING="15s", JOBFEED_MAX_STREAMS_PER_CLIENT="1000")
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30) as client:
            job = (await client.post("/api/jobs", json={"kind": "demo", "target": "popular"})).json()
        watchers = [RawWatcher(url, f"/api/jobs/{job['id']}/events") for _ in range(500)]
        tasks = [asyncio.create_task(w.run()) for w in watchers]
        await asyncio.wait_for(asyncio.gather(*(w.opened.wait() for w in watchers)), 30)
        assert all(w.status == 200 for w in watchers)

        (claimed,) = await queue.claim(["demo"], 1, "w")
        for done in range(1, 4):
            await queue.progress(claimed.id, claimed.generation, done, 3, None)
        await queue.complete(claimed.id, claimed.generation, {"watchers": 500})
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
    finally:
        await api.stop()
    for w in watchers:
        assert w.ended and w.views[-1]["status"] == "completed", w.views
        assert_public_history(w.views)


async def test_a_worker_process_reaches_clients_of_two_api_processes(dsn, queue):
    (api_a, url_a), (api_b, url_b) = await asyncio.gather(start_api_process(dsn), start_api_process(dsn))
    worker = Process(JOBFEED + ["worker", "--kinds", "demo", "--concurrency", "4", "--poll", "200ms"],
                     worker_env(dsn))
    try:
        async with httpx.AsyncClient(base_url=url_a, timeout=30) as a, \
                httpx.AsyncClient(base_url=url_b, timeout=30) as b:
            payload = {"steps": 3, "step_ms": 50, "fail": ["transient", "transient"]}
            job = (await a.post("/api/jobs", json={"kind": "demo", "target": "clip", "payload": payload})).json()
            shared = (await b.post("/api/jobs", json={"kind": "demo", "target": "clip"})).json()
            assert shared["id"] == job["id"] and shared["deduplicated"] is True
            on_a, tasks_a = await open_watchers(a, job["id"], 3)
            on_b, tasks_b = await open_watchers(b, job["id"], 3)

            await worker.start()
            await asyncio.wait_for(asyncio.gather(*tasks_a, *tasks_b), 30)
    finally:
        await worker.stop()
        await asyncio.gather(api_a.stop(), api_b.stop())
    for w in on_a + on_b:
        assert w.views[0]["status"] == "queued" and w.views[-1]["status"] == "completed", (w.views, worker.log)
        assert w.views[-1]["result"] == {"steps": 3}
        assert "processing" in [v["status"] for v in w.views]
        assert_public_history(w.views)
    log = (await queue.admin_get_job(job["id"]))["attempts_log"]
    assert [a["outcome"] for a in log] == ["transient", "transient", "completed"]


async def test_stopping_the_server_ends_open_streams(dsn):
    api, url = await start_api_process(dsn)
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        job = (await client.post("/api/jobs", json={"kind": "demo", "target": "forever"})).json()
        watchers, tasks = await open_watchers(client, job["id"], 3)
        await eventually(lambda: asyncio.sleep(0, all(w.views for w in watchers)), timeout=5, what="snapshots")
        started = time.monotonic()
        code = await api.stop(timeout=8)
        elapsed = time.monotonic() - started
        results = await asyncio.gather(*tasks, return_exceptions=True)
    # uvicorn re-raises the signal once it has shut down cleanly.
    assert code in (0, -15), api.log
    assert "Application shutdown complete" in api.log and "ERROR" not in api.log, api.log
    assert elapsed < 4, f"shutdown took {elapsed:.1f}s:\n{api.log}"
    # Each stream was ended by the server, not cut off.
    assert all(isinstance(r, Watcher) and r.ended for r in results), results
