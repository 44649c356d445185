-- The index of awaited signals keeps only those with a deadline: the sweeper
-- (fail_signal_timeouts) and next_deadline look for deadlines. A look at one
-- job's missing signals (a signal arriving, a dependency settling, a retry)
-- could take it too, and under a plan a session kept from a small table it
-- read every missing signal of every job there instead of the job's own
-- entries in the primary key. Now that look cannot take it.
drop index jobfeed.job_signals_overdue;
create index job_signals_overdue on jobfeed.job_signals (deadline) where arrived_at is null and deadline is not null;
