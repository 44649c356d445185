-- Deferred leaves: a job page that closes asks for its request to leave a
-- little later (POST /api/requests/{id}/leave?grace=), so that a reload or
-- going Back, which close the page too, can take it back (.../stay) before
-- it counts. The request stays active meanwhile. Additive: release N never
-- sets it and keeps working beside this one (its sweeper does not apply
-- these; they wait for this release's).

-- When the request leaves unless it stays first; null: no leave pending.
alter table jobfeed.requests add column leave_at timestamptz;
-- The pending leaves by due time (few: pages closed in the last seconds),
-- for the sweeper's batches and its next deadline.
create index requests_leave_due on jobfeed.requests (leave_at) where leave_at is not null and left_at is null;
