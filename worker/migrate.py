"""The schema's version, and the one command that changes it.

`jobfeed migrate` (migrate() here) is the only code that runs DDL: numbered
migrations once each, then sql/functions/ when their text, comments left out,
differs from what was last applied, in one transaction (_apply). It runs under
an advisory lock, so two deploys migrating at once take turns and the second
finds nothing to do.

Every other process calls require_schema() at start: one query of
jobfeed.schema_version, a row every service role may read.

- version: the highest migration applied. This code needs SCHEMA_VERSION, the
  highest migration it ships; a database below that is refused (exit 2, "run
  jobfeed migrate").
- compatible_from: the oldest SCHEMA_VERSION that may still run here. Additive
  migrations leave it alone, so release N keeps running after N+1 migrated. A
  migration that drops what an older release calls raises it, in its own SQL:
      update jobfeed.schema_version set compatible_from = greatest(compatible_from, 7);
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import re

import asyncpg

from . import db, sql

log = logging.getLogger("jobfeed")

# The NOLOGIN roles the migrations create, one per kind of process (their
# rights: sql/functions/90_grants.sql).
API_ROLE, WORKER_ROLE, SWEEPER_ROLE = "jobfeed_api", "jobfeed_worker", "jobfeed_sweeper"

# Any fixed 64-bit number: the lock names "jobfeed is migrating this database".
MIGRATION_LOCK = 0x6A6F_6266_6565_64

SCHEMA_VERSION = max(number for number, _, _ in sql.migrations())

# How often a migration undone by a deadlock with running processes is made
# again before the error is the command's.
DEADLOCK_TRIES = 3


class SchemaError(Exception):
    """The database's schema does not fit this code: one line saying what to do."""


def functions_checksum() -> str:
    """Of sql/functions/ without comments or layout: re-wording a comment or
    re-indenting is not a change to apply."""
    digest = hashlib.sha256()
    for name, text in sql.function_files():
        digest.update(name.encode() + b"\0" + sql.normalize(text).encode() + b"\0")
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True)
class SchemaStatus:
    version: int  # 0: not migrated
    compatible_from: int
    needs: int = SCHEMA_VERSION

    @property
    def compatible(self) -> bool:
        return self.compatible_from <= self.needs <= self.version

    def problem(self) -> str | None:
        if self.version < self.needs:
            found = "not migrated" if self.version == 0 else f"at version {self.version}"
            return (f"the database schema is {found}; this jobfeed needs version {self.needs}: "
                    "run `jobfeed migrate` first")
        if self.compatible_from > self.needs:
            return (f"the database schema (version {self.version}) no longer supports this jobfeed "
                    f"(it needs {self.needs}, the oldest still supported is {self.compatible_from}): "
                    "upgrade jobfeed")
        return None

    def as_json(self) -> dict:
        return {"version": self.version, "compatible_from": self.compatible_from, "needs": self.needs}


async def schema_status(conn, timeout: float | None = None) -> SchemaStatus:
    """One query, on a Connection or a Pool, as any of the service roles."""
    try:
        row = await conn.fetchrow("select version, compatible_from from jobfeed.schema_version", timeout=timeout)
    except (asyncpg.UndefinedTableError, asyncpg.InvalidSchemaNameError):
        row = None  # never migrated, or by a release before versions (v0.1.0)
    except asyncpg.InsufficientPrivilegeError:
        raise SchemaError("this login role may not read jobfeed.schema_version: grant it jobfeed_api, "
                          "jobfeed_worker or jobfeed_sweeper (and run `jobfeed migrate` as the owner)") from None
    return SchemaStatus(row["version"], row["compatible_from"]) if row else SchemaStatus(0, 0)


async def require_schema(target, role: str | None = None) -> SchemaStatus:
    """Raise SchemaError unless this code may run on the database, and, given
    the service role a command runs as (jobfeed_api, ...), unless the login
    role has its rights. target: a DSN, or a Connection or Pool."""
    if isinstance(target, str):
        conn = await db.connect_first(target, name="jobfeed-schema-check")
        try:
            return await require_schema(conn, role)
        finally:
            await conn.close()
    status = await schema_status(target)
    if (problem := status.problem()) is not None:
        raise SchemaError(problem)
    if role is not None:
        row = await target.fetchrow(sql.query("missing_rights"), role)
        if row["missing"]:
            raise SchemaError(f"the login role {row['login']} may not call {row['missing']} functions {role} may "
                              f"(e.g. jobfeed.{row['example']}): connect as a member of {role} "
                              f"(grant {role} to {row['login']})")
    return status


# A migration that adds an enum value must commit before any statement uses the
# value (PostgreSQL refuses it in the same transaction): one ends a transaction.
_ADDS_ENUM_VALUE = re.compile(r"\balter\s+type\s+\S+\s+add\s+value\b", re.IGNORECASE)


async def _apply(conn: asyncpg.Connection) -> list[str]:
    """The pending migrations, the functions and the version, in one
    transaction: release N, running beside it, sees the old schema with its
    functions or the new with theirs, never a migrated table under functions
    that do not fit it yet (a 500 on every submit); a migrate that fails or is
    stopped leaves the database as it was. A process starting meanwhile sees
    the older version and refuses to start, never a version whose functions
    are not there yet. (A migration that adds an enum value commits first,
    with those before it: its value is usable only once committed.)"""
    applied: list[str] = []
    done = {r["version"] for r in await conn.fetch("select version from jobfeed.schema_migrations")}
    pending = [(number, name, text) for number, name, text in sql.migrations() if number not in done]
    while True:
        async with conn.transaction():
            while pending:
                number, name, text = pending.pop(0)
                await conn.execute(text)
                await conn.execute("insert into jobfeed.schema_migrations (version, name) values ($1, $2)",
                                   number, name)
                done.add(number)
                applied.append(name)
                if _ADDS_ENUM_VALUE.search(text):
                    break
            if pending:
                continue  # (committed here, at the block's end)
            checksum = functions_checksum()
            stale = await conn.fetchval("select functions from jobfeed.schema_version") != checksum
            if stale:
                for _, text in sql.function_files():
                    await conn.execute(text)
                applied.append("functions")
            await conn.execute(
                "update jobfeed.schema_version set version = greatest(version, $1), functions = $2, "
                "updated_at = now() where version < $1 or functions is distinct from $2",
                max(done, default=0), checksum)
        return applied


async def migrate(conn: asyncpg.Connection) -> list[str]:
    """Bring the database up to this code's schema; returns what was applied."""
    applied: list[str] = []
    await conn.execute("select pg_advisory_lock($1)", MIGRATION_LOCK)
    try:
        await conn.execute((sql.SQL_DIR / "bootstrap.sql").read_text())
        status = await schema_status(conn)
        if status.version > SCHEMA_VERSION:
            # Its functions are newer than ours: putting ours back would undo them.
            raise SchemaError(f"the database schema is at version {status.version}, newer than this "
                              f"jobfeed's {SCHEMA_VERSION}: migrate with the newer release")
        # the row a migration may raise compatible_from in; version 0 until the end
        await conn.execute("insert into jobfeed.schema_version (id, version) values (1, 0) on conflict (id) do nothing")
        for attempt in range(1, DEADLOCK_TRIES + 1):
            try:
                applied = await _apply(conn)
                break
            except asyncpg.DeadlockDetectedError:
                # with the running processes (their locks on jobs, taken in
                # another order): nothing of it stayed, so it may be made again
                if attempt == DEADLOCK_TRIES:
                    raise
                log.warning("migrate: a deadlock with running processes undid it (nothing was applied); "
                            "trying again")
    finally:
        await conn.execute("select pg_advisory_unlock($1)", MIGRATION_LOCK)
    return applied


async def migrate_database(dsn: str) -> list[str]:
    """migrate() on a connection of its own."""
    conn = await db.connect_first(dsn, name="jobfeed-migrate", bounded=False, session=True)  # its lock is the session's
    try:
        return await migrate(conn)
    finally:
        await conn.close()


async def pending(conn: asyncpg.Connection) -> list[str]:
    """What migrate() would apply (a dry run); empty when nothing is left."""
    exists = await conn.fetchval("select to_regclass('jobfeed.schema_version') is not null")
    done = set()
    if await conn.fetchval("select to_regclass('jobfeed.schema_migrations') is not null"):
        done = {r["version"] for r in await conn.fetch("select version from jobfeed.schema_migrations")}
    missing = [name for number, name, _ in sql.migrations() if number not in done]
    current = await conn.fetchval("select functions from jobfeed.schema_version") if exists else None
    if current != functions_checksum():
        missing.append("functions")
    return missing
