"""The built-in demo kind: bounded at submission, and present only where it is
asked for (JOBFEED_TASKS=jobfeed.demo, or `jobfeed up`: see test_up.py)."""

from __future__ import annotations

import httpx
import pytest

from jobfeed.api.app import create_app
from servers import asgi_client, make_settings, start_api_process
from test_cli import jobfeed


@pytest.mark.parametrize("payload", [
    {"steps": 1001},
    {"step_ms": 10_001},
    {"steps": 1000, "step_ms": 601},   # each within bounds, the run over 10 minutes
    {"steps": 2001, "step_ms": 0},
    {"step_ms": 600_000},              # with the default 5 steps
    {"steps": -1}, {"steps": 2.5}, {"steps": True}, {"step_ms": "300"},
])
async def test_a_run_over_the_bounds_is_refused_and_changes_nothing(dsn, pool, payload):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        answer = await client.post("/api/jobs", json={"kind": "demo", "target": "t", "payload": payload})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] == "invalid_payload"
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


@pytest.mark.parametrize("payload", [
    {"steps": 1000, "step_ms": 600}, {"steps": 60, "step_ms": 10_000}, {"steps": 1000, "step_ms": 0}, {},
    {"fail": ["ok", "transient"]},  # any word: the four scripts act, the rest run normally
])
async def test_runs_up_to_ten_minutes_are_accepted(dsn, payload):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        answer = await client.post("/api/jobs", json={"kind": "demo", "target": "t", "payload": payload})
    assert answer.status_code == 201, answer.text


async def test_an_api_without_jobfeed_tasks_knows_no_demo_kind(dsn):
    proc, url = await start_api_process(dsn, JOBFEED_TASKS="")
    async with proc, httpx.AsyncClient(base_url=url) as client:
        kinds = (await client.get("/api/kinds")).json()["kinds"]
        refused = await client.post("/api/jobs", json={"kind": "demo", "target": "t"})
    assert [k["kind"] for k in kinds] == []
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "unknown_kind"


async def test_the_cli_keeps_the_demo_bounds_next_to_jobfeed_up(dsn, pool, demo_kind):
    # `jobfeed up` loads the demo kind; `jobfeed submit` in another shell does not,
    # yet on that database the same bounds hold (422 over HTTP, exit 2 here)
    out = jobfeed(dsn, "submit", "demo", "big", "--payload", '{"steps": 5000}', JOBFEED_TASKS="")
    assert out.returncode == 2 and "invalid_payload" in out.stderr, out.stderr
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0
    ok = jobfeed(dsn, "submit", "demo", "small", "--payload", '{"steps": 5}', JOBFEED_TASKS="")
    assert ok.returncode == 0, ok.stderr


async def test_an_api_without_jobfeed_tasks_keeps_the_demo_bounds_next_to_jobfeed_up(dsn, pool, queue):
    """A standalone `jobfeed api` beside `jobfeed up`'s database: as the CLI,
    also when the kind came after the API started."""
    proc, url = await start_api_process(dsn, JOBFEED_TASKS="")
    async with proc, httpx.AsyncClient(base_url=url) as client:
        early = await client.post("/api/jobs", json={"kind": "demo", "target": "early"})
        assert early.status_code == 422 and early.json()["error"]["code"] == "unknown_kind"
        await queue.register_kind("demo", max_attempts=5, lease=1.0, backoff=(0.2,))  # `jobfeed up` started
        big = await client.post("/api/jobs", json={"kind": "demo", "target": "big", "payload": {"steps": 1001}})
        ok = await client.post("/api/jobs", json={"kind": "demo", "target": "ok", "payload": {"steps": 5}})
    assert big.status_code == 422 and big.json()["error"]["code"] == "invalid_payload", big.text
    assert ok.status_code == 201, ok.text
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1


async def test_the_cli_never_adds_the_demo_kind(dsn, pool):
    out = jobfeed(dsn, "submit", "demo", "t", JOBFEED_TASKS="")
    assert out.returncode == 2 and "unknown_kind" in out.stderr, out.stderr
    assert await pool.fetchval("select count(*) from jobfeed.kinds where kind = 'demo'") == 0


async def test_a_fail_word_it_does_not_know_is_a_normal_run(queue, pool, run):
    """fail: [str, ...]; run n reads fail[n-1], and a word other than the four
    scripts (here "ok") runs normally: run 1 fails in passing, run 2 completes."""
    import dataclasses

    import jobfeed.demo  # noqa: F401  (registers the kind)
    from jobfeed.worker.tasks import registry
    from waiting import eventually

    spec = dataclasses.replace(registry.get("demo"), max_attempts=3, lease=2.0, backoff=(0.2,), jitter=0.0)
    await run(spec)
    job_id = (await queue.submit("demo", "scripted", {"steps": 2, "step_ms": 0,
                                                       "fail": ["transient", "ok", "permanent"]})).id

    async def finished():
        return await pool.fetchrow("select state, generation, result from jobfeed.jobs"
                                   " where id = $1 and state in ('completed', 'failed')", job_id)

    row = await eventually(finished, timeout=10, what="the job finished")
    assert (row["state"], row["generation"], row["result"]) == ("completed", 2, '{"steps": 2}')


async def test_every_step_of_a_fast_run_is_written(queue, pool, run):
    """A worker merges a handler's progress reports closer than its interval
    (PROGRESS_INTERVAL); the demo, which watchers and tests follow step by step,
    writes each one: a version per step between the claim's and the outcome's."""
    import dataclasses

    import jobfeed.demo  # noqa: F401  (registers the kind)
    from jobfeed.worker.run_context import RunContext
    from jobfeed.worker.tasks import registry
    from waiting import eventually

    steps = 4
    assert RunContext.PROGRESS_INTERVAL > 0.02 * steps  # the steps fit in one interval: merged, but for the demo
    spec = dataclasses.replace(registry.get("demo"), max_attempts=3, lease=5.0, backoff=(0.2,), jitter=0.0)
    await run(spec)
    job_id = (await queue.submit("demo", "fast", {"steps": steps, "step_ms": 20})).id

    async def completed():
        return await pool.fetchval("select version from jobfeed.jobs where id = $1 and state = 'completed'",
                                   job_id)

    # submitted (1), claimed (2), one per step, completed
    assert await eventually(completed, timeout=10, what="the job completed") == 2 + steps + 1
