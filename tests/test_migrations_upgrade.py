"""The upgrade from v0.1.0 (frozen under tests/releases/) ends in exactly a
fresh install's schema, and v0.1.0's calls keep working on it; each service
role may do what its process needs and no more."""

from __future__ import annotations

import asyncio
import datetime
import difflib
import json
import uuid

import asyncpg
import pytest

from jobfeed.worker import db, migrate, schemadoc, sql
from migration_dbs import ALL
from releases import v0_1_0
from migration_dbs import empty_db, login  # noqa: F401  (fixtures)


async def install_v0_1_0(url: str) -> None:
    conn = await db.connect(url)
    try:
        assert await v0_1_0.migrate(conn) == ["0001_jobs.sql", "functions"]
        # Data, written the way v0.1.0 wrote it, rides through the upgrade.
        q = v0_1_0.queries()
        await conn.execute(q["register_kind"], "old", 3, datetime.timedelta(minutes=1),
                           [datetime.timedelta(seconds=1)], 0.0, "", True)
        await conn.fetch(q["submit"], "old", "kept", '{"n": 1}', None, 65536)
    finally:
        await conn.close()


async def test_upgrade_from_v0_1_0_equals_a_fresh_install(empty_db, pg_admin_url):
    await install_v0_1_0(empty_db)
    conn = await db.connect(empty_db)
    try:
        assert await migrate.migrate(conn) == ALL[1:]
        assert await migrate.migrate(conn) == []
        upgraded = await schemadoc.describe(conn, bodies=True)
        assert await conn.fetchval("select count(*) from jobfeed.jobs where target = 'kept'") == 1
        assert await migrate.require_schema(conn)
    finally:
        await conn.close()
    fresh_name = f"m_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_admin_url)
    await admin.execute(f"create database {fresh_name}")
    try:
        conn = await db.connect(db.with_database(pg_admin_url, fresh_name))
        try:
            await migrate.migrate(conn)
            fresh = await schemadoc.describe(conn, bodies=True)
        finally:
            await conn.close()
    finally:
        await admin.execute(f"drop database {fresh_name} with (force)")
        await admin.close()
    assert "  body: " in fresh
    if upgraded != fresh:
        diff = "".join(difflib.unified_diff(fresh.splitlines(True), upgraded.splitlines(True),
                                            "fresh install", "upgraded from v0.1.0", n=1))
        pytest.fail("the upgraded schema differs from a fresh install:\n" + diff[:6000], pytrace=False)


async def test_the_upgrade_marks_the_jobs_already_waited_for(empty_db):
    """A job_deps row written before 0013 (which only settles the dependents
    of jobs marked has_dependents) still has its waiter settled: the upgrade
    marks the jobs they name, and so does job_deps' trigger for any later
    writer that does not mark them itself."""
    conn = await db.connect(empty_db)
    try:
        await conn.execute((sql.SQL_DIR / "bootstrap.sql").read_text())
        for number, name, text in sql.migrations():
            if number < 13:
                async with conn.transaction():
                    await conn.execute(text)
                    await conn.execute("insert into jobfeed.schema_migrations (version, name) values ($1, $2)",
                                       number, name)
        dep, other, late = [await conn.fetchval("insert into jobfeed.jobs (kind, target) values ('k', $1) "
                                                "returning id", t) for t in ("dep", "other", "late")]
        waiter = await conn.fetchval("insert into jobfeed.jobs (kind, target, state) values ('k', 'w', 'waiting') "
                                     "returning id")
        await conn.execute("insert into jobfeed.job_deps (job_id, dep_id) values ($1, $2)", waiter, dep)
        assert await migrate.migrate(conn) == [name for n, name, _ in sql.migrations() if n >= 13] + ["functions"]
        marked = "select id from jobfeed.jobs where has_dependents order by id"
        assert [r["id"] for r in await conn.fetch(marked)] == [dep]
        await conn.execute("insert into jobfeed.job_deps (job_id, dep_id) values ($1, $2)", waiter, late)
        assert [r["id"] for r in await conn.fetch(marked)] == sorted([dep, late])
        await conn.execute("delete from jobfeed.job_deps where dep_id = $1", late)
        await conn.execute("select jobfeed.register_kind('k')")
        for _ in (dep, other, late):
            job = await conn.fetchrow("select id, generation from jobfeed.claim_v3(array['k'], 1, 'w')")
            assert await conn.fetchval("select jobfeed.complete($1, $2, null)", job["id"], job["generation"])
        assert await conn.fetchval("select state::text from jobfeed.jobs where id = $1", waiter) == "queued"
    finally:
        await conn.close()


async def test_concurrent_migrations_from_v0_1_0(empty_db):
    await install_v0_1_0(empty_db)
    conns = await asyncio.gather(*(db.connect(empty_db) for _ in range(6)))
    try:
        results = await asyncio.gather(*(migrate.migrate(c) for c in conns))
        assert sorted(results, key=len) == [[]] * 5 + [ALL[1:]]
        assert await migrate.pending(conns[0]) == []
    finally:
        await asyncio.gather(*(c.close() for c in conns))


async def test_a_v0_1_0_process_starting_after_the_upgrade_changes_nothing(empty_db):
    """v0.1.0 migrated at every start and would put its function bodies back:
    on an upgraded database its start fails instead, and rolls back."""
    await install_v0_1_0(empty_db)
    conn = await db.connect(empty_db)
    try:
        await migrate.migrate(conn)
        before = await schemadoc.describe(conn, bodies=True)
        with pytest.raises(asyncpg.CheckViolationError, match="migrated by a newer jobfeed"):
            await v0_1_0.migrate(conn)
        assert await schemadoc.describe(conn, bodies=True) == before
        assert await migrate.pending(conn) == []
    finally:
        await conn.close()


def test_a_release_that_changes_functions_adds_a_migration():
    """The version check compares migration numbers only, so a release whose
    functions differ from the last frozen release's must ship a new migration
    (an empty one will do): else its processes would start on a database that
    lacks their functions."""
    old = [(name, sql.normalize(text)) for name, text in v0_1_0.function_files()]
    new = [(name, sql.normalize(text)) for name, text in sql.function_files()]
    old_version = max(int(p.name[:4]) for p in (v0_1_0.SQL_DIR / "migrations").glob("*.sql"))
    if old != new:
        assert migrate.SCHEMA_VERSION > old_version


async def test_v0_1_0_calls_work_on_the_upgraded_schema(empty_db, login):
    """Every query of v0.1.0's sql/queries.sql, made as v0.1.0's Python made it,
    as the service role that makes it, on a database upgraded from v0.1.0."""
    await install_v0_1_0(empty_db)
    conn = await db.connect(empty_db)
    try:
        await migrate.migrate(conn)
    finally:
        await conn.close()
    q = v0_1_0.queries()
    used: set[str] = set()
    minute, second = datetime.timedelta(minutes=1), datetime.timedelta(seconds=1)

    async def call(c: asyncpg.Connection, name: str, *args):
        used.add(name)
        return await c.fetch(q[name], *args)

    api, worker, sweeper = [await login(empty_db, r) for r in ("jobfeed_api", "jobfeed_worker", "jobfeed_sweeper")]
    for c in (api, worker, sweeper):
        assert (await migrate.require_schema(c)).compatible
    await call(worker, "register_kind", "k", 2, minute, [second], 0.0, "kind k", True)
    await call(api, "register_kind", "k2", 2, minute, [second], 0.0, "", False)
    assert {json.loads(r[0])["kind"] for r in await call(api, "list_kinds")} >= {"k", "k2", "old"}
    [a] = await call(api, "submit", "k", "a", '{"x": 1}', None, 65536)
    assert a["created"]
    rows = await call(api, "submit_many", "k", ["b", "c", "d"], ['{}', '{}', '{}'], None, 65536)
    assert len(rows) == 3
    [e] = await call(api, "submit_many_views", "k", ["e"], ['{}'], 65536)
    assert json.loads(e["view"])["status"] == "queued"
    assert json.loads((await call(api, "get_job", a["id"]))[0][0])["target"] == "a"
    assert len(await call(api, "get_jobs", [a["id"], e["id"]])) == 2
    assert json.loads((await call(api, "admin_get_job", a["id"]))[0][0])["state"] == "queued"
    assert len(await call(api, "admin_get_jobs", [a["id"]])) == 1
    assert len(await call(api, "admin_list_jobs", None, "k", 10, None)) == 5
    assert "counts" in json.loads((await call(api, "stats", 15))[0][0])
    assert (await call(worker, "next_due", ["k"]))[0][0] is not None

    claimed = await call(worker, "claim", ["k"], 5, "w1", minute)
    assert len(claimed) == 5
    jobs = {r["target"]: (r["id"], r["generation"]) for r in claimed}
    assert (await call(worker, "progress", *jobs["a"], 1.0, 2.0, "half"))[0][0] is True
    assert (await call(worker, "checkpoint", *jobs["a"], '{"at": 1}'))[0][0] is True
    assert (await call(worker, "extend_many", [jobs["a"][0]], [jobs["a"][1]]))[0][0] == []
    assert (await call(worker, "complete", *jobs["a"], '{"ok": true}'))[0][0] is True
    done = (await call(worker, "complete_many", [jobs["b"][0]], [jobs["b"][1]], ['{"ok": 1}']))[0][0]
    assert list(done) == [jobs["b"][0]]
    assert (await call(worker, "fail_transient", *jobs["c"], "flaky", "try again", None))[0][0] is True
    assert (await call(worker, "fail_permanent", *jobs["d"], "bad", "no"))[0][0] is True
    assert (await call(worker, "release", *jobs["e"], "busy", second, "later"))[0][0] is True
    states = {r["target"]: r["state"] for r in await api.fetch(
        "select v->>'target' as target, v->>'state' as state from jobfeed.admin_list_jobs(null, 'k', 10) v")}
    assert states == {"a": "completed", "b": "completed", "c": "queued", "d": "failed", "e": "queued"}
    assert json.loads((await call(api, "retry", jobs["d"][0]))[0][0])["state"] == "queued"
    assert json.loads((await call(api, "cancel", jobs["c"][0]))[0][0])["state"] == "canceled"
    assert (await call(sweeper, "sweep_expired"))[0][0] == 0
    assert (await call(sweeper, "delete_finished", datetime.timedelta(days=7), 100))[0][0] == 0
    assert used == set(q), f"not exercised: {sorted(set(q) - used)}"


async def test_only_workers_overwrite_a_kinds_settings(dsn, login):
    api, worker = await login(dsn, "jobfeed_api"), await login(dsn, "jobfeed_worker")
    register = "select jobfeed.register_kind($1, $2, '1 minute', '{1 second}', 0, '', $3)"
    lease = "select max_attempts from jobfeed.kinds where kind = $1"
    owner = await db.connect(dsn)
    try:
        await api.execute(register, "new", 3, True)  # nobody had it: the API may add it
        assert await owner.fetchval(lease, "new") == 3
        await api.execute(register, "new", 9, True)  # asking to overwrite changes nothing
        assert await owner.fetchval(lease, "new") == 3
        await worker.execute(register, "new", 7, True)
        assert await owner.fetchval(lease, "new") == 7
        await worker.execute(register, "new", 8, False)
        assert await owner.fetchval(lease, "new") == 7
    finally:
        await owner.close()


@pytest.mark.parametrize("role", ["jobfeed_api", "jobfeed_worker", "jobfeed_sweeper"])
async def test_each_role_reads_the_version_and_hears_changes(dsn, login, role):
    conn = await login(dsn, role)
    assert await migrate.require_schema(conn) == migrate.SchemaStatus(migrate.SCHEMA_VERSION, 0)
    heard: asyncio.Queue = asyncio.Queue()
    await conn.add_listener("jobfeed_changed", lambda *args: heard.put_nowait(args[-1]))
    owner = await db.connect(dsn)
    try:
        await owner.execute("select jobfeed.register_kind('k')")
        [job] = await owner.fetch("select * from jobfeed.submit('k', 't')")
        assert (await asyncio.wait_for(heard.get(), 5)).startswith(str(job["id"]))
    finally:
        await owner.close()
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("update jobfeed.schema_version set version = 0")
