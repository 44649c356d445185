-- A claim rewrites the job's row (its state is in index keys and predicates,
-- so never a HOT update), and every index whose predicate the new row meets
-- gets an entry: jobs_kind_state_id took one per claim for running jobs,
-- which are few (what the workers hold) and listed through
-- jobs_running_lease instead (admin_list_jobs). Without them, a claim writes
-- three index entries, not four.
create index jobs_kind_state_id_2 on jobfeed.jobs (kind, state, id) where state <> 'running';
drop index jobfeed.jobs_kind_state_id;
alter index jobfeed.jobs_kind_state_id_2 rename to jobs_kind_state_id;
