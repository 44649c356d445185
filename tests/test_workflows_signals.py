"""Signals: a job submitted with await_signals waits until each name has been
delivered once (the first delivery wins), or fails with signal_timeout."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

from jobfeed.api.app import create_app
from jobfeed.worker.queue import QueueError
from queue_sql import public
from servers import ADMIN_TOKEN, asgi_client, make_settings


async def state(pool, job_id) -> str:
    return await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job_id)


async def test_due_when_every_signal_arrived_first_delivery_wins(queue, pool, k):
    d, _ = await queue.submit("k", "order-1", await_signals=["paid", "shipped"])
    assert await state(pool, d) == "waiting"
    assert (await public(pool, d))["status"] == "queued"
    first, view = await queue.signal(d, "paid", {"amount": 5})
    assert first and view["status"] == "queued"
    again, _ = await queue.signal(d, "paid", {"amount": 999})
    assert not again
    assert await queue.claim(["k"], 1, "w") == []
    with pytest.raises(QueueError) as err:
        await queue.signal(d, "refunded", {})
    assert (err.value.code, err.value.status) == ("not_awaited", 409)
    with pytest.raises(QueueError) as err:
        await queue.signal(uuid.uuid4(), "paid", {})
    assert err.value.status == 404
    with pytest.raises(QueueError) as err:  # JOBFEED_MAX_PAYLOAD, counted as a payload is
        await queue.signal(d, "shipped", "x" * queue.max_payload)
    assert (err.value.code, err.value.status) == ("payload_too_large", 413)
    await queue.signal(d, "shipped", "x" * (queue.max_payload - 2))  # its quotes make it the limit exactly
    assert await state(pool, d) == "queued"
    (job,) = await queue.claim(["k"], 1, "w")
    assert job.id == d and job.signals == {"paid": {"amount": 5}, "shipped": "x" * (queue.max_payload - 2)}


async def test_signal_timeout_fails_the_job(queue, pool, k):
    d, _ = await queue.submit("k", "order-2", await_signals=["paid", "shipped"], signal_timeout=60)
    await queue.signal(d, "paid")
    now = await pool.fetchval("select now()")
    assert await pool.fetchval("select jobfeed.sweep_expired($1)", now + dt.timedelta(seconds=30)) == 0
    assert await pool.fetchval("select jobfeed.sweep_expired($1)", now + dt.timedelta(seconds=61)) == 1
    view = await public(pool, d)
    assert view["status"] == "failed" and view["error"]["code"] == "signal_timeout"
    assert "shipped" in view["error"]["message"] and "paid" not in view["error"]["message"].split("missing")[1]
    # without a timeout a job waits for ever
    e, _ = await queue.submit("k", "order-3", await_signals=["paid"])
    assert await pool.fetchval("select jobfeed.sweep_expired($1)", now + dt.timedelta(days=9999)) == 0
    assert await state(pool, e) == "waiting"


async def test_signals_and_dependencies_together(queue, pool, k):
    a, _ = await queue.submit("k", "a")
    d, _ = await queue.submit("k", "d", after=[a], await_signals=["go"])
    await queue.signal(d, "go", True)
    assert await state(pool, d) == "waiting"
    (job,) = await queue.claim(["k"], 1, "w")
    await queue.complete(job.id, job.generation, None)
    assert await state(pool, d) == "queued"


async def test_http_signals_need_the_api_token_or_admin(dsn, queue, pool, k):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        r = await client.post("/api/jobs", json={"kind": "k", "target": "o", "await_signals": ["paid"],
                                                 "signal_timeout": "10m"})
        assert r.status_code == 201, r.text
        job_id = r.json()["id"]
        assert await pool.fetchval("select deadline - now() > interval '9 minutes' from jobfeed.job_signals "
                                   "where job_id = $1", uuid.UUID(job_id))
        url = f"/api/jobs/{job_id}/signals/paid"
        assert (await client.post(url, json={"ref": 1})).status_code == 401  # no API token: admin needed
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        other = await client.post(f"/api/jobs/{job_id}/signals/nope", json={}, headers=admin)
        assert (other.status_code, other.json()["error"]["code"]) == (409, "not_awaited")
        nul = await client.post(url, json={"ref": "a\x00b"}, headers=admin)  # JSON may spell \u0000
        assert (nul.status_code, nul.json()["error"]["code"]) == (422, "invalid_payload"), nul.text
        nul_name = await client.post(f"/api/jobs/{job_id}/signals/pa%00id", json={}, headers=admin)
        assert (nul_name.status_code, nul_name.json()["error"]["code"]) == (409, "not_awaited")
        # data over the payload limit (a handler reads it as it reads a payload) is refused,
        # and the name still awaits its first delivery
        big = await client.post(url, json={"ref": "x" * 65536}, headers=admin)
        assert (big.status_code, big.json()["error"]["code"]) == (413, "payload_too_large"), big.text
        ok = await client.post(url, json={"ref": 1}, headers=admin)
        assert ok.status_code == 200 and ok.json()["first"] is True
        again = await client.post(url, json={"ref": 2}, headers=admin)
        assert again.status_code == 200 and again.json()["first"] is False
        assert (await client.post(f"/api/jobs/{uuid.uuid4()}/signals/paid", json={},
                                  headers=admin)).status_code == 404
        for bad in ({"await_signals": "paid"}, {"await_signals": [""]}, {"signal_timeout": "5m"},
                    {"await_signals": ["x"], "signal_timeout": "soon"}):
            r = await client.post("/api/jobs", json={"kind": "k", "target": "bad", **bad})
            assert (r.status_code, r.json()["error"]["code"]) == (422, "invalid_request"), (bad, r.text)
    assert (await queue.claim(["k"], 1, "w"))[0].signals == {"paid": {"ref": 1}}
    async with asgi_client(create_app(make_settings(dsn, api_token="t" * 20))) as client:
        r = await client.post("/api/jobs", json={"kind": "k", "target": "p", "await_signals": ["paid"]},
                              headers={"Authorization": "Bearer " + "t" * 20})
        url = f"/api/jobs/{r.json()['id']}/signals/paid"
        assert (await client.post(url, json=1)).status_code == 401
        assert (await client.post(url, json=1, headers={"Authorization": "Bearer " + "t" * 20})).status_code == 200
