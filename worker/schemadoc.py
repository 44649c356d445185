"""A stable, readable description of the jobfeed schema, rendered from the
catalogs: tables (columns, constraints, indexes, storage options, triggers),
types, function signatures and attributes, and who is granted what. Function
bodies are left out of sql/schema.txt (they live in sql/functions/); with
bodies=True they are added without comments, to compare two databases (an
upgraded one with a fresh install).

sql/schema.txt is this output for a freshly migrated database; a test keeps the
two equal, so any change to the schema shows up in review as a diff of that file.

    python -m worker.schemadoc DSN            describe the database at DSN
    python -m worker.schemadoc --fresh DSN    migrate a scratch database on DSN's
                                              server, describe it, drop it
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid

import asyncpg

from . import sql

SCHEMA = "jobfeed"

# Session settings that change how the catalogs' expressions are printed.
_STABLE_SETTINGS = {
    "search_path": "pg_catalog",  # every jobfeed name printed qualified
    "intervalstyle": "postgres",
    "datestyle": "ISO, YMD",
    "timezone": "UTC",
    "extra_float_digits": "1",
}

_VOLATILITY = {"i": "immutable", "s": "stable", "v": "volatile"}
_PARALLEL = {"s": "parallel safe", "r": "parallel restricted", "u": "parallel unsafe"}
_RELKIND = {"r": "table", "p": "partitioned table", "v": "view", "m": "materialized view",
            "S": "sequence", "f": "foreign table"}
_PROKIND = {"f": "function", "p": "procedure", "a": "aggregate", "w": "window function"}


async def describe(conn: asyncpg.Connection, schema: str = SCHEMA, *, bodies: bool = False) -> str:
    """The schema as text, independent of the session's settings. bodies: also
    each function's body, comments and layout left out (to compare two
    databases; sql/schema.txt leaves them to sql/functions/)."""
    async with conn.transaction(readonly=True):
        for name, value in _STABLE_SETTINGS.items():
            await conn.execute("select set_config($1, $2, true)", name, value)
        nsp = await conn.fetchrow(
            "select oid, nspowner, nspacl::text from pg_namespace where nspname = $1", schema)
        if nsp is None:
            raise LookupError(f"no schema {schema!r}")
        out = [f"-- Schema {schema}, rendered from the catalogs by worker/schemadoc.py.",
               "-- Regenerate: python -m worker.schemadoc --fresh <server url> > sql/schema.txt",
               "",
               f"schema {schema}"]
        out += await _grants(conn, "n", nsp["nspacl"], nsp["nspowner"])
        out += await _types(conn, nsp["oid"])
        out += await _relations(conn, nsp["oid"])
        out += await _functions(conn, nsp["oid"], bodies)
    return "\n".join(out).rstrip() + "\n"


async def _grants(conn, objtype: str, acl, owner: int, indent: str = "  ") -> list[str]:
    """'grant' lines per grantee; the owner's own rights are implicit and left out
    (their names vary between installations and server versions)."""
    rows = await conn.fetch("""
        select case when a.grantee = 0 then 'PUBLIC' else a.grantee::regrole::text end as grantee,
               string_agg(a.privilege_type || case when a.is_grantable then ' WITH GRANT OPTION' else '' end,
                          ', ' order by a.privilege_type) as privileges
          from aclexplode(coalesce($1::text::aclitem[], acldefault($2::text::"char", $3::oid))) a
         where a.grantee <> $3
         group by 1 order by 1""", acl, objtype, owner)
    if not rows:
        return [f"{indent}grants: none"]
    return [f"{indent}grant {r['privileges']} to {r['grantee']}" for r in rows]


async def _types(conn, nsp: int) -> list[str]:
    out: list[str] = []
    rows = await conn.fetch("""
        select t.oid, t.oid::regtype::text as name, t.typtype::text, t.typowner, t.typacl::text,
               format_type(t.typbasetype, t.typtypmod) as base, t.typnotnull,
               pg_get_expr(t.typdefaultbin, 0) as default
          from pg_type t
         where t.typnamespace = $1 and t.typtype in ('e', 'd')
         order by 2""", nsp)
    for t in rows:
        out.append("")
        if t["typtype"] == "e":
            labels = await conn.fetch(
                "select enumlabel from pg_enum where enumtypid = $1 order by enumsortorder", t["oid"])
            out.append(f"enum {t['name']}: " + ", ".join(r["enumlabel"] for r in labels))
        else:
            line = f"domain {t['name']} as {t['base']}"
            if t["typnotnull"]:
                line += " not null"
            if t["default"] is not None:
                line += f" default {t['default']}"
            out.append(line)
            for c in await conn.fetch("select conname, pg_get_constraintdef(oid) as def from pg_constraint "
                                      "where contypid = $1 order by conname", t["oid"]):
                out.append(f"  constraint {c['conname']}: {c['def']}")
        if t["typacl"] is not None:
            out += await _grants(conn, "T", t["typacl"], t["typowner"])
    return out


async def _relations(conn, nsp: int) -> list[str]:
    out: list[str] = []
    rels = await conn.fetch("""
        select c.oid, c.oid::regclass::text as name, c.relkind::text, c.relpersistence::text, c.reloptions,
               c.relowner, c.relacl::text
          from pg_class c
         where c.relnamespace = $1 and c.relkind in ('r', 'p', 'v', 'm', 'S', 'f')
         order by 2""", nsp)
    for rel in rels:
        kind = _RELKIND[rel["relkind"]]
        if rel["relpersistence"] == "u":
            kind = "unlogged " + kind
        out += ["", f"{kind} {rel['name']}"]
        comment = await conn.fetchval("select obj_description($1, 'pg_class')", rel["oid"])
        if comment:
            out.append(f"  comment: {comment}")
        cols = await conn.fetch("""
            select a.attnum, quote_ident(a.attname) as name, format_type(a.atttypid, a.atttypmod) as type,
                   a.attnotnull, a.attidentity::text, a.attgenerated::text, pg_get_expr(d.adbin, d.adrelid) as default,
                   col_description(a.attrelid, a.attnum) as comment
              from pg_attribute a left join pg_attrdef d on d.adrelid = a.attrelid and d.adnum = a.attnum
             where a.attrelid = $1 and a.attnum > 0 and not a.attisdropped
             order by a.attnum""", rel["oid"])
        if cols and rel["relkind"] != "S":
            out.append("  columns:")
            for c in cols:
                line = f"    {c['name']} {c['type']}"
                if c["attnotnull"]:
                    line += " not null"
                if c["attidentity"]:
                    line += " generated {} as identity".format("always" if c["attidentity"] == "a" else "by default")
                if c["attgenerated"]:
                    line += f" generated always as ({c['default']}) stored"
                elif c["default"] is not None:
                    line += f" default {c['default']}"
                if c["comment"]:
                    line += f"  -- {c['comment']}"
                out.append(line)
        # contype 'n' (NOT NULL as a constraint, PostgreSQL 18+) is shown on the column.
        cons = await conn.fetch("""
            select conname, pg_get_constraintdef(oid) as def from pg_constraint
             where conrelid = $1 and contype <> 'n' order by conname""", rel["oid"])
        if cons:
            out.append("  constraints:")
            out += [f"    {c['conname']}: {c['def']}" for c in cons]
        idx = await conn.fetch("""
            select pg_get_indexdef(i.indexrelid) as def from pg_index i
              join pg_class c on c.oid = i.indexrelid
             where i.indrelid = $1 order by c.relname""", rel["oid"])
        if idx:
            out.append("  indexes:")
            out += [f"    {r['def']}" for r in idx]
        if rel["reloptions"]:
            out.append("  storage: " + ", ".join(sorted(rel["reloptions"])))
        trig = await conn.fetch("""
            select pg_get_triggerdef(oid) as def from pg_trigger
             where tgrelid = $1 and not tgisinternal order by tgname""", rel["oid"])
        if trig:
            out.append("  triggers:")
            out += [f"    {r['def']}" for r in trig]
        out += await _grants(conn, "s" if rel["relkind"] == "S" else "r", rel["relacl"], rel["relowner"])
    return out


async def _functions(conn, nsp: int, bodies: bool) -> list[str]:
    out: list[str] = []
    fns = await conn.fetch("""
        select p.oid, p.proname, p.prokind::text, l.lanname, p.provolatile::text, p.proparallel::text, p.prosecdef,
               p.proisstrict, p.proconfig, p.proowner, p.proacl::text,
               pg_get_function_arguments(p.oid) as args,
               pg_get_function_identity_arguments(p.oid) as ident,
               pg_get_function_result(p.oid) as result,
               obj_description(p.oid, 'pg_proc') as comment, p.prosrc
          from pg_proc p join pg_language l on l.oid = p.prolang
         where p.pronamespace = $1
         order by p.proname, pg_get_function_identity_arguments(p.oid)""", nsp)
    schema = await conn.fetchval("select quote_ident(nspname) from pg_namespace where oid = $1", nsp)
    for f in fns:
        head = f"{_PROKIND[f['prokind']]} {schema}.{f['proname']}({f['args']})"
        if f["result"] is not None:
            head += f" returns {f['result']}"
        out += ["", head]
        attrs = [f["lanname"], _VOLATILITY[f["provolatile"]], _PARALLEL[f["proparallel"]]]
        if f["proisstrict"]:
            attrs.append("strict")
        attrs.append("security definer" if f["prosecdef"] else "security invoker")
        out.append("  " + ", ".join(attrs))
        for setting in f["proconfig"] or []:
            out.append(f"  set {setting}")
        if f["comment"]:
            out.append(f"  comment: {f['comment']}")
        out += await _grants(conn, "f", f["proacl"], f["proowner"])
        if bodies:
            out.append("  body: " + sql.normalize(f["prosrc"] or ""))
    return out


async def describe_fresh(server_url: str) -> str:
    """Migrate a scratch database on the server at server_url, describe it, drop it."""
    from . import db, migrate

    name = f"jobfeed_schemadoc_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(server_url)
    try:
        await admin.execute(f'create database "{name}"')
        try:
            conn = await db.connect(db.with_database(server_url, name))
            try:
                await migrate.migrate(conn)
                return await describe(conn)
            finally:
                await conn.close()
        finally:
            await admin.execute(f'drop database if exists "{name}" with (force)')
    finally:
        await admin.close()


async def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.schemadoc", description=__doc__.split("\n\n")[0])
    parser.add_argument("dsn", help="PostgreSQL URL")
    parser.add_argument("--fresh", action="store_true",
                        help="describe a freshly migrated scratch database on this server instead")
    args = parser.parse_args(argv)
    if args.fresh:
        text = await describe_fresh(args.dsn)
    else:
        conn = await asyncpg.connect(args.dsn)
        try:
            text = await describe(conn)
        finally:
            await conn.close()
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(_main()))
