"""Admin routes: who gets in (bearer, session cookie, nobody without a configured
token), true views, the paginated list, retry, cancel and stats."""

from __future__ import annotations

import base64
import uuid

import pytest

from jobfeed.api import auth
from jobfeed.api.app import create_app
from servers import ADMIN_TOKEN, UNKNOWN_JOB_ID, asgi_client, make_settings

BEARER = {"authorization": f"Bearer {ADMIN_TOKEN}"}
ADMIN_ROUTES = [
    ("GET", "/api/admin/jobs"), ("GET", f"/api/admin/jobs/{UNKNOWN_JOB_ID}"),
    ("POST", f"/api/admin/jobs/{UNKNOWN_JOB_ID}/retry"), ("POST", f"/api/admin/jobs/{UNKNOWN_JOB_ID}/cancel"),
    ("GET", "/api/admin/stats"), ("GET", "/api/admin/events"), ("GET", "/api/admin/workers"),
    ("GET", "/api/admin/charts"),
    ("POST", "/api/admin/kinds/demo/pause"), ("POST", "/api/admin/kinds/demo/resume"),
    ("POST", "/api/admin/jobs/retry"), ("POST", "/api/admin/jobs/cancel"),
]


@pytest.fixture
async def client(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as c:
        yield c


async def submit(client, target: str, kind: str = "demo") -> dict:
    response = await client.post("/api/jobs", json={"kind": kind, "target": target})
    assert response.status_code == 201
    return response.json()


async def test_admin_routes_refuse_without_valid_credentials(client):
    forged = auth.session_value("not-the-token", uuid.uuid4(), 3600)
    for method, path in ADMIN_ROUTES:
        for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Basic {ADMIN_TOKEN}"},
                        {"cookie": f"{auth.SESSION_COOKIE}={forged}", "origin": "http://jobfeed.test"},
                        {"cookie": f"{auth.SESSION_COOKIE}={ADMIN_TOKEN}", "origin": "http://jobfeed.test"}):
            response = await client.request(method, path, headers=headers)
            assert response.status_code == 401, (method, path, headers)
            assert response.json()["error"]["code"] == "unauthorized"
            assert response.headers["www-authenticate"].startswith("Bearer")


async def test_without_an_admin_token_admin_stays_closed(dsn):
    async with asgi_client(create_app(make_settings(dsn, admin_token=None))) as client:
        for method, path in ADMIN_ROUTES:
            response = await client.request(method, path, headers={"authorization": "Bearer "})
            assert response.status_code == 401
            assert "JOBFEED_ADMIN_TOKEN" in response.json()["error"]["message"]
        response = await client.request("GET", "/api/admin/stats", headers={"authorization": "Bearer None"})
        assert response.status_code == 401
        for token in ("", "any-token-at-all-16"):
            sign_in = await client.post("/api/admin/session", json={"token": token})
            assert sign_in.status_code == 401 and "JOBFEED_ADMIN_TOKEN" in sign_in.json()["error"]["message"]


async def test_bearer_token_lets_admin_in(client):
    response = await client.get("/api/admin/stats", headers=BEARER)
    assert response.status_code == 200
    assert {"now", "counts", "oldest_due_seconds", "throughput"} <= set(response.json())


async def test_over_https_at_the_root_the_session_cookie_is_host_only(client):
    """__Host-: Secure, Path=/, no Domain (under a host's prefix: tests/test_embedding.py)."""
    cookie = (await client.post("https://testserver/api/admin/session", json={"token": ADMIN_TOKEN})
              ).headers["set-cookie"]
    assert cookie.startswith(auth.SECURE_SESSION_COOKIE + "=") and "Path=/;" in cookie
    assert "Secure" in cookie and "Domain" not in cookie


async def test_session_cookie_signs_in_and_out(client):
    async def signed_in(**kwargs) -> bool:
        response = await client.get("/api/admin/session", **kwargs)
        assert response.status_code == 200
        return response.json()["signed_in"]

    assert not await signed_in()
    wrong = await client.post("/api/admin/session", json={"token": "guess"})
    assert wrong.status_code == 401 and auth.SESSION_COOKIE not in client.cookies
    # a field the route does not know is refused, as in every other body (the right token no help)
    for body in ({"tok": ADMIN_TOKEN}, {"token": 5}, [ADMIN_TOKEN], {"token": ADMIN_TOKEN, "remember": True}):
        bad = await client.post("/api/admin/session", json=body)
        assert bad.status_code == 422 and bad.json()["error"]["code"] == "invalid_request"
        assert auth.SESSION_COOKIE not in client.cookies
    assert (await client.post("/api/admin/session", content=b"{",
                              headers={"content-type": "application/json"})).status_code == 400

    response = await client.post("/api/admin/session", json={"token": ADMIN_TOKEN})
    assert response.status_code == 200
    set_cookie = response.headers["set-cookie"]
    assert "httponly" in set_cookie.lower() and "samesite=strict" in set_cookie.lower()
    assert "Path=/" in set_cookie
    value = client.cookies[auth.SESSION_COOKIE]
    assert ADMIN_TOKEN not in value and ADMIN_TOKEN not in set_cookie
    assert (await client.get("/api/admin/stats")).status_code == 200
    assert await signed_in()

    # A cookie with its expiry pushed out no longer matches its signature, and an
    # expired one is refused.
    sid, expires, signature = value.split(".")
    for forged in (f"{sid}.{int(expires) + 10**6}.{signature}",
                   auth.session_value(ADMIN_TOKEN, sid, 60, now=1_000_000)):
        response = await client.get("/api/admin/stats", headers={"cookie": f"{auth.SESSION_COOKIE}={forged}"})
        assert response.status_code == 401

    signed_out = await client.delete("/api/admin/session", headers={"origin": "http://jobfeed.test"})
    assert signed_out.status_code == 204
    assert auth.SESSION_COOKIE not in client.cookies
    assert (await client.get("/api/admin/stats")).status_code == 401
    assert not await signed_in()
    assert await signed_in(headers=BEARER)


async def test_admin_view_shows_true_state_and_attempts(client, queue):
    job = await submit(client, "mail-1")
    (first,) = await queue.claim(["demo"], 1, "worker-a")
    await queue.fail_transient(first.id, first.generation, "http_503", "upstream busy")

    public = (await client.get(f"/api/jobs/{job['id']}")).json()
    assert public["status"] == "processing" and public["error"] is None

    response = await client.get(f"/api/admin/jobs/{job['id']}", headers=BEARER)
    assert response.status_code == 200
    view = response.json()
    assert view["state"] == "queued" and view["attempts"] == 1 and view["generation"] == 1
    assert view["last_error"] == {"code": "http_503", "message": "upstream busy"}
    assert view["payload"] == {} and view["max_attempts"] == 5
    (attempt,) = view["attempts_log"]
    assert attempt["worker_id"] == "worker-a" and attempt["outcome"] == "transient"
    assert attempt["error"] == {"code": "http_503", "message": "upstream busy"}
    assert attempt["started_at"] and attempt["finished_at"]

    for bad in (str(uuid.uuid4()), "nope"):
        missing = await client.get(f"/api/admin/jobs/{bad}", headers=BEARER)
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_cancel_and_retry(client, pool):
    job = await submit(client, "vid")
    url = f"/api/admin/jobs/{job['id']}"

    retry_unfinished = await client.post(f"{url}/retry", headers=BEARER)
    assert retry_unfinished.status_code == 409 and retry_unfinished.json()["error"]["code"] == "invalid_state"

    canceled = await client.post(f"{url}/cancel", headers=BEARER)
    assert canceled.status_code == 200 and canceled.json()["state"] == "canceled"
    assert (await client.get(f"/api/jobs/{job['id']}")).json()["status"] == "canceled"
    version = await pool.fetchval("select version from jobfeed.jobs where id = $1", uuid.UUID(job["id"]))

    again = await client.post(f"{url}/cancel", headers=BEARER)
    assert again.status_code == 409 and again.json()["error"]["code"] == "invalid_state"
    assert await pool.fetchval("select version from jobfeed.jobs where id = $1", uuid.UUID(job["id"])) == version

    # While another unfinished job holds the target, the old one cannot come back.
    newer = await submit(client, "vid")
    busy = await client.post(f"{url}/retry", headers=BEARER)
    assert busy.status_code == 409 and busy.json()["error"]["code"] == "target_busy"
    assert (await client.post(f"/api/admin/jobs/{newer['id']}/cancel", headers=BEARER)).status_code == 200

    retried = await client.post(f"{url}/retry", headers=BEARER)
    assert retried.status_code == 200
    assert retried.json()["state"] == "queued" and retried.json()["attempts"] == 0

    for bad in (str(uuid.uuid4()), "12"):
        for action in ("retry", "cancel"):
            missing = await client.post(f"/api/admin/jobs/{bad}/{action}", headers=BEARER)
            assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 2


async def test_list_pages_newest_first_with_filters(client, queue):
    await queue.register_kind("other", max_attempts=1, lease=5, backoff=(1,))
    ids = [(await submit(client, f"t{i}"))["id"] for i in range(7)]
    other = (await submit(client, "x", kind="other"))["id"]
    await client.post(f"/api/admin/jobs/{ids[0]}/cancel", headers=BEARER)

    seen, cursor, pages = [], None, 0
    while True:
        params = {"limit": 3, **({"cursor": cursor} if cursor else {})}
        response = await client.get("/api/admin/jobs", params=params, headers=BEARER)
        assert response.status_code == 200
        page = response.json()
        assert len(page["jobs"]) <= 3
        seen += [j["id"] for j in page["jobs"]]
        pages += 1
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == [other] + ids[::-1] and pages == 3

    demo = (await client.get("/api/admin/jobs", params={"kind": "demo"}, headers=BEARER)).json()
    assert [j["id"] for j in demo["jobs"]] == ids[::-1] and demo["next_cursor"] is None
    canceled = (await client.get("/api/admin/jobs", params={"state": "canceled"}, headers=BEARER)).json()
    assert [(j["id"], j["state"]) for j in canceled["jobs"]] == [(ids[0], "canceled")]
    empty = (await client.get("/api/admin/jobs", params={"state": "", "kind": ""}, headers=BEARER)).json()
    assert len(empty["jobs"]) == 8
    assert {"state", "attempts", "payload", "generation"} <= set(empty["jobs"][0])


BAD_PARAMS = [
    {"state": "done"}, {"state": "QUEUED"}, {"limit": "0"}, {"limit": "501"}, {"limit": "-1"},
    {"limit": "ten"}, {"cursor": "!!!"}, {"cursor": "abc"},
    {"cursor": base64.urlsafe_b64encode(b'["yesterday", "x"]').decode()},
    {"cursor": base64.urlsafe_b64encode(b'["2026-01-01T00:00:00", "8f4c3b9e-2d4a-4c55-9b0e-0a3d1f2e9c11"]').decode()},
    {"cursor": base64.urlsafe_b64encode(b'{"a": 1}').decode()},
    {"kind": "a\x00b"},
    {"error_code": "http_404"}, {"state": "failed", "Kind": "demo"},  # not list filters: never dropped
    [("state", "queued"), ("state", "failed")],
]


async def test_bad_list_parameters_are_422(client):
    for params in BAD_PARAMS:
        response = await client.get("/api/admin/jobs", params=params, headers=BEARER)
        assert response.status_code == 422, (params, response.text)
        assert response.json()["error"]["code"] == "invalid_query"


async def test_stats_counts_by_kind_and_state(client, queue):
    for i in range(3):
        await submit(client, f"s{i}")
    (claimed,) = await queue.claim(["demo"], 1, "w")
    await queue.complete(claimed.id, claimed.generation, None)
    stats = (await client.get("/api/admin/stats", headers=BEARER)).json()
    assert stats["counts"] == {"demo": {"queued": 2, "completed": 1}}
    assert stats["oldest_due_seconds"] >= 0
    assert sum(m["completed"] for m in stats["throughput"]) == 1
