"""Leaving a job from its page, in a real browser (see test_browser.py for the
setup). The page cannot tell a closed tab from a reload or going Back: each
sends a beacon asking its request to leave after JOBFEED_LEAVE_GRACE, and a
page that comes back calls it off. A reload, or Back then Forward, keeps the
job; a closed tab leaves once the grace has passed (the sweeper's
leave_due, with the time planted)."""

from __future__ import annotations

import uuid

import pytest

from waiting import eventually

from browser_parts import JOB_URL, apply_leaves_after, expect, submit
from browser_parts import (  # noqa: F401  (fixtures)
    _need_browser, api, http, new_page)

GRACE = 20  # the API's default JOBFEED_LEAVE_GRACE, in seconds


async def request_state(pool, job_id: str) -> list[tuple]:
    """(leave pending?, left?) of each of the job's requests."""
    rows = await pool.fetch("select leave_at is not null as pending, left_at is not null as left "
                            "from jobfeed.requests where job_id = $1 order by created_at", uuid.UUID(job_id))
    return [tuple(r) for r in rows]


def stays(response) -> bool:
    return response.url.endswith("/stay") and response.request.method == "POST" and response.status == 200


async def called_off(response) -> bool:
    """The page's stay that found its closing beacon's leave and called it off
    (one that came first finds none and is asked again)."""
    return stays(response) and (await response.json())["called_off"]


async def test_reloading_or_going_back_to_the_job_page_keeps_the_job(api, new_page, http, pool):
    """Pressing F5 on a slow job used to leave its request, and with nobody
    else waiting, cancel the job. Now the page that comes back stays: the
    request is active, no leave is pending, and applying every leave a minute
    on cancels nothing."""
    page = await new_page()
    url = await submit(page, "reload-1")  # no worker: the job waits, queued
    job_id = JOB_URL.search(url).group(1)
    await expect(page.locator("#status")).to_have_text("queued")
    await expect(page.locator("#requesters")).to_have_text("Only you are waiting for this job.")

    async with page.expect_response(called_off):
        await page.reload()
    await expect(page.locator("#status")).to_have_text("queued")
    await expect(page.locator("#leave-row")).to_be_visible()
    assert await request_state(pool, job_id) == [(False, False)]

    # Away to the submit page (the beacon goes), then Back: the job page stays again
    await page.goto("/")
    await eventually(lambda: _pending(pool, job_id), timeout=10, interval=0.05, what="the leave pending")
    async with page.expect_response(called_off):
        await page.go_back()
    await page.wait_for_url(JOB_URL)
    await expect(page.locator("#requesters")).to_have_text("Only you are waiting for this job.")
    assert await request_state(pool, job_id) == [(False, False)]

    assert await apply_leaves_after(pool, 3600) == 0
    view = (await http.get(f"/api/jobs/{job_id}")).json()
    assert (view["status"], view["requesters"]) == ("queued", 1)


async def _pending(pool, job_id: str) -> bool:
    return await request_state(pool, job_id) == [(True, False)]


async def test_closing_the_job_page_leaves_once_the_grace_has_passed(api, new_page, http, pool):
    """A closed tab does not come back: its leave is pending (the job still
    has its requester), and once due the sweeper applies it, which abandons
    and cancels the job."""
    page = await new_page()
    url = await submit(page, "close-1")
    job_id = JOB_URL.search(url).group(1)
    await expect(page.locator("#status")).to_have_text("queued")
    await page.close(run_before_unload=True)

    await eventually(lambda: _pending(pool, job_id), timeout=10, interval=0.05, what="the leave pending")
    view = (await http.get(f"/api/jobs/{job_id}")).json()
    assert (view["status"], view["requesters"]) == ("queued", 1)
    assert await apply_leaves_after(pool, GRACE - 2) == 0  # not yet
    assert await apply_leaves_after(pool, GRACE + 1) == 1
    view = (await http.get(f"/api/jobs/{job_id}")).json()
    assert (view["status"], view["requesters"]) == ("canceled", 0)
    assert await request_state(pool, job_id) == [(True, True)]


async def test_a_beacon_that_arrives_after_the_page_came_back_is_called_off_too(api, new_page, http, pool):
    """The closing page's beacon and the new page's stay race (the stay wins
    about a third of reloads in chromium): a stay that finds no leave pending
    is asked again, and calls off the beacon that came late. Played out with
    the test as the late beacon: the page leaves by one of its own links (no
    beacon), the tab's flag says one went, and the page comes back."""
    page = await new_page()
    url = await submit(page, "late-beacon")
    job_id = JOB_URL.search(url).group(1)
    request_id = await page.evaluate(f"sessionStorage.getItem('jobfeed.request.{job_id}')")
    await expect(page.locator("#status")).to_have_text("queued")
    await page.click("text=Submit a job")
    await page.wait_for_url(lambda u: JOB_URL.search(u) is None)
    assert await request_state(pool, job_id) == [(False, False)]  # following our link: no beacon
    await page.evaluate(f"sessionStorage.setItem('jobfeed.leaving.{job_id}', '1')")

    async with page.expect_response(stays) as first:
        await page.go_back()
    assert (await (await first.value).json())["called_off"] is False  # nothing pending yet
    async with page.expect_response(called_off):
        r = await http.post(f"/api/requests/{request_id}/leave?grace=20")  # the beacon, late
        assert r.json()["leave_at"] is not None
    assert await request_state(pool, job_id) == [(False, False)]
    assert await apply_leaves_after(pool, 3600) == 0
    assert (await http.get(f"/api/jobs/{job_id}")).json()["status"] == "queued"


@pytest.mark.parametrize("api", [{"JOBFEED_LEAVE_GRACE": "0s"}], indirect=True)
async def test_with_no_grace_closing_the_page_leaves_at_once(api, new_page, http, pool):
    """JOBFEED_LEAVE_GRACE=0s: the page's beacon leaves at once (a reload
    leaves too, as the operator chose)."""
    page = await new_page()
    job_id = JOB_URL.search(await submit(page, "no-grace")).group(1)
    await expect(page.locator("#status")).to_have_text("queued")
    await page.close(run_before_unload=True)

    async def canceled():
        return (await http.get(f"/api/jobs/{job_id}")).json()["status"] == "canceled"
    await eventually(canceled, timeout=10, interval=0.05, what="the abandoned job canceled")
    assert await request_state(pool, job_id) == [(False, True)]
