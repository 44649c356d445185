"""jobfeed v0.1.0 (commit 50a61f2), frozen: its sql/ as it shipped, and the
lines of its migrator that install it. v0.1.0 migrated on every start; this is
what any of its processes did to a database. Never edit these files: they are
the source every upgrade test starts from."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import asyncpg

SQL_DIR = Path(__file__).resolve().parent / "sql"
MIGRATION_LOCK = 0x6A6F_6266_6565_64
_NAME = re.compile(r"^--\s*name:\s*(\w+)\s*$", re.MULTILINE)


def queries() -> dict[str, str]:
    """name -> SQL, the calls v0.1.0's Python made (its sql/queries.sql)."""
    parts = _NAME.split((SQL_DIR / "queries.sql").read_text())
    return {name: body.strip().rstrip(";") for name, body in zip(parts[1::2], parts[2::2])}


def function_files() -> list[tuple[str, str]]:
    return [(p.name, p.read_text()) for p in sorted((SQL_DIR / "functions").glob("*.sql"))]


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """v0.1.0's migrate(), as it ran at every process start."""
    applied: list[str] = []
    await conn.execute("select pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute((SQL_DIR / "bootstrap.sql").read_text())
        done = {r["version"] for r in await conn.fetch("select version from jobfeed.schema_migrations")}
        for path in sorted((SQL_DIR / "migrations").glob("[0-9][0-9][0-9][0-9]_*.sql")):
            if int(path.name[:4]) in done:
                continue
            async with conn.transaction():
                await conn.execute(path.read_text())
                await conn.execute("insert into jobfeed.schema_migrations (version, name) values ($1, $2)",
                                   int(path.name[:4]), path.name)
            applied.append(path.name)
        digest = hashlib.sha256()
        for name, text in function_files():
            digest.update(name.encode() + b"\0" + text.encode() + b"\0")
        if await conn.fetchval("select checksum from jobfeed.schema_functions") != digest.hexdigest():
            async with conn.transaction():
                for _, text in function_files():
                    await conn.execute(text)
                await conn.execute(
                    "insert into jobfeed.schema_functions (id, checksum) values (1, $1) "
                    "on conflict (id) do update set checksum = excluded.checksum, applied_at = now()",
                    digest.hexdigest())
            applied.append("functions")
    finally:
        await conn.execute("select pg_advisory_unlock($1)", MIGRATION_LOCK)
    return applied
