-- Requests: who waits for a job. One row per submission that asked for one
-- (every HTTP submission; Python's when it names a requester or asks). A
-- request is active until it leaves (left_at) or its job is final.

create table jobfeed.requests (
    id          uuid primary key default jobfeed.uuid_v7(),
    job_id      uuid not null,
    requester   text,          -- identity from a trusted proxy or the host's hook; null = anonymous
    notify_url  text,
    created_at  timestamptz not null default now(),
    left_at     timestamptz
);
-- A job's requests (counting its active ones, deleting them with the job). No
-- foreign key, as for attempts: rows are written only by the queue's functions.
create index requests_job on jobfeed.requests (job_id);
-- One requester's requests not yet left (JOBFEED_MAX_ACTIVE_PER_REQUESTER).
create index requests_requester_open on jobfeed.requests (requester)
    where left_at is null and requester is not null;

-- The job's active requests, counted under its row lock (see
-- sql/functions/35_requests.sql). Jobs made without a request keep 0 and are
-- never abandoned.
alter table jobfeed.jobs add column requesters int not null default 0;
-- Some request of the job carries a notify_url: its final state queues
-- webhook deliveries (a trigger that does nothing for other jobs).
alter table jobfeed.jobs add column notify boolean not null default false;

-- A kind's request policies (@task(...)): what happens when the last active
-- request of an unfinished job leaves; what a duplicate of an unfinished job
-- does; how long a completed job answers new submissions for its target.
alter table jobfeed.kinds
    add column on_abandon text not null default 'cancel' check (on_abandon in ('cancel', 'keep')),
    add column on_duplicate text not null default 'join' check (on_duplicate in ('join', 'reject_different')),
    add column reuse_for interval check (reuse_for > '0');

-- reuse_for: a target's latest completion.
create index jobs_completed_target on jobfeed.jobs (kind, target, finished_at) where state = 'completed';

revoke all on jobfeed.requests from public;
