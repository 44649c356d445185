"""The migrator: idempotent, safe when many deploys migrate together, re-applies
functions whose text (comments left out) changed, the only code that runs DDL;
a fresh migrate equals the documented schema (sql/schema.txt). The version
check every process runs at start. The upgrade from v0.1.0 and the service
roles: test_migrations_upgrade.py."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import uuid

import asyncpg
import pytest

from conftest import JOBFEED, ROOT, worker_env
from jobfeed.worker import db, migrate, schemadoc, sql
from migration_dbs import ALL, check_documented, describe
from migration_dbs import empty_db  # noqa: F401  (a fixture)
from releases import v0_1_0

README = ROOT / "README.md"


@pytest.mark.pg18  # sql/schema.txt is 18's (before 18 some functions are PL/pgSQL: README)
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


async def test_concurrent_migrations_on_an_empty_database(empty_db, dsn):
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
    # the schema one migration makes (the session's database), on any server
    assert await describe(empty_db) == await describe(dsn)


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
    said = err.decode().strip().splitlines()[-1]
    assert f"error: {said.removeprefix('error: ')}" in README.read_text()  # the README shows it as it is
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


async def test_a_database_owner_without_createrole_migrates_once_the_roles_exist(pg_admin_url, template_url):
    """The service roles are the cluster's, made by the first database migrated
    (the template's, here). An owner given its own database, without
    CREATEROLE, was refused: CREATE ROLE checks that right before it looks for
    the role."""
    from migration_dbs import as_user
    name, owner = f"m_{uuid.uuid4().hex[:12]}", f"own_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(pg_admin_url)
    try:
        await admin.execute(f"create role {owner} login nocreaterole")
        await admin.execute(f"create database {name} owner {owner}")
        conn = await db.connect(as_user(db.with_database(pg_admin_url, name), owner))
        try:
            assert await migrate.migrate(conn)
            assert (await migrate.require_schema(conn)).compatible
        finally:
            await conn.close()
    finally:
        await admin.execute(f"drop database if exists {name} with (force)")
        await admin.execute(f"drop owned by {owner}")
        await admin.execute(f"drop role if exists {owner}")
        await admin.close()


async def test_the_version_rises_with_the_functions_not_before(empty_db, monkeypatch):
    """A process checks the version at start: before, each migration raised it
    in its own transaction and the functions came after, in another, so a
    process starting between the two passed its check and failed on a missing
    function (UndefinedFunctionError). A migrate that stops before the
    functions now leaves the database as it was: migrations, functions and
    version are one transaction (a black-box pass found release N, running
    beside a migrate, failing every submit on a migrated table under its old
    functions, and a migrate stopped by a deadlock leaving it so)."""

    def broken():
        raise RuntimeError("stopped before the functions")
        yield  # a generator, as sql.function_files is

    monkeypatch.setattr(migrate.sql, "function_files", broken)
    conn = await db.connect(empty_db)
    try:
        with pytest.raises(RuntimeError):
            await migrate.migrate(conn)
        # those up to one that adds an enum value committed (its value is usable only so), no more
        first = next(n for n, _, text in migrate.sql.migrations() if migrate._ADDS_ENUM_VALUE.search(text))
        assert await conn.fetchval("select max(version) from jobfeed.schema_migrations") == first
        assert await conn.fetchval("select count(*) from jobfeed.schema_migrations") == first
        assert (await migrate.schema_status(conn)).version == 0  # processes still refuse to start
        monkeypatch.undo()
        assert await migrate.migrate(conn) == ALL[first:]
        assert (await migrate.schema_status(conn)).version == migrate.SCHEMA_VERSION
    finally:
        await conn.close()


async def test_a_migration_has_no_query_timeout(empty_db, monkeypatch):
    """The services bound every query (db.QUERY_TIMEOUT); a migration must
    not be bound: on a long history, building an index takes minutes."""
    monkeypatch.setattr(db, "QUERY_TIMEOUT", 0.001)
    assert await migrate.migrate_database(empty_db) == ALL
    conn = await db.connect(empty_db)
    try:
        with pytest.raises(TimeoutError):  # what the bound does to a service's query
            await conn.execute("select pg_sleep(0.1)")
    finally:
        conn.terminate()


async def test_a_migration_undone_by_a_deadlock_is_made_again(empty_db, monkeypatch):
    """Running processes lock jobs in their own order: a deadlock may pick the
    migration's transaction, which then left nothing; it is made again, and
    only a deadlock every time is the command's error."""
    real, calls = migrate._apply, []

    async def deadlocked(conn, times):
        calls.append(1)
        if len(calls) <= times:
            async with conn.transaction():  # some of it done, then undone
                await conn.execute("create table jobfeed.half_done (x int)")
                raise asyncpg.DeadlockDetectedError("deadlock detected")
        return await real(conn)

    conn = await db.connect(empty_db)
    try:
        monkeypatch.setattr(migrate, "_apply", lambda c: deadlocked(c, migrate.DEADLOCK_TRIES))
        with pytest.raises(asyncpg.DeadlockDetectedError):
            await migrate.migrate(conn)
        assert len(calls) == migrate.DEADLOCK_TRIES
        assert await conn.fetchval("select to_regclass('jobfeed.half_done')") is None
        calls.clear()
        monkeypatch.setattr(migrate, "_apply", lambda c: deadlocked(c, 1))
        assert await migrate.migrate(conn) == ALL and len(calls) == 2
        assert (await migrate.schema_status(conn)).version == migrate.SCHEMA_VERSION
    finally:
        await conn.close()


def test_a_migrate_that_fails_in_the_database_says_so_in_one_line(empty_db, monkeypatch, capsys):
    """From a black-box pass: a deadlock every time printed thirty lines of
    traceback; now one error line, exit 1, saying the database is as it was."""
    from jobfeed.worker import cli

    async def deadlocked(conn):
        raise asyncpg.DeadlockDetectedError("deadlock detected")
    monkeypatch.setattr(migrate, "_apply", deadlocked)
    monkeypatch.setenv("DATABASE_URL", empty_db)
    root = logging.getLogger()  # the command sets up logging: the tests after this one get theirs back
    monkeypatch.setattr(root, "handlers", list(root.handlers))
    monkeypatch.setattr(root, "level", root.level)
    assert cli.main(["migrate"]) == 1
    err = capsys.readouterr().err.strip()
    *tries, said = err.splitlines()
    assert "Traceback" not in err and len(tries) == migrate.DEADLOCK_TRIES - 1, err  # a warning per try again
    assert said.startswith("error: migrate failed (DeadlockDetectedError: deadlock detected)"), said
    assert said.endswith("run it again")
