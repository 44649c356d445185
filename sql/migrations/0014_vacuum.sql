-- Autovacuum for a jobs table that keeps a long history.

-- A claimed job's entry stays in jobs_queued_priority and jobs_queued_due,
-- dead, until VACUUM removes it (a finished job's, likewise, in
-- jobs_running_lease). New jobs enter those indexes at their far end, so the
-- dead pile up ahead of every live entry, and each claim's pick (and its
-- probe for expired leases) steps over all of them: a cost growing with
-- every job since the last vacuum. PostgreSQL's defaults vacuum a table once
-- a fifth of it is dead, which over a week of history is a vacuum per
-- millions of jobs. Here a vacuum comes after 5,000 dead rows plus 0.2 % of
-- the table, and always cleans the indexes: by default it skips them when the
-- dead rows sit on under 2 % of the table's pages, which is this table's
-- usual case (the dead are the recent jobs; the history is the bulk). Each
-- vacuum reads every index once: a bounded cost per thousands of jobs,
-- against a cost on every claim.
alter table jobfeed.jobs set (autovacuum_vacuum_scale_factor = 0.002, autovacuum_vacuum_threshold = 5000,
                              vacuum_index_cleanup = on);
