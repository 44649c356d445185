"""jobfeed inside a host app: create_app(pool=, identify=), the host's lifespan
entering jobfeed's, every URL under the mount's prefix, and the example host app
(examples/host) driven by a real uvicorn, a real worker and chromium."""

from __future__ import annotations

import contextlib
import gc
import os
import re
import sys
import uuid

import asyncpg
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount, Route
from starlette.responses import PlainTextResponse

import jobfeed.api
from jobfeed.worker.startup import GC_YOUNG
from conftest import JOBFEED, skip_or_fail, worker_env
from waiting import eventually
from servers import ADMIN_TOKEN, ROOT, Process, ThreadServer, api_env, free_port, make_settings, read_events

try:
    from playwright.async_api import async_playwright, expect
except ImportError:
    async_playwright = expect = None

CHROMIUM = os.environ.get("JOBFEED_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def host_app(dsn: str, **create):
    """A host with its own route and pool, jobfeed mounted at /jobs."""
    state: dict = {}
    jobs = jobfeed.api.create_app(make_settings(dsn), pool=lambda: state["pool"], **create)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        state["pool"] = await asyncpg.create_pool(dsn, min_size=1, max_size=4)  # a plain pool of the host's
        try:
            async with jobfeed.api.lifespan(jobs):
                yield
        finally:
            await state["pool"].close()

    async def hello(request):
        return PlainTextResponse("the host's own route")

    app = Starlette(routes=[Route("/", hello), Mount("/jobs", jobs)], lifespan=lifespan)
    return app, jobs, state


async def test_a_host_mounts_jobfeed_under_a_prefix_with_its_pool(dsn, queue):
    app, jobs, state = host_app(dsn, identify=lambda request: request.headers.get("x-user"))
    server = ThreadServer(app, settings=jobs.state.services.settings)
    server.app = jobs  # whose streams to end when the server stops
    async with server, httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        svc = jobs.state.services
        assert svc.pool is state["pool"]  # jobfeed uses the host's pool, not one of its own

        assert (await client.get("/")).text == "the host's own route"
        made = await client.post("/jobs/api/jobs", json={"kind": "demo", "target": "t1", "payload": {"steps": 1}})
        assert made.status_code == 201, made.text
        job = made.json()
        assert made.headers["location"] == f"/jobs/api/jobs/{job['id']}"
        assert (await client.get(made.headers["location"])).json()["id"] == job["id"]
        assert (await client.get("/api/jobs")).status_code == 404  # nothing outside the prefix

        # The live feed listens through the host's pool: a change made elsewhere reaches the stream.
        async with client.stream("GET", f"/jobs/api/jobs/{job['id']}/events") as stream:
            # the feed's ': ping' comments come on a clock of their own, between any two events
            events = (e async for e in read_events(stream) if e.comment is None)
            assert (await anext(events)).json()["status"] == "queued"
            await queue.cancel(uuid.UUID(job["id"]))  # (the host's pool lives on the server's loop)
            assert (await anext(events)).json()["status"] == "canceled"

        for page in ("/jobs/", f"/jobs/jobs/{job['id']}", "/jobs/admin"):
            answer = await client.get(page)
            assert answer.status_code == 200 and "text/html" in answer.headers["content-type"], page
            for link in re.findall(r'(?:href|src)="([^"#]+)"', answer.text):
                if not link.startswith("data:"):  # every link of the page resolves under the prefix
                    target = httpx.URL(str(answer.url)).join(link)
                    assert target.path.startswith("/jobs/"), (page, link)
                    assert (await client.get(target)).status_code == 200, (page, link)
        assert (await client.get("/jobs/openapi.json")).json()["servers"] == [{"url": "/jobs"}]
        signed = await client.post("/jobs/api/admin/session", json={"token": ADMIN_TOKEN})
        assert signed.status_code == 200 and "Path=/jobs/" in signed.headers["set-cookie"]
        assert (await client.get("/jobs/api/admin/stats")).status_code == 200  # the cookie works there
        # over https (here a proxy's X-Forwarded-Proto) a __Host- cookie would need Path=/, and
        # browsers drop one scoped to the prefix: __Secure-, scoped to it, which the API reads back
        https = {"x-forwarded-proto": "https"}
        signed = await client.post("/jobs/api/admin/session", json={"token": ADMIN_TOKEN}, headers=https)
        cookie = signed.headers["set-cookie"]
        assert cookie.startswith("__Secure-jobfeed_admin=") and "Path=/jobs/" in cookie and "Secure" in cookie
        client.cookies.clear()
        assert (await client.get("/jobs/api/admin/stats", headers={**https, "cookie": cookie.split(";")[0]})
                ).status_code == 200
        moved = await client.get("/jobs")
        assert moved.status_code in (307, 308) and moved.headers["location"].endswith("/jobs/")
        moved = await client.get("/jobs/api/kinds/")  # jobfeed's own redirect keeps the prefix
        assert moved.status_code == 307 and moved.headers["location"] == "/jobs/api/kinds"
        # a path of none of jobfeed's routes is counted as such, not as the host's mount
        assert (await client.get("/jobs/no/such/page")).status_code == 404
        counted = (await client.get("/jobs/metrics")).text
        assert 'method="GET",route="unmatched",status="404"' in counted and 'route="/jobs"' not in counted

        # identify is the host's hook, kept for the requests feature
        assert svc.requester(Request({"type": "http", "headers": [(b"x-user", b"ada")]})) == "ada"
        assert svc.requester(Request({"type": "http", "headers": []})) is None
        assert svc.requester(Request({"type": "http", "headers": [(b"x-user", b"")]})) is None  # "" is nobody
        pool = state["pool"]
    # The host closed its pool; jobfeed gave its LISTEN connection back first
    # (asyncpg's close would otherwise wait for it) and closed nothing itself.
    assert pool.is_closing()


async def test_an_identity_is_a_short_string_or_nobody(dsn, pool):
    """"" is nobody, from the hook as from JOBFEED_REQUESTER_HEADER (it counted
    against the per-requester cap and shared a requesters-only job among
    everyone the hook named so); one too long to store is 422
    invalid_requester (it was the database's index error), and a hook that
    answers no string is the host's bug, a 500, not the client's 422."""
    answers = {"empty": "", "long": "u" * 513, "number": 5}
    app = jobfeed.api.create_app(make_settings(dsn, max_active_per_requester=1),
                                 identify=lambda request: answers.get(request.headers.get("x-user", ""), "ada"))
    async with ThreadServer(app) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        async def post(who: str, target: str) -> httpx.Response:
            return await client.post("/api/jobs", json={"kind": "demo", "target": target}, headers={"x-user": who})

        for n in range(3):  # nobody: no cap
            assert (await post("empty", f"e{n}")).status_code == 201
        assert await pool.fetchval("select count(*) from jobfeed.requests where requester is not null") == 0
        long = await post("long", "l")
        assert (long.status_code, long.json()["error"]["code"]) == (422, "invalid_requester"), long.text
        number = await post("number", "n")
        assert number.status_code == 500 and number.json()["error"]["code"] == "internal_error"
        # the server drops the connection after a 500: the answer says so, so the next request
        # takes a new one (it raced the close: httpx.ReadError)
        assert number.headers["connection"] == "close"
        assert await pool.fetchval("select count(*) from jobfeed.jobs where target in ('l', 'n')") == 0
        assert (await post("ada", "a")).status_code == 201
        assert (await post("ada", "b")).status_code == 429  # a named requester is capped


async def test_jobfeed_leaves_the_host_pool_open_and_whole(dsn):
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=3)
    try:
        jobs = jobfeed.api.create_app(make_settings(dsn), pool=pool)
        async with jobfeed.api.lifespan(jobs):
            assert jobs.state.services.feed.listener.backend_pid is not None
            assert pool.get_size() - pool.get_idle_size() == 1  # the LISTEN connection, held
        assert not pool.is_closing()
        assert pool.get_size() == pool.get_idle_size()  # given back
        assert await pool.fetchval("select count(*) from pg_listening_channels()") == 0  # and clean
    finally:
        await pool.close()


async def test_a_host_pool_that_cannot_serve_is_refused_saying_why(dsn):
    """None (a pool the host makes only after entering jobfeed's lifespan: jobfeed
    would open one of its own, or start an embedded server), a coroutine, or a
    pool the LISTEN connection would take whole."""
    small = await asyncpg.create_pool(dsn, min_size=1, max_size=1)

    async def later():
        return small
    try:
        for source, error, said in ((lambda: None, TypeError, "got NoneType, not an asyncpg pool"),
                                    (later, TypeError, "answered an awaitable"),
                                    (small, ValueError, "give it max_size=2 or more")):
            jobs = jobfeed.api.create_app(make_settings(dsn), pool=source)
            with pytest.raises(error, match=said):
                async with jobfeed.api.lifespan(jobs):
                    pass
    finally:
        await small.close()


async def test_the_feed_reconnects_through_the_host_pool(dsn, queue):
    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=3)
    try:
        jobs = jobfeed.api.create_app(make_settings(dsn), pool=pool)
        async with jobfeed.api.lifespan(jobs):
            listener = jobs.state.services.feed.listener
            first = listener.backend_pid
            await queue.pool.execute("select pg_terminate_backend($1)", first)
            await eventually(lambda: _reconnected(listener, first), what="a new LISTEN connection")
            assert pool.get_size() - pool.get_idle_size() == 1  # the dead one went back to the pool
        assert pool.get_size() == pool.get_idle_size()
    finally:
        await pool.close()


async def _reconnected(listener, old_pid) -> bool:
    return listener.connected.is_set() and listener.backend_pid not in (None, old_pid)


# ---------------------------------------------------------------- the example, in a browser

@pytest.fixture
async def example(dsn):
    """examples/host/app.py under uvicorn, as its docstring runs it, plus a worker."""
    port = free_port()
    host = Process([sys.executable, "-m", "uvicorn", "app:app", "--app-dir", str(ROOT / "examples" / "host"),
                    "--host", "127.0.0.1", "--port", str(port), "--timeout-graceful-shutdown", "2"],
                   api_env(dsn))
    await host.start(ready=r"Uvicorn running on")
    worker = Process(JOBFEED + ["worker", "--kinds", "demo", "--grace", "500ms"], worker_env(dsn))
    try:
        await worker.start(ready=r"kinds demo")
        yield f"http://127.0.0.1:{port}"
    finally:
        await worker.stop(timeout=5)
        await host.stop()


@pytest.fixture
async def browser():
    skip_or_fail(None if async_playwright is not None and os.access(CHROMIUM, os.X_OK)
                 else "needs playwright and chromium")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        await browser.close()


async def test_the_example_host_app_in_a_browser(example, browser):
    context = await browser.new_context(base_url=example)
    context.set_default_timeout(15_000)
    page = await context.new_page()
    errors: list[str] = []
    bad: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.on("response", lambda r: bad.append(f"{r.status} {r.url}") if r.status >= 400 else None)
    outside: list[str] = []
    page.on("request", lambda r: outside.append(r.url)
            if not (httpx.URL(r.url).path.startswith("/jobs/") or httpx.URL(r.url).path == "/") else None)

    # The host's own page: the ES module submits and follows to the end.
    await page.goto("/")
    await page.fill("#video", "video-7")
    await page.click("button[type=submit]")
    await expect(page.locator("#status")).to_have_text('completed: {"steps":4}')
    await expect(page.locator("#progress")).to_have_js_property("value", 4)
    assert await page.locator("#connection").text_content() == "ended"
    link = await page.locator("#job-link").get_attribute("href")
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/jobs/jobs/[0-9a-f-]{36}", link), link

    # jobfeed's own page for that job, under the prefix, its stream included.
    await page.goto(link)
    await expect(page.locator("#status")).to_have_text("completed")
    await expect(page.locator("#result")).to_contain_text('"steps": 4')
    await expect(page.locator("#share-url")).to_have_value(link)

    # jobfeed's submit form under the prefix lands on a job page under it and follows it live.
    await page.click("text=Submit another job")
    await expect(page).to_have_url(re.compile(r"/jobs/$"))
    await expect(page.locator("#kind")).to_be_enabled()
    await page.fill("#target", "form-1")
    await page.fill("#payload", '{"steps": 3, "step_ms": 200}')
    await page.click("#submit")
    await page.wait_for_url(re.compile(r"/jobs/jobs/[0-9a-f-]{36}$"))
    await expect(page.locator("#status")).to_have_text("completed")
    await expect(page.locator("#connection")).to_contain_text("Live updates stopped")

    # The dashboard under the prefix: sign-in, its API calls and its event stream.
    await page.click("text=Admin")
    await expect(page).to_have_url(re.compile(r"/jobs/admin$"))
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#connection")).to_contain_text("Live")
    await expect(page.locator('#counts td[data-state="completed"]')).to_have_text("2")
    row = page.locator("#jobs tr", has_text="form-1")
    await row.get_by_role("button", name="Open demo job form-1").click()
    await expect(page.locator("#public-link")).to_have_attribute("href", re.compile(r"/jobs/jobs/[0-9a-f-]{36}$"))
    seen_bad = list(bad)

    # The module's refusals, as a host page sees them.
    refusals = await page.evaluate("""async () => {
        const m = await import("/jobs/static/js/jobfeed.js");
        const out = {};
        try { await m.followJob("00000000-0000-4000-8000-000000000000").done; out.follow = "resolved"; }
        catch (err) { out.follow = [err.name, err.status, err.code]; }
        try { await m.submitJob("nope", "t"); out.submit = "resolved"; }
        catch (err) { out.submit = [err.name, err.status, err.code]; }
        return out;
    }""")
    assert refusals == {"follow": ["ApiError", 404, "not_found"], "submit": ["ApiError", 422, "unknown_kind"]}
    await context.close()
    bad = seen_bad
    assert not errors, errors
    # the dashboard asks whether it is signed in once before: 401 is its answer
    assert [b for b in bad if not b.startswith("401 ") or "/jobs/api/admin/stats" not in b] == [], bad
    assert not outside, f"requests outside the mount: {outside}"


async def test_an_app_on_a_host_pool_leaves_the_hosts_collector_alone(dsn, pool):
    """Only an app serving alone (its own pool) tunes the process's garbage
    collector; the host's settings are the host's."""
    before = gc.get_threshold()
    gc.set_threshold(700, *before[1:])
    try:
        hosted = jobfeed.api.create_app(make_settings(dsn), pool=pool)
        async with jobfeed.api.lifespan(hosted):
            assert gc.get_threshold()[0] == 700
        alone = jobfeed.api.create_app(make_settings(dsn))
        async with jobfeed.api.lifespan(alone):
            assert gc.get_threshold()[0] == GC_YOUNG
    finally:
        gc.set_threshold(*before)


async def test_a_host_that_forgets_the_lifespan_is_told_so(dsn, caplog):
    jobs = jobfeed.api.create_app(make_settings(dsn))
    host = Starlette(routes=[Mount("/jobs", app=jobs)])  # no lifespan entering jobfeed's
    transport = httpx.ASGITransport(app=host)
    async with httpx.AsyncClient(transport=transport, base_url="http://host.test") as client:
        for path in ("/jobs/api/kinds", "/jobs/readyz"):
            response = await client.get(path)
            assert response.status_code == 503, response.text
            error = response.json()["error"]
            assert error["code"] == "not_running" and "jobfeed.api.lifespan" in error["message"]
        assert (await client.post("/jobs/api/jobs", json={"kind": "demo", "target": "t"})).status_code == 503
    said = [r for r in caplog.records if "lifespan is not running" in r.getMessage()]
    assert len(said) == 1 and said[0].levelname == "ERROR"  # once, however many requests
