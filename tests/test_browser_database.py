"""The pages while the API cannot reach its database (see test_browser.py for
the browser): the API reaches the test database through a relay the test
shuts (tests/relay.py). The event streams then stay open, heartbeats and all,
and carry nothing: the job page and the dashboard said "Live" throughout. They
now say that updates are paused, and "Live" again once the database and the
API's feed are back."""

from __future__ import annotations

from urllib.parse import urlsplit

import pytest

from relay import Relay
from servers import ADMIN_TOKEN

from browser_parts import DESKTOP, WAIT_MS, Api, expect
from browser_parts import (  # noqa: F401  (fixtures)
    _need_browser, http, new_page)

PAUSED = "Database unreachable: updates are paused."


@pytest.fixture
async def relay(dsn):
    relay = Relay(dsn)
    await relay.open()
    yield relay
    await relay.shut()


@pytest.fixture
async def api(relay):
    """The API on the relayed database (the other fixtures use this one)."""
    server = Api(relay.dsn)
    await server.start()
    yield server
    await server.proc.stop()


async def moved_on_until(page, locator, text: str) -> None:
    """Move the page's clock on one check of api/live at a time (the page asks
    every 5 s) until the locator shows text: the answers themselves are real."""
    for _ in range(20):
        await page.clock.run_for(5000)
        try:
            await expect(locator).to_have_text(text, timeout=500)
            return
        except AssertionError:
            continue
    await expect(locator).to_have_text(text, timeout=1)


async def test_the_job_page_says_updates_pause_while_the_database_is_away(relay, api, new_page, http):
    job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": "db-away"})).json()["id"]
    page = await new_page(DESKTOP)
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url)
            if urlsplit(request.url).path.endswith("/api/live") else None)
    await page.clock.install()  # the page's timers run when the test moves its time on
    await page.goto(f"/jobs/{job_id}")
    connection = page.locator("#connection")
    await expect(connection).to_have_text("Live: updates appear as they happen.")

    await relay.shut()
    await moved_on_until(page, connection, PAUSED)
    await expect(connection).to_have_attribute("data-state", "paused")
    await expect(page.locator("#status")).to_have_text("queued")  # the last status the server gave

    await relay.open()
    await moved_on_until(page, connection, "Live: updates appear as they happen.")
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    assert (await http.post(f"/api/admin/jobs/{job_id}/cancel", headers=admin)).status_code == 200
    await expect(page.locator("#status")).to_have_text("canceled")  # live again, truly
    await expect(connection).to_contain_text("Live updates stopped")
    # the job is over: the page stops asking
    before = len(asked)
    assert before >= 2
    await page.clock.run_for(60_000)  # twelve pauses between two questions, at once
    await page.evaluate("() => fetch('/healthz')")  # anything the timers asked went out before this
    assert len(asked) == before


async def test_the_dashboard_says_updates_pause_while_the_database_is_away(relay, api, new_page, http):
    page = await new_page(DESKTOP)
    await page.goto("/admin")
    await page.fill("#token", ADMIN_TOKEN)
    await page.press("#token", "Enter")
    connection = page.locator("#connection")
    await expect(connection).to_have_text("Live: changes appear as they happen.")

    await relay.shut()
    await expect(connection).to_have_text(PAUSED, timeout=WAIT_MS)
    await expect(connection).to_have_attribute("data-state", "paused")

    await relay.open()
    await expect(connection).to_have_text("Live: changes appear as they happen.", timeout=WAIT_MS)
    job_id = (await http.post("/api/jobs", json={"kind": "demo", "target": "db-back"})).json()["id"]
    await expect(page.locator(f'#jobs tr[data-job-id="{job_id}"]')).to_be_visible()
