-- Scheduling and flow control: run at a time, priorities, pause, concurrency
-- and rate limits (see README "Scheduling and flow control"). Additive: every
-- new column has a default, so release N's calls keep working after this.

-- A kind's flow settings. Workers write them with register_kind_v2; `paused`
-- only the admin routes write, so it survives registrations and restarts.
alter table jobfeed.kinds
    add column priority            int not null default 0,
    add column paused              boolean not null default false,
    add column max_running         int check (max_running > 0),
    add column max_running_per_key int check (max_running_per_key > 0),
    add column rate_count          int check (rate_count > 0),
    add column rate_period         interval check (rate_period > '0');

alter table jobfeed.jobs
    add column priority        int not null default 0,
    add column concurrency_key text check (octet_length(concurrency_key) between 1 and 512);

-- Claim: due queued jobs of one kind, higher priority first, then the earlier
-- run_after. jobs_queued_due stays: it answers "when is the next job due"
-- (next_due) in one probe, which this order cannot.
create index jobs_queued_priority on jobfeed.jobs (kind, priority desc, run_after) where state = 'queued';

-- Per-key caps count the running jobs of one key: one probe here.
create index jobs_running_key on jobfeed.jobs (kind, concurrency_key)
    where state = 'running' and concurrency_key is not null;

-- Starts of rate-limited kinds (only those): claims add to the row of their
-- instant, and drop rows older than the kind's period.
create table jobfeed.kind_starts (
    kind  text not null,
    at    timestamptz not null,
    n     int not null,
    primary key (kind, at)
);
revoke all on jobfeed.kind_starts from public;

-- Periodic kinds as their workers declare them (for `jobfeed schedules`).
-- since: the first registration; slots before it are never enqueued.
create table jobfeed.schedules (
    kind          text primary key,
    schedule      text,
    timezone      text not null default 'UTC',
    every         interval,
    since         timestamptz not null default now(),
    updated_at    timestamptz not null default now()
);
-- One row per slot ever enqueued: its primary key is what makes one job per
-- slot, however many schedulers run.
create table jobfeed.schedule_slots (
    kind        text not null,
    slot        timestamptz not null,
    job_id      uuid,
    created_at  timestamptz not null default now(),
    primary key (kind, slot)
);
revoke all on jobfeed.schedules, jobfeed.schedule_slots from public;
