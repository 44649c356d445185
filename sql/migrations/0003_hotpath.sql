-- The hot path's cheap reads.

-- The admin list filtered by kind, by state or by both, newest first: one index
-- serves all three (admin_list_jobs merges the newest of each (kind, state)
-- pair). One index, not two: every state change rewrites each index's entry.
create index jobs_kind_state_id on jobfeed.jobs (kind, state, id);

-- The last stats counted, shared by every API process: /api/admin/stats and
-- /metrics answer it while it is a few seconds old (it says as_of), so a
-- scrape or a dashboard never counts the whole table itself.
create table jobfeed.stats_snapshot (
    id       int primary key default 1 check (id = 1),
    minutes  int not null,
    as_of    timestamptz not null,
    body     jsonb not null
);

revoke all on jobfeed.stats_snapshot from public;
