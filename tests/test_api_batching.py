"""Group commit of POST /api/jobs: concurrent submissions are written together,
and each request still gets exactly the answer it would get alone."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from jobfeed.api.app import create_app
from jobfeed.worker.settings import Settings
from queue_sql import session_waits
from servers import asgi_client, make_settings
from jobfeed.worker.settings import SettingError


async def burst(client, bodies: list[dict]):
    return await asyncio.gather(*(client.post("/api/jobs", json=b) for b in bodies))


async def test_a_burst_is_written_in_few_statements_and_each_gets_its_own_answer(dsn, pool, demo_kind):
    app = create_app(make_settings(dsn, max_payload=1024))
    good = [{"kind": "demo", "target": f"new-{i}"} for i in range(40)]
    shared = [{"kind": "demo", "target": "shared", "payload": {"n": i}} for i in range(10)]
    too_large = [{"kind": "demo", "target": f"big-{i}", "payload": {"pad": "x" * 2000}} for i in range(3)]
    unstorable = [{"kind": "demo", "target": f"nul-{i}", "payload": {"s": "a\u0000b"}} for i in range(2)]
    bodies = good + shared + too_large + unstorable
    async with asgi_client(app) as client:
        answers = await burst(client, bodies)
        batcher = app.state.services.batcher
        statements, items = batcher.batches, batcher.items

    by_target = {b["target"]: [] for b in bodies}
    for body, answer in zip(bodies, answers):
        by_target[body["target"]].append(answer)
    for body in good:
        [answer] = by_target[body["target"]]
        assert answer.status_code == 201 and answer.json()["target"] == body["target"]
    shared_answers = by_target["shared"]
    assert sorted(a.status_code for a in shared_answers) == [200] * 9 + [201]
    assert len({a.json()["id"] for a in shared_answers}) == 1
    assert sum(a.json()["deduplicated"] for a in shared_answers) == 9
    for body in too_large:
        [answer] = by_target[body["target"]]
        assert (answer.status_code, answer.json()["error"]["code"]) == (413, "payload_too_large")
    for body in unstorable:
        [answer] = by_target[body["target"]]
        assert (answer.status_code, answer.json()["error"]["code"]) == (422, "invalid_payload")

    # 41 jobs, the refused ones left no trace, and the burst shared statements
    rows = await pool.fetch("select target, payload from jobfeed.jobs")
    assert sorted(r["target"] for r in rows) == sorted([b["target"] for b in good] + ["shared"])
    assert items >= len(bodies) and statements < len(bodies)


async def test_a_burst_for_an_unknown_kind_is_refused_item_by_item(dsn, pool, demo_kind):
    app = create_app(make_settings(dsn))
    async with asgi_client(app) as client:
        answers = await burst(client, [{"kind": "nope", "target": f"t{i}"} for i in range(8)]
                              + [{"kind": "demo", "target": "fine"}])
    assert [(a.status_code, a.json().get("error", {}).get("code")) for a in answers[:8]] == [(422, "unknown_kind")] * 8
    assert answers[8].status_code == 201
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1


async def test_batch_of_one_writes_each_submission_alone(dsn, demo_kind):
    app = create_app(make_settings(dsn, submit_batch=1))
    async with asgi_client(app) as client:
        answers = await burst(client, [{"kind": "demo", "target": f"t{i}"} for i in range(12)])
        batcher = app.state.services.batcher
    assert [a.status_code for a in answers] == [201] * 12
    assert batcher.batches == batcher.items == 12


async def test_a_flush_waiting_for_a_row_lock_does_not_hold_up_other_submissions(dsn, pool, demo_kind):
    """One flush at a time normally; a flush stuck on a job's row lock (held
    here by another transaction) lets the next submission go beside it."""
    app = create_app(make_settings(dsn))
    async with asgi_client(app) as client:
        held = (await client.post("/api/jobs", json={"kind": "demo", "target": "held"})).json()
        locker = await pool.acquire()
        tx = locker.transaction()
        await tx.start()
        try:
            await locker.execute("select from jobfeed.jobs where id = $1 for update", uuid.UUID(held["id"]))
            joining = asyncio.create_task(client.post("/api/jobs", json={"kind": "demo", "target": "held"}))
            await session_waits(pool, "the joining submission")
            other = await asyncio.wait_for(client.post("/api/jobs", json={"kind": "demo", "target": "free"}), 10)
            assert other.status_code == 201 and not joining.done()
        finally:
            await tx.rollback()
            await pool.release(locker)
        assert (await asyncio.wait_for(joining, 10)).json()["deduplicated"] is True


@pytest.mark.parametrize("value", ["0", "-3", "many"])
def test_submit_batch_setting_must_be_a_positive_whole_number(value):
    with pytest.raises(SettingError):
        Settings.from_env({"JOBFEED_SUBMIT_BATCH": value})
    assert Settings.from_env({"JOBFEED_SUBMIT_BATCH": "32"}).submit_batch == 32
