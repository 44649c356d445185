"""Public routes: submit (dedupe, Location), read, kinds, and every kind of bad
input answered with a clear 4xx that changes nothing."""

from __future__ import annotations

import json
import uuid

import pytest

from jobfeed.api.app import create_app
from servers import UNKNOWN_JOB_ID, asgi_client, make_settings

PUBLIC_FIELDS = {"id", "kind", "target", "status", "progress", "result", "error", "created_at",
                 "updated_at", "finished_at", "version", "requesters", "scheduled_for", "outputs"}


@pytest.fixture
async def client(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as c:
        yield c


async def count_jobs(pool) -> int:
    return await pool.fetchval("select count(*) from jobfeed.jobs")


async def test_submit_creates_then_shares_the_unfinished_job(client, queue):
    first = await client.post("/api/jobs", json={"kind": "demo", "target": "video-1", "payload": {"steps": 2}})
    assert first.status_code == 201
    job = first.json()
    assert first.headers["location"] == f"/api/jobs/{job['id']}"
    assert set(job) == PUBLIC_FIELDS | {"deduplicated", "reused", "request_id"}
    assert job["deduplicated"] is False and job["requesters"] == 1
    assert (job["kind"], job["target"], job["status"], job["version"]) == ("demo", "video-1", "queued", 1)

    again = await client.post("/api/jobs", json={"kind": "demo", "target": "video-1"})
    assert again.status_code == 200
    assert again.json()["id"] == job["id"] and again.json()["deduplicated"] is True
    assert again.json()["request_id"] != job["request_id"] and again.json()["requesters"] == 2
    assert again.headers["location"] == f"/api/jobs/{job['id']}"

    other = await client.post("/api/jobs", json={"kind": "demo", "target": "video-2"})
    assert other.status_code == 201 and other.json()["id"] != job["id"]

    # Once the job is finished, the same target makes a new job.
    (claimed,) = await queue.claim(["demo"], 1, "w")
    assert claimed.id == uuid.UUID(job["id"])
    assert await queue.complete(claimed.id, claimed.generation, {"ok": True})
    after = await client.post("/api/jobs", json={"kind": "demo", "target": "video-1"})
    assert after.status_code == 201 and after.json()["id"] != job["id"]


async def test_get_job_shows_the_public_view(client, queue):
    created = (await client.post("/api/jobs", json={"kind": "demo", "target": "t"})).json()
    (claimed,) = await queue.claim(["demo"], 1, "w")
    await queue.progress(claimed.id, claimed.generation, 1, 4, "one")
    await queue.fail_transient(claimed.id, claimed.generation, "boom", "upstream said 500")

    response = await client.get(f"/api/jobs/{created['id']}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    view = response.json()
    assert set(view) == PUBLIC_FIELDS | {"position"}  # (reads only: submit answers leave it out)
    assert view["position"] is None  # started
    # The retry is invisible: still processing, no error, progress kept.
    assert view["status"] == "processing" and view["error"] is None
    assert view["progress"] == {"done": 1, "total": 4, "message": "one"}


@pytest.mark.parametrize("job_id", [UNKNOWN_JOB_ID, "not-a-uuid", "1234", "%00", "x" * 300])
async def test_unknown_or_malformed_job_id_is_404(client, job_id):
    for path in (f"/api/jobs/{job_id}", f"/api/jobs/{job_id}/events"):
        response = await client.get(path)
        assert response.status_code == 404
        assert response.json() == {"error": {"code": "not_found", "message": "no such job"}}


async def test_kinds_lists_registered_kinds(client, queue):
    await queue.register_kind("fetch_email", max_attempts=3, lease=60, backoff=(1, 2), jitter=0.0,
                              description="from elsewhere")
    response = await client.get("/api/kinds")
    assert response.status_code == 200
    kinds = {k["kind"]: k for k in response.json()["kinds"]}
    assert kinds["demo"]["lease_seconds"] == 1 and kinds["demo"]["backoff_seconds"] == [0.2]
    assert kinds["fetch_email"] == {"kind": "fetch_email", "description": "from elsewhere", "max_attempts": 3,
                                    "lease_seconds": 60, "backoff_seconds": [1, 2], "jitter": 0,
                                    "priority": 0, "paused": False, "max_running": None,
                                    "max_running_per_key": None, "rate": None, "dedupe": "global",
                                    "on_duplicate": "join", "on_abandon": "cancel", "reuse_for_seconds": None}


async def test_kind_known_only_to_the_database_is_accepted(client, queue):
    # Another process registered it; this API has no handler, so no local validation.
    await queue.register_kind("resize", max_attempts=2, lease=30, backoff=(1,))
    response = await client.post("/api/jobs", json={"kind": "resize", "target": "img", "payload": {"w": 3}})
    assert response.status_code == 201


BAD = [
    # (raw body, status, error code)
    (b"{", 400, "invalid_json"),
    (b"", 400, "invalid_json"),
    (b"\xff\xfe\x00garbage", 400, "invalid_json"),
    (b'{"kind": "demo", "target": "a", "payload": {"x": NaN}}', 400, "invalid_json"),
    (b'{"kind": "demo", "target": "a", "payload": {"x": Infinity}}', 400, "invalid_json"),
    (b"[" * 30_000 + b"]" * 30_000, 400, "invalid_json"),
    (b"[]", 422, "invalid_request"),
    (b'"demo"', 422, "invalid_request"),
    (b"null", 422, "invalid_request"),
    (b'{"target": "a"}', 422, "invalid_request"),
    (b'{"kind": 5, "target": "a"}', 422, "invalid_request"),
    (b'{"kind": "demo", "target": "a", "urgency": 1}', 422, "invalid_request"),
    (b'{"kind": "demo", "target": "a", "run_at": "tomorrow"}', 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "run_at": "2030-01-01T00:00:00"}', 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "run_at": 1893456000}', 422, "invalid_run_at"),
    # ISO 8601 forms that are not RFC 3339's date-time
    (b'{"kind": "demo", "target": "a", "run_at": "2030-W01-5T10:00:00Z"}', 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "run_at": "2030-01-01T10Z"}', 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "run_at": "2030-01-01T10:00:00+0530"}', 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "run_at": "20301201T100000Z"}', 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "run_at": "2030-02-30T10:00:00Z"}', 422, "invalid_run_at"),
    # the edge of the date range: refused (further than the longest delay), not stored as infinity
    (b'{"kind": "demo", "target": "a", "run_at": "9999-12-31T23:59:59.999999Z"}', 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "run_at": "9999-12-31T23:59:59-01:00"}', 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "delay": "soon"}', 422, "invalid_delay"),
    (b'{"kind": "demo", "target": "a", "delay": -5}', 422, "invalid_delay"),
    (b'{"kind": "demo", "target": "a", "delay": true}', 422, "invalid_delay"),
    (b'{"kind": "demo", "target": "a", "delay": 1e300}', 422, "invalid_delay"),
    # past what a date holds, or the longest duration: refused, not an overflow
    (b'{"kind": "demo", "target": "a", "delay": "99999999999d"}', 422, "invalid_delay"),
    (b'{"kind": "demo", "target": "a", "delay": "3000000d"}', 422, "invalid_delay"),
    ('{"kind": "demo", "target": "a", "delay": "\u0665s"}'.encode(), 422, "invalid_delay"),  # digits: ASCII
    ('{"kind": "demo", "target": "a", "run_at": "\u0662030-01-01T00:00:00Z"}'.encode(), 422, "invalid_run_at"),
    (b'{"kind": "demo", "target": "a", "delay": "99999999999999999999ms"}', 422, "invalid_delay"),
    (b'{"kind": "demo", "target": "a", "await_signals": ["go"], "signal_timeout": "99999999999d"}', 422,
     "invalid_request"),
    (b'{"kind": "demo", "target": "a", "await_signals": ["go"], "signal_timeout": 1e300}', 422, "invalid_request"),
    (b'{"kind": "demo", "target": "a", "await_signals": ["s/x"]}', 422, "invalid_request"),  # undeliverable
    # a lone surrogate quoted back in the message still makes a 422, not a 500
    (b'{"kind": "demo", "target": "a", "\\ud800": 1}', 422, "invalid_request"),
    (b'{"kind": "demo", "target": "a", "after": ["\\ud800"]}', 422, "unknown_dependency"),
    (b'{"kind": "demo", "target": "a", "notify_url": "http://h/\\ud800"}', 422, "notify_url_not_allowed"),
    (b'{"kind": "demo", "target": "a", "delay": "5m", "run_at": "2030-01-01T00:00:00Z"}', 422, "invalid_request"),
    (b'{"kind": "demo", "target": "a", "priority": "high"}', 422, "invalid_priority"),
    (b'{"kind": "demo", "target": "a", "priority": 1.5}', 422, "invalid_priority"),
    (b'{"kind": "demo", "target": "a", "priority": true}', 422, "invalid_priority"),
    (b'{"kind": "demo", "target": "a", "priority": 9999999999}', 422, "invalid_priority"),
    (b'{"kind": "demo", "target": "a", "concurrency_key": ""}', 422, "invalid_concurrency_key"),
    (b'{"kind": "demo", "target": "a", "concurrency_key": 5}', 422, "invalid_concurrency_key"),
    (b'{"kind": "nope", "target": "a"}', 422, "unknown_kind"),
    (b'{"kind": "", "target": "a"}', 422, "unknown_kind"),
    (b'{"kind": "de\\u0000mo", "target": "a"}', 422, "unknown_kind"),
    (b'{"kind": "\\ud800", "target": "a"}', 422, "unknown_kind"),
    (b'{"kind": "demo"}', 422, "invalid_target"),
    (b'{"kind": "demo", "target": ""}', 422, "invalid_target"),
    (b'{"kind": "demo", "target": 7}', 422, "invalid_target"),
    (b'{"kind": "demo", "target": null}', 422, "invalid_target"),
    (json.dumps({"kind": "demo", "target": "\u00e9" * 257}).encode(), 422, "invalid_target"),  # 514 bytes
    (b'{"kind": "demo", "target": "a\\u0000b"}', 422, "invalid_target"),
    (b'{"kind": "demo", "target": "\\udc00"}', 422, "invalid_target"),
    (b'{"kind": "demo", "target": "a", "payload": []}', 422, "invalid_payload"),
    (b'{"kind": "demo", "target": "a", "payload": "steps=3"}', 422, "invalid_payload"),
    (b'{"kind": "demo", "target": "a", "payload": null}', 422, "invalid_payload"),
    (b'{"kind": "demo", "target": "a", "payload": {"steps": "many"}}', 422, "invalid_payload"),
    (b'{"kind": "demo", "target": "a", "payload": {"fail": [5]}}', 422, "invalid_payload"),
    (b'{"kind": "demo", "target": "a", "payload": {"note": "x\\u0000y"}}', 422, "invalid_payload"),
    (b'{"kind": "demo", "target": "a", "payload": {"note": "\\ud800"}}', 422, "invalid_payload"),
]


async def test_bad_submissions_are_refused_and_change_nothing(client, pool):
    for body, status, code in BAD:
        response = await client.post("/api/jobs", content=body, headers={"content-type": "application/json"})
        case = f"{body[:80]!r} -> {response.status_code} {response.text[:200]}"
        assert response.status_code == status, case
        error = response.json()["error"]
        assert error["code"] == code and error["message"], case
    assert await count_jobs(pool) == 0


async def test_an_optional_field_given_as_null_is_taken_as_absent(client, queue):
    """As a serializer writes a None: every optional field but payload (which
    must be an object when given, see BAD)."""
    nulls = {field: None for field in ("run_at", "delay", "priority", "concurrency_key", "force", "notify_url",
                                       "after", "await_signals", "signal_timeout")}
    response = await client.post("/api/jobs", json={"kind": "demo", "target": "nulls", **nulls})
    assert response.status_code == 201, response.text
    job = await queue.admin_get_job(response.json()["id"])
    assert (job["state"], job["payload"], job["priority"]) == ("queued", {}, 0)


async def test_target_of_exactly_512_bytes_is_accepted(client):
    response = await client.post("/api/jobs", json={"kind": "demo", "target": "\u00e9" * 256})
    assert response.status_code == 201


async def test_payload_over_the_limit_is_413(dsn, pool):
    app = create_app(make_settings(dsn, max_payload=1000))
    async with asgi_client(app) as client:
        # Within the body's allowance, so the database measures the payload itself.
        measured = await client.post("/api/jobs", json={"kind": "demo", "target": "a", "payload": {"n": "x" * 1500}})
        assert measured.status_code == 413
        assert measured.json()["error"]["code"] == "payload_too_large"
        # A body over the allowance is refused on its Content-Length alone.
        declared = await client.post("/api/jobs", json={"kind": "demo", "target": "a", "payload": {"n": "x" * 40_000}})
        assert declared.status_code == 413
        assert declared.json()["error"]["code"] == "payload_too_large"
        fits = await client.post("/api/jobs", json={"kind": "demo", "target": "a", "payload": {"n": "x" * 900}})
        assert fits.status_code == 201
    assert await count_jobs(pool) == 1


async def test_a_payload_that_fits_is_taken_however_its_body_escapes_it(dsn, pool):
    """json.dumps writes "é" as \u00e9: six bytes in the body for two stored.
    The payload is measured as stored, and its body never refused for that."""
    app = create_app(make_settings(dsn, max_payload=20_000))
    async with asgi_client(app) as client:
        body = json.dumps({"kind": "demo", "target": "accents", "payload": {"note": "\u00e9" * 9000}})
        assert len(body) > 3 * 18_000
        taken = await client.post("/api/jobs", content=body, headers={"content-type": "application/json"})
        assert taken.status_code == 201, taken.text
        too_big = json.dumps({"kind": "demo", "target": "more", "payload": {"note": "\u00e9" * 10_500}})
        refused = await client.post("/api/jobs", content=too_big, headers={"content-type": "application/json"})
        assert refused.status_code == 413 and "payload is over 20000 bytes" in refused.text
    assert await count_jobs(pool) == 1


async def test_api_token_guards_submissions_only(dsn, pool):
    app = create_app(make_settings(dsn, api_token="submit-secret"))
    async with asgi_client(app) as client:
        body = {"kind": "demo", "target": "a"}
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": "Basic c3VibWl0LXNlY3JldA=="},
                        {"authorization": "Bearer"}):
            response = await client.post("/api/jobs", json=body, headers=headers)
            assert response.status_code == 401
            assert response.json()["error"]["code"] == "unauthorized"
        assert await count_jobs(pool) == 0
        ok = await client.post("/api/jobs", json=body, headers={"authorization": "Bearer submit-secret"})
        assert ok.status_code == 201
        assert (await client.get(f"/api/jobs/{ok.json()['id']}")).status_code == 200
        assert (await client.get("/api/kinds")).status_code == 200


async def test_unknown_api_routes_answer_json(client):
    missing = await client.get("/api/nothing/here")
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
    wrong_method = await client.delete("/api/jobs")
    assert wrong_method.status_code == 405
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    outside = await client.get("/no-such-page")
    # JSON errors everywhere (issue 9), also outside /api
    assert outside.status_code == 404 and outside.json()["error"]["code"] == "not_found"
