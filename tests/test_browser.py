"""The web UI in a real browser: Debian's chromium driven by Playwright against a
real API process (uvicorn) and a real worker process on the test database.

What a user does: submit a job and watch it from two pages, keep watching
while the API restarts, submit the same target again and land on the shared
job, use the form with the keyboard only, see errors from the form and the
server, and as an admin sign in, watch the dashboard and retry a failed job. Screenshots of every page at phone and
desktop width go to $JOBFEED_SHOTS (default /tmp/jobfeed-shots).

Needs `apt-get install chromium` and `pip install playwright` (Playwright's own
browser download is not used). Without them these tests skip, except under
CI=true, where they fail."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import socket
import sys
import uuid
from pathlib import Path

import httpx
import pytest

from jobfeed.worker.states import STATES

from conftest import JOBFEED, worker_env
from queue_sql import ATTEMPTS
from servers import ADMIN_TOKEN, UVICORN_HTTP, Process, api_env
from waiting import eventually

try:
    from playwright.async_api import async_playwright, expect
except ImportError:  # reported by _need_browser
    async_playwright = expect = None

CHROMIUM = os.environ.get("JOBFEED_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
SHOTS = Path(os.environ.get("JOBFEED_SHOTS", "/tmp/jobfeed-shots"))
PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 800}
JOB_URL = re.compile(r"/jobs/([0-9a-f-]{36})(\?shared=1)?$")
WAIT_MS = 15_000  # the longest any expectation below waits


def _browser_missing() -> str | None:
    if async_playwright is None:
        return "playwright is not installed (pip install playwright)"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no chromium at {CHROMIUM} (apt-get install chromium, or set JOBFEED_CHROMIUM)"
    return None


# ---------------------------------------------------------------- fixtures

@pytest.fixture(scope="module", autouse=True)
def _need_browser():
    """Before any server starts: no browser skips these tests, but fails them in CI."""
    missing = _browser_missing()
    if missing:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"the browser tests must run in CI: {missing}")
        pytest.skip(missing)


class Api:
    """A real API process: uvicorn with the deployed factory, as
    servers.start_api_process runs it, but on a port chosen here so that a
    restarted API answers at the same address (the browser reconnects to it)."""

    def __init__(self, dsn: str):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.dsn = dsn
        self.proc: Process | None = None

    async def start(self) -> None:
        self.proc = Process([sys.executable, "-m", "uvicorn", "jobfeed.api.app:create_app", "--factory",
                             "--host", "127.0.0.1", "--port", str(self.port),
                             "--timeout-graceful-shutdown", "2", *UVICORN_HTTP], api_env(self.dsn))
        await self.proc.start(ready=r"Uvicorn running on")


@pytest.fixture
async def api(dsn):
    server = Api(dsn)
    await server.start()
    yield server
    await server.proc.stop()


@pytest.fixture
async def worker(dsn, api):
    """A real worker process for the demo kind (a short grace: these tests
    leave long jobs running, and do not test the graceful stop)."""
    proc = Process(JOBFEED + ["worker", "--kinds", "demo", "--concurrency", "4", "--grace", "500ms"],
                   worker_env(dsn))
    await proc.start(ready=r"kinds demo")
    yield proc
    await proc.stop(timeout=5)


@pytest.fixture
async def new_page(api):
    """new_page(viewport) -> a page in a browser context of its own (its own
    cookies, as another person's browser). Chromium closes before the API stops
    (it holds the API's event streams); an uncaught script error fails the test."""
    errors: list[str] = []
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)

        async def make(viewport=DESKTOP):
            context = await browser.new_context(viewport=viewport, base_url=api.url)
            context.set_default_timeout(WAIT_MS)
            page = await context.new_page()
            page.on("pageerror", lambda exc: errors.append(f"{page.url}: {exc}"))
            return page

        yield make
        await browser.close()
    assert not errors, f"script errors in the pages: {errors}"


@pytest.fixture
async def http(api):
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as client:
        yield client


async def shot(page, name: str) -> None:
    """A full-page screenshot, named by page and width."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=SHOTS / f"{name}-{page.viewport_size['width']}.png", full_page=True)


async def submit(page, target: str, payload: str = "") -> str:
    """Fill in the submit form and send it; -> the job page's URL."""
    await page.goto("/")
    await expect(page.locator("#kind")).to_be_enabled()
    await page.select_option("#kind", "demo")
    await page.fill("#target", target)
    await page.fill("#payload", payload)
    await page.click("#submit")
    await page.wait_for_url(JOB_URL)
    return page.url


async def expect_completed(page, steps: int) -> None:
    await expect(page.locator("#status")).to_have_text("completed")
    await expect(page.locator("#progress")).to_have_js_property("position", 1)
    await expect(page.locator("#progress-text")).to_contain_text(f"{steps} of {steps} (100%)")
    await expect(page.locator("#result")).to_contain_text(f'"steps": {steps}')
    await expect(page.locator("#connection")).to_contain_text("Live updates stopped")


# ---------------------------------------------------------------- tests

async def test_two_pages_follow_one_job_to_completion(worker, new_page):
    """One person submits on a desktop, a second opens the shared link on a
    phone; both watch the same progress live until 'completed'."""
    first = await new_page(DESKTOP)
    url = await submit(first, "video-1", '{"steps": 5, "step_ms": 400}')
    await expect(first.locator("#share-url")).to_have_value(url)
    await first.context.grant_permissions(["clipboard-read", "clipboard-write"])
    await first.click("#copy")
    await expect(first.locator("#copy-status")).to_have_text("Link copied.")
    assert await first.evaluate("navigator.clipboard.readText()") == url

    second = await new_page(PHONE)
    await second.goto(url)
    for page in (first, second):
        await expect(page.locator("#status")).to_have_text("processing")
        await expect(page.locator("#progress")).to_have_attribute("max", "5")
    await shot(second, "job-processing")
    for page in (first, second):
        await expect_completed(page, 5)
    await expect(second.locator("#heading")).to_have_text("demo: video-1")
    await shot(first, "job-completed")
    await shot(second, "job-completed")


async def test_job_page_reconnects_after_the_api_goes_away(api, worker, new_page):
    """The API dies mid-job: the page says it is reconnecting and keeps the
    server's last status; the API comes back and the page follows the job to
    the end, then stops asking for the stream."""
    page = await new_page()
    streams: list[str] = []
    page.on("request", lambda request: streams.append(request.url) if request.url.endswith("/events") else None)
    await submit(page, "restart-1", '{"steps": 8, "step_ms": 300}')
    await expect(page.locator("#status")).to_have_text("processing")

    await api.proc.kill()
    await expect(page.locator("#connection")).to_have_text("Connection lost: reconnecting…")
    await expect(page.locator("#connection")).to_have_attribute("data-state", "reconnecting")
    await expect(page.locator("#status")).to_have_text("processing")
    await shot(page, "job-reconnecting")

    await api.start()
    await expect(page.locator("#connection")).to_contain_text("Live")
    await expect_completed(page, 8)
    connections = len(streams)
    assert connections >= 2
    await page.wait_for_timeout(1500)  # three times the retry interval the API sends
    assert len(streams) == connections, "the page kept reconnecting after the job ended"


async def test_same_kind_and_target_lands_on_the_shared_job(worker, new_page):
    first = await new_page()
    url = await submit(first, "email-42", '{"steps": 40, "step_ms": 250}')

    second = await new_page(PHONE)
    shared_url = await submit(second, "email-42")
    assert JOB_URL.search(shared_url).group(1) == JOB_URL.search(url).group(1)
    assert shared_url.endswith("?shared=1")
    await expect(second.locator("#shared-note")).to_be_visible()
    await expect(second.locator("#shared-note")).to_contain_text("joined that job")
    await expect(first.locator("#shared-note")).to_be_hidden()
    await expect(second.locator("#status")).to_have_text("processing")
    await shot(second, "job-shared")


async def test_admin_signs_in_and_retries_a_failed_job(worker, new_page, http):
    # Run 1 fails permanently; run 2 has no script and completes.
    created = await http.post("/api/jobs", json={"kind": "demo", "target": "doc-7",
                                                 "payload": {"steps": 3, "step_ms": 50, "fail": ["permanent"]}})
    job_id = created.json()["id"]

    async def failed():
        return (await http.get(f"/api/jobs/{job_id}")).json()["status"] == "failed"
    await eventually(failed, what="the job to fail")

    page = await new_page(DESKTOP)
    await page.goto("/admin")
    await expect(page.locator("#dashboard")).to_be_hidden()
    await page.fill("#token", "not-the-token")
    await page.press("#token", "Enter")
    await expect(page.locator("#signin-error")).to_contain_text("wrong admin token")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#dashboard")).to_be_visible()
    await expect(page.locator("#connection")).to_contain_text("Live")

    # Counts, the chart and the table show the true state and the last error.
    await expect(page.locator('#counts td[data-state="failed"]')).to_have_text("1")
    await expect(page.locator("#chart svg")).to_have_attribute("aria-label", re.compile(r"0 completed, 1 failed"))
    row = page.locator(f'#jobs tr[data-job-id="{job_id}"]')
    await expect(row).to_contain_text("failed")
    await expect(row).to_contain_text("1 / 5")
    await expect(row).to_contain_text("demo_permanent")

    # The detail: every attempt; retry runs it again, live, to completed.
    await row.get_by_role("button", name="Open demo job doc-7").click()
    detail = page.locator("#detail")
    await expect(detail).to_be_focused()
    await expect(page.locator("#attempts tbody tr")).to_have_count(1)
    await expect(page.locator("#attempts tbody")).to_contain_text("permanent")
    await expect(page.locator("#cancel")).to_be_disabled()
    await shot(page, "admin-failed")
    await page.click("#retry")
    await expect(page.locator("#action-message")).to_contain_text("Retry accepted")
    await expect(detail.locator(".badge")).to_have_text("completed")
    await expect(page.locator("#attempts tbody tr")).to_have_count(2)
    await expect(page.locator("#attempts tbody tr").nth(1)).to_contain_text("completed")
    await expect(row.locator(".badge")).to_have_text("completed")
    await expect(page.locator('#counts td[data-state="completed"]')).to_have_text("1")
    await expect(page.locator('#counts td[data-state="failed"]')).to_have_text("0")
    await expect(page.locator("#retry")).to_be_disabled()
    await shot(page, "admin")
    await page.set_viewport_size(PHONE)
    await shot(page, "admin")

    # A session cookie, not the token, keeps the admin signed in.
    await page.reload()
    await expect(page.locator("#dashboard")).to_be_visible()
    await page.click("#signout")
    await expect(page.locator("#signin")).to_be_visible()
    await shot(page, "admin-signin")


async def test_admin_filters_by_state_and_opens_a_linked_job(api, new_page, http):
    """No worker: one job stays queued, one is canceled. The state filter lists
    every true state and narrows the table; #job=ID opens that job's detail."""
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    ids = {}
    for target in ("filter-a", "filter-b"):
        ids[target] = (await http.post("/api/jobs", json={"kind": "demo", "target": target})).json()["id"]
    assert (await http.post(f"/api/admin/jobs/{ids['filter-b']}/cancel", headers=admin)).status_code == 200

    page = await new_page(DESKTOP)
    await page.goto(f"/admin#job={ids['filter-b']}")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#detail-heading")).to_have_text("demo: filter-b")
    await expect(page.locator("#detail .badge")).to_have_text("canceled")
    await expect(page.locator("#retry")).to_be_enabled()
    await expect(page.locator("#cancel")).to_be_disabled()
    options = await page.locator("#filter-state option").all_inner_texts()
    assert options == ["all", *STATES]
    rows = page.locator("#jobs tbody tr")
    await expect(rows).to_have_count(2)
    await page.select_option("#filter-state", "canceled")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-job-id", ids["filter-b"])
    await page.select_option("#filter-state", "queued")
    await expect(rows).to_have_count(1)
    await expect(rows.first).to_have_attribute("data-job-id", ids["filter-a"])


async def test_submit_form_works_with_the_keyboard_only(api, new_page):
    """Tab to each field, type, and submit with Enter; a bad payload is caught
    before sending, with the message next to the field and the focus on it."""
    page = await new_page()
    await page.goto("/")
    await expect(page.locator("#kind")).to_be_enabled()
    await shot(page, "submit")
    for _ in range(10):
        await page.keyboard.press("Tab")
        if await page.evaluate("document.activeElement.id") == "kind":
            break
    else:
        pytest.fail("Tab never reached the kind field")
    await page.keyboard.press("ArrowDown")  # stays on demo, the only kind
    await page.keyboard.press("Tab")
    await page.keyboard.type("keyboard-1")
    await page.keyboard.press("Tab")
    await page.keyboard.type('{"steps": 2,')
    await page.keyboard.press("Tab")  # the file field
    await expect(page.locator("#files")).to_be_focused()
    await page.keyboard.press("Tab")
    await page.keyboard.press("Enter")
    error = page.locator("#payload-error")
    await expect(error).to_contain_text("not valid JSON")
    await expect(page.locator("#payload")).to_be_focused()
    await expect(page.locator("#payload")).to_have_attribute("aria-invalid", "true")
    assert page.url.endswith("/")
    await page.set_viewport_size(PHONE)
    await shot(page, "submit-invalid")

    await page.keyboard.press("End")
    await page.keyboard.type(' "step_ms": 10}')
    await page.keyboard.press("Control+Enter")
    await page.wait_for_url(JOB_URL)
    await expect(page.locator("#heading")).to_have_text("demo: keyboard-1")
    await expect(page.locator("#status")).to_have_text("queued")  # no worker runs in this test


async def test_errors_from_the_server_are_shown(api, new_page):
    page = await new_page(PHONE)
    await page.goto("/")
    await expect(page.locator("#kind")).to_be_enabled()
    await page.fill("#target", "t-1")
    await page.fill("#payload", '{"steps": "many"}')
    await page.click("#submit")
    alert = page.locator("#form-error")
    await expect(alert).to_be_visible()
    await expect(alert).to_contain_text("steps must be a whole number")
    await expect(alert).to_contain_text("422")
    await expect(alert).to_have_attribute("role", "alert")
    await shot(page, "submit-server-error")

    await page.goto(f"/jobs/{uuid.uuid4()}")
    await expect(page.locator("#heading")).to_have_text("No such job")
    await expect(page.locator("#not-found")).to_be_visible()
    await expect(page.locator("#job")).to_be_hidden()
    await page.set_viewport_size(DESKTOP)
    await shot(page, "job-not-found")


async def test_job_page_shows_how_many_are_ahead(api, new_page, http, queue):
    """No worker runs: three jobs wait, the page of the last says two are ahead
    of it, and one less once the first is claimed (the stream's refresh)."""
    ids = [(await http.post("/api/jobs", json={"kind": "demo", "target": f"line-{n}"})).json()["id"]
           for n in range(3)]
    page = await new_page()
    await page.goto(f"/jobs/{ids[2]}")
    await expect(page.locator("#progress-text")).to_have_text("Waiting for a worker. · 2 ahead of you.")
    await shot(page, "job-position")
    await queue.claim(["demo"], 1, "w")
    await expect(page.locator("#progress-text")).to_have_text("Waiting for a worker. · 1 ahead of you.")


async def test_shared_with_others_leave_and_closing_the_page(worker, new_page, http):
    """Two people wait for one job: each page says it is shared; one leaves with
    the button, the other closes the tab, and with nobody left the job is
    canceled (its kind's on_abandon, cancel for demo)."""
    first = await new_page()
    url = await submit(first, "shared-leave", '{"steps": 100, "step_ms": 200}')
    job_id = JOB_URL.search(url).group(1)
    await expect(first.locator("#requesters")).to_have_text("Only you are waiting for this job.")
    second = await new_page(PHONE)
    await submit(second, "shared-leave")
    for page in (first, second):
        await expect(page.locator("#requesters")).to_have_text("Shared with 1 other.")
    await shot(second, "job-shared-with")
    await second.click("#leave")
    await expect(second.locator("#left-note")).to_be_visible()
    await expect(second.locator("#leave-row")).to_be_hidden()
    await expect(first.locator("#requesters")).to_have_text("Only you are waiting for this job.")
    assert (await http.get(f"/api/jobs/{job_id}")).json()["status"] == "processing"

    await first.close()  # the beacon leaves: nobody is waiting any more

    async def canceled():
        return (await http.get(f"/api/jobs/{job_id}")).json()["status"] == "canceled"
    await eventually(canceled, timeout=10, interval=0.1, what="the abandoned job canceled")
    await expect(second.locator("#status")).to_have_text("canceled")


async def test_dashboard_panels_match_the_database(worker, new_page, http, pool):
    """A live worker running one long job and a planted worker silent for more
    than two leases: the panel shows each as the database has it, live or lost.
    The charts (depth samples, some planted earlier in the hour; wait p50/p95;
    failures by code) show the numbers jobfeed.charts() gives."""
    await pool.execute("select jobfeed.worker_beat('gone-host:1:old', 'gone-host', array['demo'], 2, 1, "
                       "'1 second', now() - interval '10 seconds')")
    finished = []
    for target, payload in (("ok-1", {"steps": 1}), ("ok-2", {"steps": 2}), ("bad-1", {"fail": ["permanent"]})):
        finished.append((await http.post("/api/jobs", json={"kind": "demo", "target": target,
                                                            "payload": payload})).json()["id"])

    async def all_finished():
        states = [(await http.get(f"/api/jobs/{i}")).json()["status"] for i in finished]
        return all(s in ("completed", "failed") for s in states)
    await eventually(all_finished, what="the short jobs to finish")
    for minutes, queued in ((45, 3), (30, 7), (15, 2)):
        await pool.execute("insert into jobfeed.depth_samples values (now() - make_interval(mins => $1), 'demo', $2, 1)",
                           minutes, queued)
    created = await http.post("/api/jobs", json={"kind": "demo", "target": "long-1",
                                                 "payload": {"steps": 300, "step_ms": 100}})
    assert created.status_code == 201

    async def running():
        listed = json.loads(await pool.fetchval("select jobfeed.list_workers()::text"))
        return listed if any(w["running"] == 1 and not w["lost"] for w in listed) else None
    workers = await eventually(running, what="the worker to report its running job")
    assert len(workers) == 2 and sum(w["lost"] for w in workers) == 1

    page = await new_page(DESKTOP)
    await page.goto("/admin")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#connection")).to_contain_text("Live")
    await expect(page.locator("#workers tbody tr")).to_have_count(len(workers))
    for w in workers:
        row = page.locator(f'#workers tr[data-worker="{w["id"]}"]')
        await expect(row.locator('[data-field="running"]')).to_have_text(str(w["running"]))
        await expect(row.locator('[data-field="concurrency"]')).to_have_text(str(w["concurrency"]))
        await expect(row.locator('[data-field="status"]')).to_have_text("lost" if w["lost"] else "live")
        await expect(row).to_contain_text(", ".join(w["kinds"]))
    await expect(page.locator("#workers-summary")).to_have_text(
        "1 live, 1 lost; 1 running of 4 slots.")
    running_in_db = await pool.fetchval("select count(*) from jobfeed.jobs where state = 'running'")
    await expect(page.locator('#counts td[data-state="running"]')).to_have_text(str(running_in_db))
    await expect(page.locator("#finished-note")).to_be_hidden()  # a short history: counted each time
    # As if counting the finished jobs had taken 100 s: the next read keeps them, and says since when.
    kept = await pool.fetchval("update jobfeed.stats_snapshot set as_of = as_of - interval '1 minute', "
                               "finished_as_of = finished_as_of - interval '1 minute', finished_seconds = 100 "
                               "returning finished_as_of")
    note = page.locator("#finished-note")
    await expect(note).to_be_visible(timeout=15000)
    shown = await note.locator("time").get_attribute("datetime")
    assert dt.datetime.fromisoformat(shown) == kept, (shown, kept)

    charts = json.loads(await pool.fetchval("select jobfeed.charts()::text"))
    [failure] = charts["failures"]
    assert (failure["code"], failure["jobs"]) == ("demo_permanent", 1)
    await expect(page.locator(f'#failures-table tr[data-code="{failure["code"]}"] [data-field="jobs"]')).to_have_text(
        str(failure["jobs"]))
    [wait] = charts["wait"]
    assert wait["jobs"] == 3
    wait_row = page.locator('#wait-table tr[data-kind="demo"]')
    await expect(wait_row.locator('[data-field="p50"]')).to_have_attribute("data-value", f"{wait['p50']:.3f}")
    await expect(wait_row.locator('[data-field="p95"]')).to_have_attribute("data-value", f"{wait['p95']:.3f}")
    await expect(wait_row.locator('[data-field="jobs"]')).to_have_text("3")
    depth = [s for s in charts["depth"] if s["kind"] == "demo"]
    await expect(page.locator("#depth-chart svg")).to_have_attribute(
        "aria-label", f"Queued now by kind: demo {depth[-1]['queued']}; peak 7.")
    points = await page.locator('#depth-chart polyline[data-kind="demo"]').get_attribute("points")
    assert len(points.split()) == len(depth)
    await shot(page, "dashboard")

    # The failed job's detail: its attempts on a time line, as the database logged them.
    outcomes = [r["outcome"] for r in await pool.fetch(
        f"select outcome from {ATTEMPTS} a where job_id = $1::uuid order by generation", finished[2])]
    assert outcomes == ["permanent"]
    await page.locator(f'#jobs tr[data-job-id="{finished[2]}"] button').click()
    bars = page.locator('#timeline rect[data-part="attempt"]')
    await expect(bars).to_have_count(len(outcomes))
    assert [await bars.nth(i).get_attribute("data-outcome") for i in range(len(outcomes))] == outcomes
    await expect(page.locator('#timeline rect[data-part="queued"]')).to_have_count(1)
    await page.locator("#timeline").screenshot(path=SHOTS / "dashboard-timeline.png")


async def test_admin_pauses_a_kind_sees_schedules_and_cancels_in_bulk(api, new_page, http, pool):
    """Flow control on the dashboard: pause and resume a kind, the periodic
    schedules with their next run, and a bulk cancel that says how many jobs
    it will cancel before it is confirmed."""
    for n in range(3):
        assert (await http.post("/api/jobs", json={"kind": "demo", "target": f"bulk-{n}"})).status_code == 201
    await pool.execute("select jobfeed.register_kind('nightly')")
    await pool.execute("select jobfeed.register_schedule('nightly', '0 3 * * *', 'Europe/Paris', null)")

    page = await new_page(DESKTOP)
    await page.goto("/admin")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")

    demo = page.locator('#kinds tr[data-kind="demo"]')
    await demo.get_by_role("button", name="Pause demo").click()
    await expect(demo.locator(".badge")).to_have_text("paused")
    kinds = {k["kind"]: k for k in (await http.get("/api/kinds")).json()["kinds"]}
    assert kinds["demo"]["paused"] is True
    await demo.get_by_role("button", name="Resume demo").click()
    await expect(demo.get_by_role("button", name="Pause demo")).to_be_visible()
    assert {k["kind"]: k for k in (await http.get("/api/kinds")).json()["kinds"]}["demo"]["paused"] is False

    schedule = page.locator("#schedules tbody tr")
    await expect(schedule).to_have_count(1)
    await expect(schedule.first).to_contain_text("0 3 * * * (Europe/Paris)")
    await expect(schedule.first).to_contain_text("never")
    await shot(page, "admin-flow")

    await page.select_option("#filter-kind", "demo")
    await page.select_option("#filter-state", "queued")
    await page.click("#bulk-cancel")
    await expect(page.locator("#bulk-question")).to_have_text("Cancel 3 jobs (demo, queued)?")
    await page.click("#bulk-no")  # nothing happens
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'canceled'") == 0
    await page.click("#bulk-cancel")
    await page.click("#bulk-yes")
    await expect(page.locator("#bulk-message")).to_have_text("Canceled 3 jobs.")
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'canceled'") == 3
    await expect(page.locator("#jobs tbody tr")).to_have_count(0)


async def test_the_job_page_lists_outputs_as_download_links(api, new_page, http, pool):
    """A handler saves a file while the page watches: a link appears, live, and
    downloads the bytes."""
    from jobfeed.worker.queue import Queue
    from jobfeed.worker.tasks import Context

    created = await http.post("/api/jobs", json={"kind": "demo", "target": "video-9"})
    job_id = created.json()["id"]
    page = await new_page()
    await page.goto(f"/jobs/{job_id}")
    await expect(page.locator("#status")).to_have_text("queued")
    await expect(page.locator("#outputs-panel")).to_be_hidden()

    queue = Queue(pool)
    [job] = await queue.claim(["demo"], 1, "browser-test")
    data = os.urandom(300_000)
    await Context(queue, job, 30.0).save_output("merged video.mp4", data, "video/mp4")
    link = page.get_by_role("link", name="merged video.mp4")
    await expect(link).to_be_visible()
    await expect(page.locator("#outputs")).to_contain_text("293.0 KiB · video/mp4")
    await shot(page, "job-outputs")
    async with page.expect_download() as info:
        await link.click()
    download = await info.value
    assert download.suggested_filename == "merged video.mp4"
    assert Path(await download.path()).read_bytes() == data


async def test_the_submit_form_uploads_files(api, new_page, pool, tmp_path):
    from jobfeed.worker import files

    data = os.urandom(700_000)
    (tmp_path / "clip.mp4").write_bytes(data)
    page = await new_page()
    await page.goto("/")
    await expect(page.locator("#kind")).to_be_enabled()
    await page.select_option("#kind", "demo")
    await page.fill("#target", "upload-1")
    await page.set_input_files("#files", str(tmp_path / "clip.mp4"))
    await page.click("#submit")
    await page.wait_for_url(JOB_URL)
    job_id = uuid.UUID(JOB_URL.search(page.url).group(1))
    [f] = await files.files_of(pool, job_id, "in")
    assert (f.name, f.size) == ("clip.mp4", len(data))
    got = b"".join([c async for c in files.open_file(pool, job_id, "in", "clip.mp4")])
    assert got == data


async def test_admin_detail_links_a_child_and_its_parent_both_ways(api, new_page, http, pool):
    """No worker: a parent is claimed and completed by hand with one child
    (ctx.submit's SQL); the child's detail shows its parent as a link that
    opens the parent's detail, which lists the child (with its state) as a
    link back."""
    from jobfeed.worker.queue import Queue

    queue = Queue(pool)
    parent = (await http.post("/api/jobs", json={"kind": "demo", "target": "parent"})).json()["id"]
    (claimed,) = await queue.claim(["demo"], 1, "by-hand")
    child = await queue.child_id(claimed.id, claimed.generation, "demo", "child", {})
    assert await queue.complete_spawning(claimed.id, claimed.generation, None,
                                         [{"id": str(child), "kind": "demo", "target": "child", "payload": {}}])
    page = await new_page(DESKTOP)
    await page.goto(f"/admin#job={child}")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    await expect(page.locator("#detail-heading")).to_have_text("demo: child")
    link = page.locator("#detail-facts a", has_text=parent)
    await link.click()
    await expect(page.locator("#detail-heading")).to_have_text("demo: parent")
    await expect(page.locator("#detail-facts dd > .badge")).to_have_text("completed")
    assert page.url.endswith(f"#job={parent}")
    listed = page.locator("#detail-facts .children li")
    await expect(listed).to_have_count(1)
    await expect(listed.locator(".badge")).to_have_text("queued")
    await listed.locator("a", has_text="demo: child").click()
    await expect(page.locator("#detail-heading")).to_have_text("demo: child")
    assert page.url.endswith(f"#job={child}")
