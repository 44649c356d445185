"""The migrator: idempotent, safe when many processes start together, re-applies
functions whose text changed; and a fresh migrate equals the documented schema
(sql/schema.txt)."""

from __future__ import annotations

import asyncio
import difflib
import os
import subprocess
import sys
import uuid

import asyncpg
import pytest

from jobfeed.worker import db, migrate, schemadoc, sql

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
    for must in ("table jobfeed.jobs", "storage: fillfactor=80", "enum jobfeed.job_state",
                 "CREATE UNIQUE INDEX jobs_unfinished_target", "security definer",
                 "set search_path=jobfeed, pg_temp", "grant EXECUTE to jobfeed_worker"):
        assert must in text
    assert "skip locked" not in text.lower(), "function bodies must not be rendered"


async def test_migrate_twice_is_a_no_op(dsn):
    before = await describe(dsn)
    conn = await db.connect(dsn)
    try:
        applied_at = await conn.fetch("select * from jobfeed.schema_migrations order by version")
        functions = await conn.fetchrow("select * from jobfeed.schema_functions")
        assert await migrate.migrate(conn) == []
        assert await conn.fetch("select * from jobfeed.schema_migrations order by version") == applied_at
        assert await conn.fetchrow("select * from jobfeed.schema_functions") == functions
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
