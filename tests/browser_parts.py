"""What the browser tests share: Debian's chromium (the tests skip without it,
except under CI=true, where they fail), a real API process, a real worker
process, pages in contexts of their own, and the steps many tests take."""

from __future__ import annotations

import os
import re
import socket
import sys
from pathlib import Path

import httpx
import pytest

from conftest import JOBFEED, skip_or_fail, worker_env
from servers import CLIENT_LIMITS, UVICORN_HTTP, Process, api_env

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


@pytest.fixture(scope="module", autouse=True)
def _need_browser():
    """Before any server starts: no browser skips these tests, but fails them in CI."""
    skip_or_fail(_browser_missing())


class Api:
    """A real API process: uvicorn with the deployed factory, as
    servers.start_api_process runs it, but on a port chosen here so that a
    restarted API answers at the same address (the browser reconnects to it)."""

    def __init__(self, dsn: str, **env: str):
        self.env = env
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.dsn = dsn
        self.proc: Process | None = None

    async def start(self) -> None:
        self.proc = Process([sys.executable, "-m", "uvicorn", "jobfeed.api.app:create_app", "--factory",
                             "--host", "127.0.0.1", "--port", str(self.port),
                             "--timeout-graceful-shutdown", "2", *UVICORN_HTTP], api_env(self.dsn, **self.env))
        await self.proc.start(ready=r"Uvicorn running on")


@pytest.fixture
async def api(dsn, request):
    """The API; a test may give it settings: parametrize "api" with a dict of
    environment variables, indirect=True."""
    server = Api(dsn, **getattr(request, "param", {}))
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
    async with httpx.AsyncClient(base_url=api.url, timeout=10, limits=CLIENT_LIMITS) as client:
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


async def apply_leaves_after(pool, seconds: float) -> int:
    """Deferred leaves (a closed job page's) that are due `seconds` from now,
    applied as the sweeper would then: the time planted, not waited for."""
    return await pool.fetchval("select jobfeed.leave_due(1000, now() + make_interval(secs => $1))", seconds)
