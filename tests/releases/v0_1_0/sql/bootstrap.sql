-- Run by the migrator (under its advisory lock) before anything else.
create schema if not exists jobfeed;
create table if not exists jobfeed.schema_migrations (
    version    int primary key,
    name       text not null,
    applied_at timestamptz not null default now()
);
-- The checksum of sql/functions/ as last applied: functions are re-created in
-- place whenever their text changes.
create table if not exists jobfeed.schema_functions (
    id         int primary key default 1 check (id = 1),
    checksum   text not null,
    applied_at timestamptz not null default now()
);
revoke all on jobfeed.schema_migrations, jobfeed.schema_functions from public;
