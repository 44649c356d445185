"""CONTRACT (Requests): every HTTP submission creates a request, also one that
waits (`after`, `await_signals`): its answer carries `request_id`, the view
counts it in `requesters`, and leaving it works as for any other."""

from __future__ import annotations

import uuid

from jobfeed.api.app import create_app
from servers import asgi_client, make_settings


async def _state(pool, job_id: str) -> str:
    return await pool.fetchval("select state::text from jobfeed.jobs where id = $1", uuid.UUID(job_id))


async def test_waiting_submissions_are_requests_that_can_leave(dsn, queue, pool, k):
    dep, _ = await queue.submit("k", "dep")
    async with asgi_client(create_app(make_settings(dsn))) as client:
        for extra in ({"after": [str(dep)]}, {"await_signals": ["go"]}):
            first = await client.post("/api/jobs", json={"kind": "k", "target": f"t-{len(extra)}-{extra}"[:40], **extra})
            assert first.status_code == 201, first.text
            view = first.json()
            assert view["requesters"] == 1 and view["deduplicated"] is False
            assert first.headers["location"] == f"/api/jobs/{view['id']}"
            again = await client.post("/api/jobs", json={"kind": "k", "target": view["target"], **extra})
            assert again.status_code == 200 and again.json()["deduplicated"] is True
            assert again.json()["requesters"] == 2
            assert again.json()["request_id"] != view["request_id"]
            assert await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1",
                                       uuid.UUID(view["id"])) == 2
            left = await client.delete(f"/api/requests/{view['request_id']}")
            assert left.status_code == 200 and left.json()["job"]["requesters"] == 1
            left = await client.post(f"/api/requests/{again.json()['request_id']}/leave")
            # the last requester left: the kind's on_abandon (default cancel) decides
            assert left.status_code == 200 and left.json()["job"]["status"] == "canceled"
            assert await _state(pool, view["id"]) == "canceled"


async def test_a_waiting_submission_failed_at_once_still_answers_a_request(dsn, queue, pool, k):
    dep, _ = await queue.submit("k", "dep")
    await pool.execute("update jobfeed.jobs set state = 'failed', finished_at = now() where id = $1", dep)
    async with asgi_client(create_app(make_settings(dsn))) as client:
        r = await client.post("/api/jobs", json={"kind": "k", "target": "late", "after": [str(dep)]})
        assert r.status_code == 201, r.text
        view = r.json()
        assert view["status"] == "failed" and view["error"]["code"] == "dependency_failed"
        assert view["requesters"] == 0 and uuid.UUID(view["request_id"])
        left = await client.delete(f"/api/requests/{view['request_id']}")
        assert left.status_code == 200 and left.json()["job"]["status"] == "failed"
