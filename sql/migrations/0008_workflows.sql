-- Workflows: jobs that wait for other jobs.

-- The true state of a job whose dependencies are not yet satisfied. Its public
-- status is 'queued' (never started) or 'processing' (see public_status).
alter type jobfeed.job_state add value if not exists 'waiting' before 'queued';

-- A waiting job holds its target like any unfinished job. The predicate names
-- the final states: the new value cannot be used in the transaction adding it,
-- and "not final" stays true of any unfinished state added later.
drop index jobfeed.jobs_unfinished_target;
create unique index jobs_unfinished_target on jobfeed.jobs (kind, target)
    where state not in ('completed', 'failed', 'canceled');

-- "job_id runs after dep_id": one row per dependency. dep_id has no foreign
-- key: the sweeper keeps a finished dependency while an unfinished job names it,
-- and may delete it afterwards.
create table jobfeed.job_deps (
    job_id  uuid not null references jobfeed.jobs (id) on delete cascade,
    dep_id  uuid not null,
    primary key (job_id, dep_id)
);
create index job_deps_dep on jobfeed.job_deps (dep_id);
revoke all on jobfeed.job_deps from public;

-- The signals a job awaits: a row per name, filled by the first delivery
-- (arrived_at set). While one is missing the job waits, until its deadline
-- (the submission's signal_timeout; null: none).
create table jobfeed.job_signals (
    job_id      uuid not null references jobfeed.jobs (id) on delete cascade,
    name        text not null check (octet_length(name) between 1 and 100),
    data        jsonb,
    arrived_at  timestamptz,
    deadline    timestamptz,
    primary key (job_id, name)
);
-- the sweeper's look for signals overdue
create index job_signals_overdue on jobfeed.job_signals (deadline) where arrived_at is null;
revoke all on jobfeed.job_signals from public;

-- A stand-in until sql/functions/ (applied after the migrations) defines it.
create or replace function jobfeed.settle_dependents() returns trigger language plpgsql as $$
begin
    return null;
end $$;

-- A job reaching a final state settles the jobs that wait for it (the function
-- is in sql/functions/45_workflows.sql). Row-level with a WHEN, so the hot
-- path's other updates (heartbeats, progress, claims) never call it.
create trigger jobs_settle_dependents
    after update of state on jobfeed.jobs
    for each row
    when (new.state in ('completed', 'failed', 'canceled') and old.state is distinct from new.state)
    execute function jobfeed.settle_dependents();
