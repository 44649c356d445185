"""What the migration tests share: a database with nothing of jobfeed in it,
connections as a login holding one service role, and the schema as a fresh
migrate leaves it (sql/schema.txt)."""

from __future__ import annotations

import difflib
import os
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from jobfeed.worker import db, schemadoc, sql

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
