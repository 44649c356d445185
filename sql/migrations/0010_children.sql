-- Children: jobs a handler submits with ctx.submit, and parents that wait for
-- jobs with ctx.wait_for (sql/functions/46_children.sql).

-- The job whose handler submitted this one (null: submitted from outside). No
-- foreign key: a parent may be swept before its children.
alter table jobfeed.jobs add column parent_id uuid;
-- Drawn once, at the parent's first ctx.submit: its children's ids derive from
-- it and their (kind, target), so every attempt of the parent names the same
-- children, and only the parent's own rows know the secret part.
alter table jobfeed.jobs add column child_seed uuid;
-- the sweeper's look for a finished child's unfinished parent
create index jobs_parent on jobfeed.jobs (parent_id) where parent_id is not null;

-- A row of job_deps is an `after` dependency (wait_pos null: it must complete)
-- or one of the jobs named by the job's latest ctx.wait_for (wait_pos: its
-- place in that list; any final state ends the wait for it).
alter table jobfeed.job_deps add column wait_pos int;
