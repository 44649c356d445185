"""jobfeed behind a pooler in transaction mode (a real PgBouncer, Debian's
`pgbouncer`): DATABASE_URL names the pooler, JOBFEED_DIRECT_URL the server.
The pools go through the pooler without named prepared statements; what keeps
session state (LISTEN, the seats' advisory locks, a migration's) connects to
the server itself. Without pgbouncer these tests are skipped, except under
CI=true, where they fail."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import uuid
from urllib.parse import parse_qs, urlsplit

import asyncpg
import httpx
import pytest

from jobfeed.worker import db, migrate

from conftest import JOBFEED, skip_or_fail, worker_env
from servers import ADMIN_TOKEN, Process, Watcher, free_port, start_api_process
from waiting import eventually

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"
# pgbouncer refuses to run as root; as root it runs as the servers' own user
RUN_AS = "embedded_postgres"


@pytest.fixture(scope="module", autouse=True)
def _need_pgbouncer():
    skip_or_fail(None if os.access(PGBOUNCER, os.X_OK) else "pgbouncer is not installed (apt-get install pgbouncer)")


@pytest.fixture
async def pooled(dsn, tmp_path):
    """The test database through a PgBouncer in transaction mode, with fewer
    server connections than its clients hold: a session's state cannot stay
    with it. application_name_add_host marks what came through it."""
    # the server as the test's URL reaches it: a host, or a socket's folder (the embedded server's)
    server = urlsplit(dsn)
    host = server.hostname or parse_qs(server.query)["host"][0]
    conn = await asyncpg.connect(dsn)
    server_port = await conn.fetchval("select current_setting('port')")
    await conn.close()
    port = free_port()
    (tmp_path / "users.txt").write_text('"postgres" ""\n')
    (tmp_path / "pgbouncer.ini").write_text(
        f"[databases]\n* = host={host} port={server_port}\n"
        f"[pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {tmp_path / 'users.txt'}\npool_mode = transaction\n"
        "default_pool_size = 3\nmax_client_conn = 200\napplication_name_add_host = 1\n")
    args = [PGBOUNCER, str(tmp_path / "pgbouncer.ini")]
    if os.geteuid() == 0:
        shutil.chown(tmp_path, RUN_AS)
        os.chmod(tmp_path, 0o755)
        args[1:1] = ["-u", RUN_AS]
    log = tmp_path / "pgbouncer.log"  # a file: it logs every connection, and a full pipe would stop it
    with open(log, "wb") as out:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=out)
    url = f"postgresql://postgres@127.0.0.1:{port}{server.path}"

    async def answers():
        if proc.poll() is not None:
            raise AssertionError(f"pgbouncer exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            conn = await asyncpg.connect(url, statement_cache_size=0)
        except OSError:
            return False
        await conn.close()
        return True
    try:
        await eventually(answers, timeout=10, what="pgbouncer to answer")
        yield url
    finally:
        proc.terminate()
        proc.wait(5)


async def sessions(dsn: str) -> list[str]:
    """The application names of the other sessions on the test's database."""
    conn = await asyncpg.connect(dsn)
    try:
        return [r[0] for r in await conn.fetch("select application_name from pg_stat_activity"
                                               " where datname = current_database() and pid <> pg_backend_pid()")]
    finally:
        await conn.close()


async def test_the_api_and_a_worker_run_through_a_transaction_pooler(dsn, pooled):
    env = {"JOBFEED_DIRECT_URL": dsn}
    api, base = await start_api_process(pooled, **env)
    # No polling to fall back on: the worker hears of each job by its LISTEN.
    worker = Process(JOBFEED + ["worker", "--kinds", "demo", "--concurrency", "4", "--poll", "60s"],
                     worker_env(pooled, **env))
    try:
        await worker.start(ready=r"kinds demo")
        async with httpx.AsyncClient(base_url=base, timeout=20) as http:
            # each watched from its submission on, and long enough to be seen moving
            watchers, runs = [], []
            for i in range(8):
                answer = await http.post("/api/jobs", json={"kind": "demo", "target": f"pooled-{i}",
                                                            "payload": {"steps": 4, "step_ms": 250}})
                assert answer.status_code == 201, answer.text
                watchers.append(Watcher(http, f"/api/jobs/{answer.json()['id']}/events"))
                runs.append(asyncio.create_task(watchers[-1].run()))
            await asyncio.wait_for(asyncio.gather(*runs), 30)
            for w in watchers:
                assert w.ended and w.views[-1]["status"] == "completed", (w.views, api.log, worker.log)
                # the feed heard every step: processing with progress before the end
                assert any(v["status"] == "processing" and v["progress"] for v in w.views), w.views
            # the admin's read, through the pooler too
            listed = await http.get("/api/admin/jobs?kind=demo", headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})
            assert listed.status_code == 200 and len(listed.json()["jobs"]) == 8, listed.text
        names = await sessions(dsn)
        # the sessions that keep state are the server's own (their names bare)...
        for name in ("jobfeed-api-feed", "jobfeed-worker-listen", "jobfeed-worker-seats"):
            assert name in names, names
        # ...and the pools' and the claim loop's came through the pooler, named with its host
        assert not {"jobfeed-api", "jobfeed-worker", "jobfeed-worker-claim"} & set(names), names
        assert any(n.startswith("jobfeed-") and " - " in n for n in names), names
    finally:
        await worker.stop()
        await api.stop()


async def test_migrate_through_a_pooler_connects_to_the_server(pg_admin_url, pooled):
    """`jobfeed migrate` holds its advisory lock for the whole migration: in a
    session of the server's, named as itself; the pooled URL serves the check
    a service makes at start."""
    name = f"t_{uuid.uuid4().hex[:12]}"  # empty: not the migrated template's copy
    admin = await asyncpg.connect(pg_admin_url)
    await admin.execute(f"create database {name}")
    try:
        fresh = db.with_database(pg_admin_url, name)
        fresh_pooled = db.with_database(pooled, name)
        # the lock held elsewhere: the migration waits for it on its own session
        holder = await asyncpg.connect(fresh)
        await holder.execute("select pg_advisory_lock($1)", migrate.MIGRATION_LOCK)
        proc = await asyncio.create_subprocess_exec(
            *JOBFEED, "migrate", env=worker_env(fresh_pooled, JOBFEED_DIRECT_URL=fresh),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)

        async def waiting():
            return [n for n in await sessions(fresh) if n == "jobfeed-migrate"]
        assert await eventually(waiting, timeout=20, what="the migration's own session") == ["jobfeed-migrate"]
        await holder.close()
        out, err = await asyncio.wait_for(proc.communicate(), 60)
        assert proc.returncode == 0, err.decode()
        assert b"applied:" in out
        check = subprocess.run(JOBFEED + ["schedules"], env=worker_env(fresh_pooled, JOBFEED_DIRECT_URL=fresh),
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stderr
    finally:
        await admin.execute(f"drop database if exists {name} with (force)")
        await admin.close()


async def test_without_the_direct_url_a_transaction_pooler_is_named_not_a_traceback(dsn, pooled):
    """Unsupported (the README asks for JOBFEED_DIRECT_URL), but it must say so:
    the server connections a pooler keeps still hold the named statements an
    earlier command prepared, so a later command's collide. Each command either
    works or stops with exit 2 and one line naming the setting."""
    env = worker_env(pooled)
    results = [subprocess.run(JOBFEED + ["schedules"], env=env, capture_output=True, text=True, timeout=60)
               for _ in range(6)]
    failed = [r for r in results if r.returncode != 0]
    assert failed, [r.returncode for r in results]  # the collision happens: else this proves nothing
    for r in failed:
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and "JOBFEED_DIRECT_URL" in lines[0], r.stderr
