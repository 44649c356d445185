"""Admin sign-in hardening (issue 9's attacks 1, 3 and 4): the generated token
file is never seen empty, empty or short tokens never sign in, signing out
revokes the cookie in every API process, and cookie-authenticated writes from
another origin are refused."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import subprocess
import sys
import uuid

import httpx
import pytest

from jobfeed.api import auth
from jobfeed.api.app import create_app
from jobfeed.worker.startup import UsageError, admin_token
from jobfeed.worker.settings import SettingError, Settings
from servers import ADMIN_TOKEN, ROOT, UNKNOWN_JOB_ID, Watcher, asgi_client, make_settings, serve
from waiting import eventually

ORIGIN = "http://jobfeed.test"


def _read_token(data_dir: str, barrier, results) -> None:
    barrier.wait()
    try:
        results.put(admin_token(Settings(data_dir=data_dir)))
    except Exception as exc:  # noqa: BLE001 (reported to the parent)
        results.put(f"error: {exc}")


def test_processes_starting_together_all_read_one_whole_token(tmp_path):
    """Before: the file was created empty and written afterwards, and a process
    starting at the same moment read "" (and "" signed anyone in)."""
    ctx = multiprocessing.get_context("fork")
    for n in range(15):
        data_dir = str(tmp_path / str(n))
        barrier, results = ctx.Barrier(6), ctx.Queue()
        procs = [ctx.Process(target=_read_token, args=(data_dir, barrier, results)) for _ in range(6)]
        for p in procs:
            p.start()
        tokens = [results.get(timeout=20) for _ in procs]
        for p in procs:
            p.join(10)
        assert len(set(tokens)) == 1, tokens
        assert len(tokens[0]) >= 16, tokens
        assert os.listdir(data_dir) == ["admin_token"], "no temporary file left behind"


def test_short_or_empty_token_file_is_refused(tmp_path):
    data_dir = str(tmp_path)
    with open(os.path.join(data_dir, "admin_token"), "w") as f:
        f.write("")
    with pytest.raises(UsageError, match="admin token in .*: the token is empty: delete the file"):
        admin_token(Settings(data_dir=data_dir))


@pytest.mark.parametrize("value", ["short", "x" * 15])
def test_short_admin_token_setting_is_refused(value):
    with pytest.raises(SettingError, match="JOBFEED_ADMIN_TOKEN"):
        Settings.from_env({"JOBFEED_ADMIN_TOKEN": value})
    assert Settings.from_env({"JOBFEED_ADMIN_TOKEN": "x" * 16}).admin_token == "x" * 16


@pytest.mark.parametrize("name", ["JOBFEED_ADMIN_TOKEN", "JOBFEED_API_TOKEN", "JOBFEED_METRICS_TOKEN"])
@pytest.mark.parametrize("value", [" ", "a-token-of-length-20 ", "a token of length 20", "a-token-of-len\t20"])
def test_a_token_no_header_could_carry_is_refused(name, value):
    # a header value loses its surrounding spaces: such a token could never be presented
    with pytest.raises(SettingError, match=f"{name}: a token is printable ASCII without spaces"):
        Settings.from_env({name: value})
    assert getattr(Settings.from_env({name: "a-token-of-length-20"}), name[8:].lower()) == "a-token-of-length-20"


def test_short_admin_token_stops_the_command_at_start():
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBFEED_")}
    env.update({"JOBFEED_ADMIN_TOKEN": "tooshort", "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"})
    done = subprocess.run([sys.executable, "-m", "jobfeed.worker.cli", "api"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert "JOBFEED_ADMIN_TOKEN" in done.stderr and "16" in done.stderr, done.stderr


def test_empty_tokens_never_match():
    assert not auth.token_matches("", "")
    assert not auth.token_matches("abc", "abc")
    assert auth.token_matches(ADMIN_TOKEN, ADMIN_TOKEN)


async def test_empty_or_short_token_never_signs_in(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        for token in ("", " ", ADMIN_TOKEN[:8]):
            response = await client.post("/api/admin/session", json={"token": token})
            assert response.status_code == 401, token
            assert not client.cookies


async def sign_in(client: httpx.AsyncClient) -> str:
    response = await client.post("/api/admin/session", json={"token": ADMIN_TOKEN})
    assert response.status_code == 200, response.text
    return client.cookies[auth.SESSION_COOKIE]


async def test_signing_out_revokes_the_cookie_in_every_api_process(dsn):
    """Before: the same cookie worked for 12 more hours after sign-out."""
    async with serve(dsn) as a, serve(dsn) as b:
        async with httpx.AsyncClient(base_url=a.url, timeout=10) as client:
            cookie = await sign_in(client)
        jar = {"cookie": f"{auth.SESSION_COOKIE}={cookie}"}
        for server in (a, b):
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as other:
                assert (await other.get("/api/admin/stats", headers=jar)).status_code == 200

        async with httpx.AsyncClient(base_url=a.url, timeout=10) as client:
            out = await client.delete("/api/admin/session", headers={**jar, "origin": a.url})
            assert out.status_code == 204
            assert auth.SESSION_COOKIE in out.headers["set-cookie"] and "Max-Age=0" in out.headers["set-cookie"]
        for server in (a, b):
            async with httpx.AsyncClient(base_url=server.url, timeout=10) as other:
                assert (await other.get("/api/admin/stats", headers=jar)).status_code == 401


async def test_signing_out_ends_the_sessions_open_admin_streams_in_every_process(dsn):
    """Before: a dashboard stream opened with the cookie went on delivering true
    views (payloads included) of every job after its session was signed out."""
    async with serve(dsn) as a, serve(dsn) as b:
        async with httpx.AsyncClient(base_url=a.url, timeout=10) as client:
            cookie = await sign_in(client)
        jar = {"cookie": f"{auth.SESSION_COOKIE}={cookie}"}
        watchers = {"cookie": Watcher(httpx.AsyncClient(base_url=b.url, timeout=10), "/api/admin/events", jar),
                    "token": Watcher(httpx.AsyncClient(base_url=b.url, timeout=10), "/api/admin/events",
                                     {"authorization": f"Bearer {ADMIN_TOKEN}"})}
        tasks = [asyncio.create_task(w.run()) for w in watchers.values()]
        try:
            def targets(name: str) -> list[str]:
                return [e.json()["target"] for e in watchers[name].events if e.event == "job"]

            async with httpx.AsyncClient(base_url=a.url, timeout=10) as client:
                await eventually(lambda: asyncio.sleep(0, all(w.events for w in watchers.values())),
                                 timeout=10, what="both streams ready")
                await client.post("/api/jobs", json={"kind": "demo", "target": "before"})
                await eventually(lambda: asyncio.sleep(0, all(targets(n) == ["before"] for n in watchers)),
                                 timeout=10, what="both streams saw the job")
                out = await client.delete("/api/admin/session", headers={**jar, "origin": a.url})
                assert out.status_code == 204
                await client.post("/api/jobs", json={"kind": "demo", "target": "after"})
            await eventually(lambda: asyncio.sleep(0, targets("token") == ["before", "after"]),
                             timeout=10, what="the token's stream saw the next job")
            await asyncio.wait_for(tasks[0], 10)  # the cookie's stream ended ...
            assert targets("cookie") == ["before"]  # ... without the job submitted after sign-out
        finally:
            for task in tasks:
                task.cancel()
            for watcher in watchers.values():
                await watcher.client.aclose()


async def test_over_https_the_cookie_is_host_prefixed_and_secure(dsn):
    app = create_app(make_settings(dsn))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="https://jobfeed.test") as client:
            response = await client.post("/api/admin/session", json={"token": ADMIN_TOKEN})
            cookie = response.headers["set-cookie"]
            assert cookie.startswith(auth.SECURE_SESSION_COOKIE + "=")
            assert "Secure" in cookie and "Path=/" in cookie and "Domain" not in cookie
            assert (await client.get("/api/admin/stats")).status_code == 200


@pytest.fixture
async def signed_in(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        await sign_in(client)
        yield client


async def submit(client) -> str:
    response = await client.post("/api/jobs", json={"kind": "demo", "target": str(uuid.uuid4())})
    assert response.status_code == 201
    return response.json()["id"]


@pytest.mark.parametrize("headers", [
    {},                                                      # a form post from an old browser
    {"origin": "http://jobfeed.test:8178"},                  # another port: SameSite does not tell them apart
    {"origin": "https://jobfeed.test"},
    {"origin": "null"},
    {"sec-fetch-site": "same-site"},
    {"sec-fetch-site": "cross-site"},
    # a header twice: every copy must be ours, not the first alone
    [("origin", ORIGIN), ("origin", "http://evil.test")],
    [("sec-fetch-site", "same-origin"), ("sec-fetch-site", "cross-site")],
])
async def test_cookie_writes_from_another_origin_are_refused(signed_in, pool, headers):
    """Before: a page on 127.0.0.1:8178 that auto-submitted a form canceled a job."""
    job_id = await submit(signed_in)
    response = await signed_in.post(f"/api/admin/jobs/{job_id}/cancel", headers=headers)
    assert response.status_code == 403, response.text
    assert response.json()["error"]["code"] == "csrf"
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", uuid.UUID(job_id)) == "queued"
    # Sign-out is a write too: a foreign page cannot sign the admin out.
    assert (await signed_in.delete("/api/admin/session", headers=headers)).status_code == 403
    assert (await signed_in.get("/api/admin/stats")).status_code == 200


@pytest.mark.parametrize("headers", [{"origin": ORIGIN}, {"sec-fetch-site": "same-origin"}])
async def test_cookie_writes_from_our_own_pages_pass(signed_in, headers):
    job_id = await submit(signed_in)
    response = await signed_in.post(f"/api/admin/jobs/{job_id}/cancel", headers=headers)
    assert response.status_code == 200, response.text


async def test_bearer_writes_need_no_origin(dsn):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        job_id = await submit(client)
        response = await client.post(f"/api/admin/jobs/{job_id}/cancel",
                                     headers={"authorization": f"Bearer {ADMIN_TOKEN}",
                                              "origin": "http://evil.test"})
        assert response.status_code == 200


@pytest.mark.parametrize("value", ["x", "²", "1" * 5000, f"{UNKNOWN_JOB_ID}.²²²².00",
                                   f"{UNKNOWN_JOB_ID}.{'9' * 5000}.ab",
                                   "not-a-uuid-at-all-not-a-uuid-at-all.99999999999.ab"])
async def test_malformed_session_cookies_are_401_not_500(dsn, value):
    async with asgi_client(create_app(make_settings(dsn))) as client:
        cookie = f"{auth.SESSION_COOKIE}={value}".encode("utf-8")  # as raw bytes: the server must cope
        response = await client.get("/api/admin/stats", headers={"cookie": cookie})
        assert response.status_code == 401
