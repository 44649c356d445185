-- Run by `jobfeed migrate` (under its advisory lock) before anything else: the
-- migrator's own bookkeeping.
create schema if not exists jobfeed;
create table if not exists jobfeed.schema_migrations (
    version    int primary key,
    name       text not null,
    applied_at timestamptz not null default now()
);
-- One row, read by every process at start (worker/migrate.py explains the
-- numbers). functions: the checksum of sql/functions/ as last applied,
-- comments and layout left out.
create table if not exists jobfeed.schema_version (
    id              int primary key default 1 check (id = 1),
    version         int not null,
    compatible_from int not null default 0,
    functions       text not null default '',
    updated_at      timestamptz not null default now()
);
revoke all on jobfeed.schema_migrations, jobfeed.schema_version from public;
