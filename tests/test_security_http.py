"""The HTTP surface a stranger sees (issue 9's low findings): JSON bodies must
say they are JSON, errors are JSON everywhere and tell nothing about our
internals, /metrics is not for everyone, and the UI's pages carry CSP,
nosniff and anti-framing headers."""

from __future__ import annotations

import asyncio
import json
import sys

import httpx
import pytest

from jobfeed.worker.tasks import Registry, registry
from jobfeed.api.app import create_app
from jobfeed.api.headers import HEADERS
from servers import ADMIN_TOKEN, asgi_client, make_settings, serve

GOOD_JOB = json.dumps({"kind": "demo", "target": "t"}).encode()


@pytest.fixture
async def client(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as c:
        yield c


@pytest.mark.parametrize("content_type", [
    "text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x",
    "application/jsonp", "text/json+html", "json", "application/xml",
])
async def test_json_routes_refuse_other_content_types_with_415(client, pool, content_type):
    """Before: any Content-Type was accepted, so a plain HTML form could post a job."""
    for path, body in (("/api/jobs", GOOD_JOB), ("/api/admin/session", json.dumps({"token": ADMIN_TOKEN}).encode())):
        response = await client.post(path, content=body, headers={"content-type": content_type})
        if path == "/api/jobs" and content_type.startswith("multipart/form-data"):
            # submissions with files: JSON is no multipart body (another site's form: tests/test_files_uploads.py)
            assert (response.status_code, response.json()["error"]["code"]) == (400, "invalid_multipart")
            continue
        assert response.status_code == 415, (path, content_type, response.text)
        assert response.json()["error"]["code"] == "unsupported_media_type"
    assert "set-cookie" not in response.headers
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


@pytest.mark.parametrize("coding", ["gzip", "br, gzip", "deflate"])
async def test_a_compressed_body_is_refused_with_415(client, pool, coding):
    """Before: the header was ignored, so a body marked gzip was taken as it
    came (and a body really compressed called invalid JSON)."""
    job = json.dumps({"kind": "demo", "target": "z"}).encode()
    for body, content_type in ((job, "application/json"),
                               (b'--b\r\nContent-Disposition: form-data; name="job"\r\n\r\n' + job + b"\r\n--b--\r\n",
                                "multipart/form-data; boundary=b")):
        response = await client.post("/api/jobs", content=body,
                                     headers={"content-type": content_type, "content-encoding": coding})
        assert (response.status_code, response.json()["error"]["code"]) == (415, "unsupported_media_type"), response.text
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0
    plain = await client.post("/api/jobs", content=job, headers={"content-type": "application/json",
                                                                 "content-encoding": "identity"})
    assert plain.status_code == 201


async def test_a_body_without_content_type_is_refused(client, pool):
    response = await client.post("/api/jobs", content=GOOD_JOB)
    assert response.status_code == 415
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/vnd.jobfeed+json",
                                          "application/merge-patch+json"])
async def test_json_and_plus_json_types_are_accepted(client, content_type):
    response = await client.post("/api/jobs", content=GOOD_JOB, headers={"content-type": content_type})
    assert response.status_code in (200, 201), response.text


async def test_requests_without_a_body_need_no_content_type(client):
    job_id = (await client.post("/api/jobs", json={"kind": "demo", "target": "c"})).json()["id"]
    response = await client.post(f"/api/admin/jobs/{job_id}/cancel",
                                 headers={"authorization": f"Bearer {ADMIN_TOKEN}"})
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("body, message", [
    (b"{", "the body is not valid JSON"), (b'{"kind": "demo",', "the body is not valid JSON"),
    (b"\xff\xfe", "the body is not valid JSON"), (b'{"a": NaN}', "the body is not valid JSON"),
    (b"[" * 30_000 + b"]" * 30_000, "the body's JSON is nested too deeply"),  # valid, but past the parser
    (b'{"a": ' + b"9" * 5000 + b"}", f"a number in the body has more than {sys.get_int_max_str_digits()} digits"),
])
async def test_invalid_json_says_so_without_parser_internals(client, body, message):
    response = await client.post("/api/jobs", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 400
    error = response.json()["error"]
    assert error == {"code": "invalid_json", "message": message}


@pytest.mark.parametrize("method, path, status, code", [
    ("GET", "/nope", 404, "not_found"),
    ("GET", "/static/nope.js", 404, "not_found"),
    ("GET", "/api/nope", 404, "not_found"),
    ("DELETE", "/", 405, "method_not_allowed"),
    ("POST", "/healthz", 405, "method_not_allowed"),
    ("PUT", "/api/jobs", 405, "method_not_allowed"),
])
async def test_errors_are_json_everywhere(client, method, path, status, code):
    """Before: errors outside /api were plain text."""
    response = await client.request(method, path)
    assert response.status_code == status
    assert response.headers["content-type"].startswith("application/json")
    assert response.json()["error"]["code"] == code
    if status == 405:
        assert response.headers["allow"]


@pytest.mark.parametrize("method, path, allowed", [
    ("PUT", "/api/admin/session", {"GET", "HEAD", "POST", "DELETE"}),
    ("GET", "/api/admin/jobs/retry", {"POST"}),  # not read as a job id "retry"
    ("DELETE", "/api/admin/jobs/cancel", {"POST"}),
    ("GET", "/api/requests/00000000-0000-0000-0000-000000000000/leave", {"POST"}),
])
async def test_a_wrong_method_is_405_naming_every_method_the_path_takes(client, method, path, allowed):
    response = await client.request(method, path)
    assert response.status_code == 405 and response.json()["error"]["code"] == "method_not_allowed"
    assert set(response.headers["allow"].split(", ")) == allowed


async def test_head_of_a_path_several_methods_serve_answers_as_get(client):
    head, get = await client.head("/api/admin/session"), await client.get("/api/admin/session")
    assert head.status_code == get.status_code == 200 and head.content == b""


@pytest.mark.parametrize("path, location", [
    ("/api/kinds/", "/api/kinds"),
    ("/admin/?tab=jobs&q=a%20b", "/admin?tab=jobs&q=a%20b"),
    ("/static", "/static/"),
])
async def test_a_slash_too_many_or_too_few_redirects_to_a_path_not_the_host_header(client, path, location):
    moved = await client.get(path, headers={"host": "attacker.example"})
    assert moved.status_code == 307 and moved.headers["location"] == location


@pytest.mark.parametrize("path", ["/api/nothing/", "/jobs/", "/static/app.js/"])
async def test_a_path_no_route_takes_either_way_is_404(client, path):
    response = await client.get(path, headers={"host": "attacker.example"})
    assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"


async def test_metrics_without_a_token_answer_loopback_only(dsn):
    app = create_app(make_settings(dsn))
    async with app.router.lifespan_context(app):
        for client_addr, status in ((("127.0.0.1", 5000), 200), (("::1", 5000), 200),
                                    (("10.1.2.3", 5000), 403), (("192.168.0.9", 5000), 403)):
            transport = httpx.ASGITransport(app=app, client=client_addr)
            async with httpx.AsyncClient(transport=transport, base_url="http://jobfeed.test") as c:
                response = await c.get("/metrics")
                assert response.status_code == status, client_addr
                if status == 403:
                    assert response.json()["error"]["code"] == "forbidden"
                    assert "jobfeed_jobs" not in response.text


async def test_metrics_with_a_token_need_it_from_everywhere(dsn):
    app = create_app(make_settings(dsn, metrics_token="scrape-token-0123456789"))
    async with app.router.lifespan_context(app):
        for client_addr in (("127.0.0.1", 5000), ("10.1.2.3", 5000)):
            transport = httpx.ASGITransport(app=app, client=client_addr)
            async with httpx.AsyncClient(transport=transport, base_url="http://jobfeed.test") as c:
                for headers in ({}, {"authorization": "Bearer wrong"}, {"authorization": f"Bearer {ADMIN_TOKEN}"}):
                    response = await c.get("/metrics", headers=headers)
                    assert response.status_code == 401, (client_addr, headers)
                    assert response.json()["error"]["code"] == "unauthorized"
                ok = await c.get("/metrics", headers={"authorization": "Bearer scrape-token-0123456789"})
                assert ok.status_code == 200 and "jobfeed_" in ok.text


@pytest.mark.parametrize("path", ["/", "/admin", "/jobs/0190c7d2-0000-7000-8000-000000000000"])
async def test_ui_pages_carry_security_headers(client, path):
    response = await client.get(path)
    assert response.status_code == 200
    csp = response.headers["content-security-policy"]
    assert "default-src 'self'" in csp and "frame-ancestors 'none'" in csp and "object-src 'none'" in csp
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["referrer-policy"] == "same-origin"


async def test_static_files_and_api_answers_are_nosniff(client):
    assert (await client.get("/static/app.css")).headers["x-content-type-options"] == "nosniff"
    assert (await client.get("/api/kinds")).headers["x-content-type-options"] == "nosniff"


class OddError(BaseException):
    pass


# CancelledError too: validate() is called, not awaited, so one out of it is its
# own; re-raised as it was, uvicorn answered it with a bare text 500.
RAISED = {"runtime": RuntimeError, "exit": SystemExit, "interrupt": KeyboardInterrupt, "odd": OddError,
          "cancelled": asyncio.CancelledError}


def _raises(payload: dict) -> None:
    raise RAISED[payload["raise"]]("from validate()")


async def hook_raises(job, ctx):
    return None


def known_for_this_test(monkeypatch, kind: str, validate, handler) -> None:
    """A kind known to this process for one test only: left in the registry,
    one whose validate() raises made the schemathesis test's server
    (tests/test_security_schema.py, same process) answer 500 to its fuzzed
    submissions."""
    own = Registry()
    own.task(kind, validate=validate)(handler)
    monkeypatch.setitem(registry._specs, kind, own.get(kind))


@pytest.fixture
def hook_raises_kind(monkeypatch):
    known_for_this_test(monkeypatch, "hook_raises", _raises, hook_raises)


async def test_a_validate_that_raises_anything_answers_a_json_500_with_the_headers(dsn, pool, hook_raises_kind):
    """A real server: past the app's handler for Exception, uvicorn answered a
    SystemExit, KeyboardInterrupt or other BaseException from a kind's validate()
    with a bare text 500, and even a RuntimeError's JSON 500 lacked the
    security headers (Starlette sends it outside every middleware of ours)."""
    async with serve(dsn) as server:
        for name in RAISED:
            # a client each: uvicorn closes the connection after an error the app raised
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as c:
                response = await c.post("/api/jobs", json={"kind": "hook_raises", "target": name,
                                                           "payload": {"raise": name}})
            assert response.status_code == 500, (name, response.text)
            assert response.json() == {"error": {"code": "internal_error", "message": "internal error"}}, name
            assert {k: response.headers.get(k) for k in HEADERS} == HEADERS, name
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as c:
            assert (await c.get("/api/kinds")).status_code == 200  # the server goes on
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


def _long_refusal(payload: dict) -> None:
    raise ValueError("x" * 1_000_000)


async def test_a_validate_refusal_is_clamped_as_any_error_message(client, monkeypatch):
    """Before: a ValueError's 1 MB message came back whole in the 422."""
    from jobfeed.worker.redact import MAX_MESSAGE
    known_for_this_test(monkeypatch, "hook_refuses_at_length", _long_refusal, hook_raises)
    response = await client.post("/api/jobs", json={"kind": "hook_refuses_at_length", "target": "t"})
    assert (response.status_code, response.json()["error"]["code"]) == (422, "invalid_payload")
    assert response.json()["error"]["message"] == "x" * MAX_MESSAGE
