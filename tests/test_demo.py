"""The built-in demo kind: bounded at submission, and present only where it is
asked for (JOBFEED_TASKS=jobfeed.demo, or `jobfeed up`: see test_up.py)."""

from __future__ import annotations

import httpx
import pytest

from jobfeed.api.app import create_app
from servers import asgi_client, make_settings, start_api_process


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
