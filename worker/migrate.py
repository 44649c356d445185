"""Applies sql/: numbered migrations once each, then the function files whenever
their text changed. Runs under an advisory lock, so processes starting together
take turns and the second finds nothing left to do."""

from __future__ import annotations

import hashlib

import asyncpg

from . import sql

# Any fixed 64-bit number: the lock names "jobfeed is migrating this database".
MIGRATION_LOCK = 0x6A6F_6266_6565_64


def functions_checksum() -> str:
    digest = hashlib.sha256()
    for name, text in sql.function_files():
        digest.update(name.encode() + b"\0" + text.encode() + b"\0")
    return digest.hexdigest()


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Bring the database up to date; returns what was applied."""
    applied: list[str] = []
    await conn.execute("select pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute((sql.SQL_DIR / "bootstrap.sql").read_text())
        done = {r["version"] for r in await conn.fetch("select version from jobfeed.schema_migrations")}
        for number, name, text in sql.migrations():
            if number in done:
                continue
            async with conn.transaction():
                await conn.execute(text)
                await conn.execute(
                    "insert into jobfeed.schema_migrations (version, name) values ($1, $2)", number, name)
            applied.append(name)
        checksum = functions_checksum()
        current = await conn.fetchval("select checksum from jobfeed.schema_functions")
        if current != checksum:
            async with conn.transaction():
                for _name, text in sql.function_files():
                    await conn.execute(text)
                await conn.execute(
                    "insert into jobfeed.schema_functions (id, checksum) values (1, $1) "
                    "on conflict (id) do update set checksum = excluded.checksum, applied_at = now()",
                    checksum)
            applied.append("functions")
    finally:
        await conn.execute("select pg_advisory_unlock($1)", MIGRATION_LOCK)
    return applied


async def pending(conn: asyncpg.Connection) -> list[str]:
    """What migrate() would apply; empty when the schema is current (readiness)."""
    exists = await conn.fetchval("select to_regclass('jobfeed.schema_migrations') is not null")
    if not exists:
        return [name for _, name, _ in sql.migrations()] + ["functions"]
    done = {r["version"] for r in await conn.fetch("select version from jobfeed.schema_migrations")}
    missing = [name for number, name, _ in sql.migrations() if number not in done]
    if await conn.fetchval("select checksum from jobfeed.schema_functions") != functions_checksum():
        missing.append("functions")
    return missing
