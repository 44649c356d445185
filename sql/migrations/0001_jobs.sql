-- The queue's tables, indexes and roles. Functions live in sql/functions/ and are
-- (re)applied by the migrator whenever their text changes.

-- Roles are cluster-wide: create them only if another database has not already.
do $$
declare
    r text;
begin
    foreach r in array array['jobfeed_api', 'jobfeed_worker', 'jobfeed_sweeper'] loop
        -- Looked up first: CREATE ROLE needs CREATEROLE even when the role
        -- exists, and a database owner given roles made beforehand has none.
        continue when exists (select from pg_roles where rolname = r);
        begin
            execute format('create role %I nologin', r);
        exception when duplicate_object or unique_violation then
            null;  -- made by another database or a concurrent migration
        end;
    end loop;
end $$;

grant usage on schema jobfeed to jobfeed_api, jobfeed_worker, jobfeed_sweeper;

-- Time-ordered ids (UUID version 7: 48 bits of Unix milliseconds, 12 bits of
-- the fraction of that millisecond, then random bits): new rows append to the
-- primary key's right edge instead of landing on random pages, and "newest
-- first" is simply id order, also among jobs made within one millisecond.
-- PostgreSQL 18 has uuidv7(); this works from 15 on. Here, not in
-- sql/functions/, because the jobs table's default needs it.
create function jobfeed.uuid_v7(p_at timestamptz default clock_timestamp())
returns uuid language sql volatile parallel safe as $$
    select encode(
        substring(int8send(floor(m)::bigint) from 3)                              -- unix ms
        || int2send((x'7000'::int | floor((m - floor(m)) * 4096)::int)::smallint)  -- version 7, sub-ms
        || substring(uuid_send(gen_random_uuid()) from 9),                        -- variant, random
        'hex')::uuid
      from (select extract(epoch from p_at) * 1000 as m) t
$$;

create type jobfeed.job_state as enum ('queued', 'running', 'completed', 'failed', 'canceled');

-- Per-kind settings, upserted by every process that registers handlers, so the
-- database alone can apply a kind's lease, attempts and backoff.
create table jobfeed.kinds (
    kind          text primary key,
    max_attempts  int not null default 5 check (max_attempts > 0),
    lease         interval not null default '5 minutes' check (lease > '0'),
    backoff       interval[] not null default '{1 minute,5 minutes,15 minutes,60 minutes}'
                  check (cardinality(backoff) > 0),
    jitter        double precision not null default 0.1 check (jitter >= 0 and jitter < 1),
    description   text not null default '',
    updated_at    timestamptz not null default now()
);

create table jobfeed.jobs (
    id                 uuid primary key default jobfeed.uuid_v7(),
    kind               text not null,
    target             text not null check (octet_length(target) between 1 and 512),
    payload            jsonb not null default '{}' check (jsonb_typeof(payload) = 'object'),
    state              jobfeed.job_state not null default 'queued',
    attempts           int not null default 0,
    max_attempts       int not null default 5,
    generation         int not null default 0,
    run_after          timestamptz not null default now(),
    lease_until        timestamptz,
    worker_id          text,
    progress           jsonb,
    result             jsonb,
    checkpoint         jsonb,
    last_error_code    text,
    last_error_message text,
    -- version counts changes of the public view: SSE ids, resume, no repeats.
    version            bigint not null default 1,
    created_at         timestamptz not null default now(),
    updated_at         timestamptz not null default now(),
    started_at         timestamptz,  -- first claim
    claimed_at         timestamptz,  -- this attempt's claim
    finished_at        timestamptz
) with (fillfactor = 80);

-- At most one unfinished job per (kind, target): duplicate submitters share it.
create unique index jobs_unfinished_target on jobfeed.jobs (kind, target)
    where state in ('queued', 'running');
-- Claim: due queued jobs of one kind, oldest first; the scan stops at the limit,
-- so far-future (backed-off) jobs cost nothing.
create index jobs_queued_due on jobfeed.jobs (kind, run_after) where state = 'queued';
-- Expired leases (reclaim, lease_expired) and the next lease to expire.
create index jobs_running_lease on jobfeed.jobs (kind, lease_until) where state = 'running';
-- Sweeper: finished jobs past retention.
create index jobs_finished_at on jobfeed.jobs (finished_at)
    where state in ('completed', 'failed', 'canceled');
-- (The admin list pages through the primary key: ids are time-ordered. One
-- index fewer matters: a claim or a completion rewrites every index entry.)

-- One row per finished attempt: who ran it, when, and how it ended. Written once,
-- when the attempt ends (the attempt under way is the job row's worker_id and
-- claimed_at), so a job costs one insert here, not an insert and an update. No
-- foreign key: a per-row check costs a quarter of a claim's time, and rows are
-- only written by the queue's functions and deleted with their job.
create table jobfeed.attempts (
    job_id         uuid not null,
    generation     int not null,
    attempt        int not null,
    worker_id      text,         -- null only for rows planted by hand
    started_at     timestamptz,
    finished_at    timestamptz,
    outcome        text,  -- completed | transient | permanent | released | lease_expired | lost | canceled | failed
    error_code     text,
    error_message  text,
    primary key (job_id, generation)
);

revoke all on all tables in schema jobfeed from public;
