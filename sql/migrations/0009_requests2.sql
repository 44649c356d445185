-- Requests, second part: dedupe per requester, the rerun and replace duplicate
-- policies. Additive: every new column has a default, so release N's calls
-- keep working after this.

-- @task(dedupe=...): "global" (one unfinished job per target) or "requester"
-- (one per target and requester identity).
alter table jobfeed.kinds
    add column dedupe text not null default 'global' check (dedupe in ('global', 'requester'));
alter table jobfeed.kinds drop constraint kinds_on_duplicate_check;
alter table jobfeed.kinds add constraint kinds_on_duplicate_check
    check (on_duplicate in ('join', 'reject_different', 'rerun', 'replace'));

-- Who may share a job: '' for every job of a "global" kind; under "requester"
-- the identity, or null for a submission without one (nulls are distinct in
-- the unique index below: an anonymous submission never shares).
alter table jobfeed.jobs add column dedupe_scope text default '';

-- One unfinished job per (kind, target, scope). The look-ups by (kind, target)
-- still use it as before.
drop index jobfeed.jobs_unfinished_target;
create unique index jobs_unfinished_target on jobfeed.jobs (kind, target, dedupe_scope)
    where state not in ('completed', 'failed', 'canceled');

-- on_duplicate="rerun": the payload of the one more run a duplicate asked for
-- while the job was running (null: none asked). The attempt's completion
-- takes it in the same statement.
alter table jobfeed.jobs add column rerun_payload jsonb;

-- The claim's order, complete: priority desc, run_after, then id, so that a
-- queue position (how many jobs are claimed first) is exact among jobs that
-- share a run_after (a batch's). Same columns as before plus the id.
drop index jobfeed.jobs_queued_priority;
create index jobs_queued_priority on jobfeed.jobs (kind, priority desc, run_after, id) where state = 'queued';
