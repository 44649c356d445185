"""The web UI in a real browser: Debian's chromium driven by Playwright against a
real API process (uvicorn) and a real worker process on the test database.

What a user does: submit a job and watch it from two pages, keep watching
while the API restarts, submit the same target again and land on the shared
job, use the form with the keyboard only, see errors from the form and the
server, download outputs and upload files. The admin's pages:
test_browser_admin.py. Screenshots of every page at phone and
desktop width go to $JOBFEED_SHOTS (default /tmp/jobfeed-shots).

Needs `apt-get install chromium` and `pip install playwright` (Playwright's own
browser download is not used). Without them these tests skip, except under
CI=true, where they fail."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from waiting import eventually

from browser_parts import DESKTOP, JOB_URL, PHONE, apply_leaves_after, expect, expect_completed, shot, submit
from browser_parts import (  # noqa: F401  (fixtures)
    _need_browser, api, http, new_page, worker)


async def test_two_pages_follow_one_job_to_completion(worker, new_page):
    """One person submits on a desktop, a second opens the shared link on a
    phone; both watch the same progress live until 'completed'."""
    first = await new_page(DESKTOP)
    url = await submit(first, "video-1", '{"steps": 5, "step_ms": 400}')
    await expect(first.locator("#share-url")).to_have_value(url)
    await expect(first.locator("#share-note")).to_have_text("Anyone with this link can watch the job.")
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
    page.on("request", lambda request: streams.append(request.url)
            if urlsplit(request.url).path.endswith("/events") else None)  # with ?request= (the tab's)
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


@pytest.mark.parametrize("api", [{"JOBFEED_JOB_ACCESS": "requesters"}], indirect=True)
async def test_a_private_job_is_shown_to_the_tab_that_submitted_it(api, worker, new_page):
    """Under JOBFEED_JOB_ACCESS=requesters the job page presents its tab's
    request id; it did not, so the submitter saw "No such job" for their own
    job. Someone else with the link still does, and the share panel says so
    (it said anyone with the link could watch)."""
    page = await new_page()
    url = await submit(page, "private-1", '{"steps": 3, "step_ms": 20}')
    await expect(page.locator("#share-note")).to_contain_text("does not open it for anyone else")
    await expect_completed(page, 3)
    stranger = await new_page()
    await stranger.goto(url)
    await expect(stranger.locator("#heading")).to_have_text("No such job")


@pytest.mark.parametrize("api", [{"JOBFEED_TASKS": ""}], indirect=True)
async def test_the_submit_page_lists_a_kind_registered_after_it_opened(api, new_page, pool):
    """With no kind yet (or the database away), the page told the user to
    reload it; it now asks again by itself. jobfeed's own kinds (a webhook's
    delivery) are not offered: no one may submit them."""
    await pool.execute("select jobfeed.register_kind('jobfeed.webhook')")
    page = await new_page()
    await page.goto("/")
    await expect(page.locator("#kind")).to_contain_text("No kinds registered")
    await pool.execute("select jobfeed.register_kind('late')")
    await expect(page.locator("#kind")).to_be_enabled()
    await expect(page.locator("#kind option")).to_have_text(["late"])


async def test_following_our_own_link_keeps_the_job_and_a_resubmission_joins_it(api, new_page, http, pool):
    """The walkthrough in one tab: from the job page, "Submit another job", the
    same target again: the same job, never canceled on the way (only closing
    leaves, after the grace: test_browser_leave.py). The tab holds one request
    for it: before, it held two and forgot the first, said "Shared with 1
    other", and closing it left the job waiting for nobody."""
    page = await new_page()
    url = await submit(page, "walk-1", '{"steps": 100, "step_ms": 200}')
    job_id = JOB_URL.search(url).group(1)
    await page.click("text=Submit another job")
    await page.wait_for_url(lambda u: JOB_URL.search(u) is None)
    again = await submit(page, "walk-1")
    assert JOB_URL.search(again).group(1) == job_id and again.endswith("?shared=1")
    await expect(page.locator("#requesters")).to_have_text("Only you are waiting for this job.")
    view = (await http.get(f"/api/jobs/{job_id}")).json()
    assert (view["status"], view["requesters"]) == ("queued", 1)
    await page.close(run_before_unload=True)  # the beacon leaves the one request the tab holds
    await leave_after_closing(pool, http, job_id)


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
    # an over-long target is the server's to refuse, never cut short by the field
    await page.fill("#payload", "")
    await page.fill("#target", "x" * 600)
    await page.click("#submit")
    await expect(alert).to_contain_text("512 bytes")
    assert JOB_URL.search(page.url) is None

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
    # (a lease that outlasts the test: an expired one puts its job back at the head of the line)
    await queue.claim(["demo"], 1, "w", lease=3600)
    await expect(page.locator("#progress-text")).to_have_text("Waiting for a worker. · 1 ahead of you.")

    # a job for later says when it is due, not that it waits for a worker
    later = (await http.post("/api/jobs", json={"kind": "demo", "target": "later", "run_at": "2031-01-02T03:04:00Z"}))
    await page.goto(f"/jobs/{later.json()['id']}")
    await expect(page.locator("#progress-text")).to_have_text(re.compile(r"^Scheduled for .*2031"))


async def test_a_long_unbroken_progress_message_stays_in_the_page(api, new_page, http, queue):
    """From a black-box pass: a progress message of one long URL widened the job
    page to thousands of pixels (the admin's detail wrapped it)."""
    job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": "long-message"})).json()["id"]
    (job,) = await queue.claim(["demo"], 1, "w", lease=3600)
    message = "downloading https://cdn.example.com/" + "a" * 1900 + ".mp4"
    assert await queue.progress(job.id, job.generation, 1, 2, message)
    for viewport in (PHONE, DESKTOP):
        page = await new_page(viewport)
        await page.goto(f"/jobs/{job_id}")
        await expect(page.locator("#progress-text")).to_contain_text("downloading https://cdn.example.com/aaa")
        assert await page.evaluate("document.documentElement.scrollWidth <= innerWidth")


async def test_shared_with_others_leave_and_closing_the_page(worker, new_page, http, pool):
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
    await expect(second.locator("#left-note")).to_be_focused()  # the button went: not the page's body
    await expect(second.locator("#leave-row")).to_be_hidden()
    await expect(first.locator("#requesters")).to_have_text("Only you are waiting for this job.")
    assert (await http.get(f"/api/jobs/{job_id}")).json()["status"] == "processing"

    await first.close()  # the beacon leaves, once the grace has passed: nobody is waiting any more
    await leave_after_closing(pool, http, job_id)
    await expect(second.locator("#status")).to_have_text("canceled")


async def leave_after_closing(pool, http, job_id: str) -> None:
    """A closed page's leave is pending; the sweeper applies it once due (the
    time planted): the job, abandoned, is canceled."""
    async def pending():
        return await pool.fetchval("select count(*) from jobfeed.requests where job_id = $1 and leave_at is not null "
                                   "and left_at is null", uuid.UUID(job_id))
    assert await eventually(pending, timeout=10, interval=0.05, what="the closed page's leave pending") == 1
    assert await apply_leaves_after(pool, 60) == 1
    assert (await http.get(f"/api/jobs/{job_id}")).json()["status"] == "canceled"


async def test_the_job_page_lists_outputs_as_download_links(api, new_page, http, pool):
    """A handler saves a file while the page watches: a link appears, live, and
    downloads the bytes."""
    created = await http.post("/api/jobs", json={"kind": "demo", "target": "video-9"})
    job_id = created.json()["id"]
    page = await new_page()
    await page.goto(f"/jobs/{job_id}")
    await expect(page.locator("#status")).to_have_text("queued")
    await expect(page.locator("#outputs-panel")).to_be_hidden()

    data = os.urandom(300_000)
    link = await saved_by_a_handler(page, pool, "merged video.mp4", data, "video/mp4")
    await expect(page.locator("#outputs")).to_contain_text("293.0 KiB · video/mp4")
    await shot(page, "job-outputs")
    await downloads(page, link, "merged video.mp4", data)


async def saved_by_a_handler(page, pool, name: str, data: bytes, content_type: str):
    """The demo job claimed and `name` saved as its handler would: -> the
    page's link to it, once shown."""
    from jobfeed.worker.queue import Queue
    from jobfeed.worker.tasks import Context

    queue = Queue(pool)
    [job] = await queue.claim(["demo"], 1, "browser-test")
    await Context(queue, job, 30.0).save_output(name, data, content_type)
    link = page.get_by_role("link", name=name)
    await expect(link).to_be_visible()
    return link


async def downloads(page, link, name: str, data: bytes) -> None:
    """A click on the link saves `data` as `name`."""
    async with page.expect_download() as info:
        await link.click()
    download = await info.value
    assert download.suggested_filename == name
    assert Path(await download.path()).read_bytes() == data


@pytest.mark.parametrize("api", [{"JOBFEED_JOB_ACCESS": "requesters"}], indirect=True)
async def test_a_private_jobs_download_link_does_not_carry_the_request_id(api, new_page, http, pool):
    """Under requesters access the request id opens the job: the link put it in
    its URL (?request=), so a copied file link opened the job, and its leave,
    for anyone. The link is plain now; a click sends the id as a header."""
    page = await new_page()
    job_url = await submit(page, "private-file")
    job_id = JOB_URL.search(job_url).group(1)
    data = os.urandom(100_000)
    link = await saved_by_a_handler(page, pool, "report.bin", data, "application/octet-stream")
    href = await link.get_attribute("href")
    assert "request" not in href and href.endswith(f"/api/jobs/{job_id}/outputs/report.bin"), href
    assert (await http.get(href)).status_code == 404  # the plain link alone opens nothing
    await downloads(page, link, "report.bin", data)


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
