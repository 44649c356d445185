"""The migrator: idempotent, safe when many deploys migrate together, re-applies
functions whose text (comments left out) changed, the only code that runs DDL;
a fresh migrate equals the documented schema (sql/schema.txt). The version
check every process runs at start. The upgrade from v0.1.0 (frozen under
tests/releases/) ends in exactly a fresh install's schema, and v0.1.0's calls
keep working on it."""

from __future__ import annotations

import asyncio
import datetime
import difflib
import json
import os
import subprocess
import sys
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from conftest import JOBFEED, worker_env
from jobfeed.worker import db, migrate, schemadoc, sql
from releases import v0_1_0

SCHEMA_TXT = sql.SQL_DIR / "schema.txt"
ALL = [name for _, name, _ in sql.migrations()] + ["functions"]


@pytest.fixture
async def empty_db(pg_admin_url):
    """A database with nothing of jobfeed in it (not cloned from the template)."""
    name = f"m_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_admin_url)
    await admin.execute(f"create database {name}")
    yield db.with_database(pg_admin_url, name)
    await admin.execute(f"drop database if exists {name} with (force)")
    await admin.close()


async def describe(url: str) -> str:
    conn = await db.connect(url)
    try:
        return await schemadoc.describe(conn)
    finally:
        await conn.close()


def check_documented(text: str) -> None:
    documented = SCHEMA_TXT.read_text() if SCHEMA_TXT.exists() else ""
    if text == documented:
        return
    if os.environ.get("JOBFEED_UPDATE_SCHEMA") == "1":
        SCHEMA_TXT.write_text(text)
        return
    diff = "".join(difflib.unified_diff(documented.splitlines(True), text.splitlines(True),
                                        "sql/schema.txt", "fresh migrate", n=1))
    pytest.fail("sql/schema.txt does not match a freshly migrated database. If the change is intended, "
                "regenerate it: JOBFEED_UPDATE_SCHEMA=1 pytest tests/test_migrations.py "
                "(or python -m jobfeed.worker.schemadoc --fresh <server url> > sql/schema.txt)\n" + diff[:6000],
                pytrace=False)


async def test_fresh_migrate_matches_documented_schema(empty_db):
    conn = await db.connect(empty_db)
    try:
        assert await migrate.pending(conn) == ALL
        assert await migrate.migrate(conn) == ALL
        assert await migrate.pending(conn) == []
        # The description does not depend on the session's settings.
        await conn.execute("set intervalstyle = 'iso_8601'; set search_path = jobfeed, public; "
                           "set timezone = 'Asia/Tokyo'; set datestyle = 'SQL, DMY'")
        text = await schemadoc.describe(conn)
    finally:
        await conn.close()
    check_documented(text)
    for must in ("table jobfeed.jobs", "fillfactor=80", "vacuum_index_cleanup=on", "enum jobfeed.job_state",
                 "CREATE UNIQUE INDEX jobs_unfinished_target", "security definer",
                 "set search_path=jobfeed, pg_temp", "grant EXECUTE to jobfeed_worker"):
        assert must in text
    assert "skip locked" not in text.lower(), "function bodies must not be rendered"


async def test_migrate_twice_is_a_no_op(dsn):
    before = await describe(dsn)
    conn = await db.connect(dsn)
    try:
        applied_at = await conn.fetch("select * from jobfeed.schema_migrations order by version")
        version = await conn.fetchrow("select * from jobfeed.schema_version")
        assert await migrate.migrate(conn) == []
        assert await conn.fetch("select * from jobfeed.schema_migrations order by version") == applied_at
        assert await conn.fetchrow("select * from jobfeed.schema_version") == version
    finally:
        await conn.close()
    assert await describe(dsn) == before


async def test_concurrent_migrations_on_an_empty_database(empty_db):
    conns = await asyncio.gather(*(db.connect(empty_db) for _ in range(8)))
    try:
        assert await migrate.pending(conns[0]) == ALL
        results = await asyncio.gather(*(migrate.migrate(c) for c in conns))
        # One did the work; the others waited on the lock and found nothing left.
        assert sorted(results, key=len) == [[]] * 7 + [ALL]
        assert await migrate.pending(conns[0]) == []
        assert await conns[0].fetchval("select count(*) from jobfeed.schema_migrations") == len(ALL) - 1
        # The lock is released: nobody holds it afterwards.
        assert await conns[0].fetchval("select count(*) from pg_locks l join pg_database d on d.oid = l.database "
                                         "where l.locktype = 'advisory' and d.datname = current_database()") == 0
    finally:
        await asyncio.gather(*(c.close() for c in conns))
    check_documented(await describe(empty_db))


async def test_changed_function_text_is_reapplied(dsn, monkeypatch):
    original = sql.function_files()
    marker = "target must be 1 to 512 bytes"
    assert any(marker in text for _, text in original)
    changed = [(name, text.replace(marker, marker + " (changed)")) for name, text in original]
    monkeypatch.setattr(sql, "function_files", lambda: changed)
    conn = await db.connect(dsn)
    try:
        await conn.execute("select jobfeed.register_kind('k')")
        assert await migrate.pending(conn) == ["functions"]
        assert await migrate.migrate(conn) == ["functions"]
        assert await migrate.pending(conn) == []
        with pytest.raises(asyncpg.PostgresError, match=r"\(changed\)"):
            await conn.fetch("select * from jobfeed.submit('k', '')")
        assert await migrate.migrate(conn) == []
        # Back to the files on disk: that is a change again.
        monkeypatch.setattr(sql, "function_files", lambda: original)
        assert await migrate.pending(conn) == ["functions"]
        assert await migrate.migrate(conn) == ["functions"]
        with pytest.raises(asyncpg.PostgresError) as e:
            await conn.fetch("select * from jobfeed.submit('k', '')")
        assert "(changed)" not in str(e.value)
        # Re-applying keeps the grants (a re-created function starts executable by PUBLIC).
        assert not await conn.fetchval("""
            select bool_or(has_function_privilege('public', p.oid, 'execute'))
              from pg_proc p where p.pronamespace = 'jobfeed'::regnamespace""")
    finally:
        await conn.close()


async def test_schemadoc_command_prints_the_description(dsn):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobfeed.worker.schemadoc", dsn,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=sql.SQL_DIR.parent)
    out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert out.decode() == await describe(dsn)


# ---------------------------------------------------------------- comments are not changes

def test_normalize_drops_comments_and_layout_but_not_literals():
    text = """create function f() returns text language sql as $$
        -- a comment
        select 'a -- not a comment' || '  two  spaces' /* gone */ || "x--y"
    $$; -- trailing"""
    assert sql.normalize(text) == ("create function f() returns text language sql as $$ "
                                   "select 'a -- not a comment' || '  two  spaces' || \"x--y\" $$;")
    assert sql.normalize("select 'it''s -- kept'") == "select 'it''s -- kept'"


async def test_editing_a_comment_is_not_a_schema_change(dsn, monkeypatch):
    edited = [(name, "-- a new first line\n" + text.replace("\n    ", "\n        ").replace("-- ", "--  "))
              for name, text in sql.function_files()]
    assert edited != sql.function_files()
    monkeypatch.setattr(sql, "function_files", lambda: edited)
    conn = await db.connect(dsn)
    try:
        assert await migrate.pending(conn) == []
        assert await migrate.migrate(conn) == []
    finally:
        await conn.close()


# ---------------------------------------------------------------- the version check

async def test_the_version_check_accepts_equal_and_newer_compatible(dsn):
    needs = migrate.SCHEMA_VERSION
    conn = await db.connect(dsn)
    try:
        assert await migrate.require_schema(conn) == migrate.SchemaStatus(needs, 0)
        # A newer release migrated, adding only: this one keeps running.
        await conn.execute("update jobfeed.schema_version set version = $1", needs + 3)
        assert (await migrate.require_schema(dsn)).version == needs + 3
        # ... until a migration drops what this release calls.
        await conn.execute("update jobfeed.schema_version set compatible_from = $1", needs + 1)
        with pytest.raises(migrate.SchemaError, match="no longer supports this jobfeed.*upgrade jobfeed"):
            await migrate.require_schema(dsn)
        await conn.execute("update jobfeed.schema_version set version = $1, compatible_from = 0", needs - 1)
        with pytest.raises(migrate.SchemaError, match=f"at version {needs - 1}.*run `jobfeed migrate`"):
            await migrate.require_schema(dsn)
    finally:
        await conn.close()


async def test_the_version_check_on_an_unmigrated_or_v0_1_0_database(empty_db):
    with pytest.raises(migrate.SchemaError, match="not migrated.*run `jobfeed migrate`"):
        await migrate.require_schema(empty_db)
    conn = await db.connect(empty_db)
    try:
        await v0_1_0.migrate(conn)
    finally:
        await conn.close()
    with pytest.raises(migrate.SchemaError, match="not migrated.*run `jobfeed migrate`"):
        await migrate.require_schema(empty_db)


async def test_migrate_never_puts_older_functions_over_newer_ones(dsn):
    conn = await db.connect(dsn)
    try:
        await conn.execute("update jobfeed.schema_version set version = version + 1, functions = 'newer'")
        with pytest.raises(migrate.SchemaError, match="newer than this jobfeed"):
            await migrate.migrate(conn)
        assert await conn.fetchval("select functions from jobfeed.schema_version") == "newer"
        assert await conn.fetchval("select count(*) from pg_locks where locktype = 'advisory' "
                                   "and pid = pg_backend_pid()") == 0
    finally:
        await conn.close()


@pytest.mark.parametrize("args", [["api", "--port", "1"], ["worker"], ["sweeper"], ["submit", "demo", "t"],
                                  ["show", "00000000-0000-0000-0000-000000000000"]])
async def test_processes_refuse_an_unmigrated_database(empty_db, args):
    proc = await asyncio.create_subprocess_exec(*JOBFEED, *args, env=worker_env(empty_db),
                                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2, err.decode()
    assert "run `jobfeed migrate`" in err.decode() and "Traceback" not in err.decode()
    conn = await db.connect(empty_db)
    try:  # and ran no DDL
        assert await conn.fetchval("select to_regnamespace('jobfeed')") is None
    finally:
        await conn.close()


async def test_release_n_runs_beside_n_plus_1_until_a_migration_raises_the_floor(dsn, monkeypatch):
    """The next releases, simulated: N+1 adds a table and a new function version;
    N keeps passing its check and calling what it calls, and N's migrate (an old
    deploy job run again) changes nothing. N+2 drops what N called and raises
    compatible_from: N now refuses to start."""
    n = migrate.SCHEMA_VERSION
    ours, our_functions = sql.migrations(), sql.function_files()
    v2 = ("95_next.sql", "create or replace function jobfeed.submit_v2() returns int language sql as $$ select 2 $$;")
    n1 = ours + [(n + 1, f"{n + 1:04d}_next.sql", "create table jobfeed.next_table (id int);")]
    n2 = n1 + [(n + 2, f"{n + 2:04d}_drop.sql",
                "drop table jobfeed.next_table;"
                f" update jobfeed.schema_version set compatible_from = greatest(compatible_from, {n + 1});")]

    async def release_migrates(version: int, migrations, functions) -> list[str]:
        with monkeypatch.context() as m:
            m.setattr(migrate, "SCHEMA_VERSION", version)
            m.setattr(sql, "migrations", lambda: migrations)
            m.setattr(sql, "function_files", lambda: functions)
            return await migrate.migrate(conn)

    conn = await db.connect(dsn)
    try:
        await conn.execute("select jobfeed.register_kind('k')")
        assert await release_migrates(n + 1, n1, our_functions + [v2]) == [f"{n + 1:04d}_next.sql", "functions"]
        status = await migrate.require_schema(conn)  # release N
        assert (status.version, status.needs) == (n + 1, n)
        assert (await conn.fetchrow("select * from jobfeed.submit('k', 'still works')"))["created"]
        with pytest.raises(migrate.SchemaError, match="newer than this jobfeed"):
            await migrate.migrate(conn)
        assert await conn.fetchval("select jobfeed.submit_v2()") == 2

        assert await release_migrates(n + 2, n2, our_functions + [v2]) == [f"{n + 2:04d}_drop.sql"]
        with pytest.raises(migrate.SchemaError, match="no longer supports this jobfeed"):
            await migrate.require_schema(conn)
    finally:
        await conn.close()


# ---------------------------------------------------------------- upgrading from v0.1.0

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


@pytest.fixture
async def login(pg_admin_url):
    """login(url, role) -> a connection to url as a fresh LOGIN user that holds only that role."""
    owner = await db.connect(pg_admin_url)
    users, conns = [], []

    async def make(url: str, role: str) -> asyncpg.Connection:
        user = f"mig_{uuid.uuid4().hex[:12]}"
        await owner.execute(f"create role {user} login in role {role}")
        users.append(user)
        conns.append(await db.connect(as_user(url, user)))
        return conns[-1]

    yield make
    for c in conns:
        await c.close()
    for u in users:  # roles are cluster-wide: leave none behind
        await owner.execute(f"drop role {u}")
    await owner.close()


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, f"{user}@{parts.netloc.rpartition('@')[2]}", parts.path, parts.query,
                       parts.fragment))


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


# ---------------------------------------------------------------- service roles

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
