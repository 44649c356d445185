-- A jobs table holding a long history of finished jobs.

-- No statistics on jobs.state. Its distribution swings between two ANALYZEs:
-- taken over a week of finished jobs (or an idle queue), they say no job is
-- queued, and every job queued since is then estimated at one row. With that
-- estimate the claim's pick (and next_due) was planned as a walk of the
-- dedupe index over every unfinished job of the kind, filtered and sorted,
-- instead of the ordered scan of jobs_queued_priority that stops at its limit.
-- Without statistics the planner assumes a few rows per state, and an ordered
-- index scan with a LIMIT wins whatever the table holds. The partial indexes
-- (whose predicates name states) keep every plan on the right rows.
alter table jobfeed.jobs alter column state set statistics 0;

-- Statistics an earlier ANALYZE gathered stay until cleared (PostgreSQL 18
-- can clear them; on older servers they stay until the table is recreated,
-- and the claim test's plan holds only from 18 on).
do $$
begin
    if exists (select from pg_proc where proname = 'pg_clear_attribute_stats') then
        perform pg_clear_attribute_stats('jobfeed', 'jobs', 'state', false);
    end if;
end $$;
