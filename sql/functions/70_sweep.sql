-- The sweeper's work. Safe to run from several sweepers at once (SKIP LOCKED).

-- Fail every running job whose lease expired with no attempts left, and every
-- waiting job whose signals are overdue (signal_timeout).
create or replace function jobfeed.sweep_expired(p_now timestamptz default null)
returns int language sql security definer set search_path = jobfeed, pg_temp as $$
    select jobfeed.fail_expired(null, jobfeed.clock(p_now)) + jobfeed.fail_signal_timeouts(jobfeed.clock(p_now))
$$;

-- Seconds until the next signal deadline still ahead (null: none), so the
-- sweeper wakes for it instead of at its next round: a short signal_timeout
-- is kept to within a moment, whatever --sweep-interval says. Deadlines
-- already past are the round's (their jobs may be final: never waited for).
create or replace function jobfeed.next_signal_deadline(p_now timestamptz default null)
returns double precision language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select extract(epoch from min(s.deadline) - jobfeed.clock(p_now))::double precision
      from jobfeed.job_signals s
     where s.arrived_at is null and s.deadline > jobfeed.clock(p_now)
$$;

-- Seconds until the sweeper's next deadline (null: none): a signal deadline
-- still ahead (next_signal_deadline), or a pending leave (leave_due), below 0
-- when one is overdue already: leave_due ends it, so none is waited for twice.
create or replace function jobfeed.next_deadline(p_now timestamptz default null)
returns double precision language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select least(jobfeed.next_signal_deadline(p_now),
                 (select extract(epoch from min(r.leave_at) - jobfeed.clock(p_now))::double precision
                    from jobfeed.requests r
                   where r.leave_at is not null and r.left_at is null))
$$;

-- Delete up to p_limit jobs that finished more than p_retention ago, with their
-- attempts log; answers how many went and the latest finished_at among them.
-- Call again with p_after = that time until fewer than p_limit go: each batch
-- then starts where the last ended, instead of stepping over the index entries
-- of every job deleted since the table was last vacuumed (a sweep of a long
-- history made each batch dearer than the one before). A job left behind (a
-- concurrent sweeper held it, or it is kept, below) waits for the next sweep,
-- which starts from the oldest again (p_after null).
-- Unfinished jobs are never touched, nor finished ones an unfinished job
-- names in its `after` or its ctx.wait_for (job_deps), nor children of an
-- unfinished parent, nor a parent of an unfinished child (a fire-and-forget
-- child's parent_id keeps naming a job; a probe of jobs_parent, empty for
-- jobs that have no children). Without sorts: on a table not yet analyzed, a
-- plan could read every expired job and sort them all to keep the oldest
-- p_limit (FOR UPDATE between the LIMIT and the sort leaves it unbounded), at
-- every call; jobs_finished_at has them in order.
-- Two statements: the batch is locked first, then deleted by a statement whose
-- snapshot comes after those locks, which looks again for who still needs
-- each job. One statement looked with the snapshot it began with: a dependent
-- whose submitter committed (its FOR SHARE lock on the job gone) between that
-- start and the job's lock went unseen, and the job it names was deleted. A
-- submitter that comes after the lock waits for it and finds the job gone
-- (unknown_dependency); one that holds its FOR SHARE lock is skipped.
create or replace function jobfeed.delete_finished_v2(
    p_retention interval, p_limit int default 1000, p_after timestamptz default null,
    p_now timestamptz default null)
returns table (deleted int, last_finished_at timestamptz)
language plpgsql security definer set search_path = jobfeed, pg_temp set enable_sort = off
set plan_cache_mode = force_generic_plan as $$
declare
    v_ids uuid[];
begin
    v_ids := array(
        select j.id from jobfeed.jobs j
         where j.state in ('completed', 'failed', 'canceled')
           and j.finished_at < jobfeed.clock(p_now) - p_retention
           and j.finished_at >= coalesce(p_after, '-infinity')
           and not jobfeed.still_needed(j)
         order by j.finished_at
         limit p_limit
         for update skip locked);
    return query
    with del as (
        -- by key alone: the batch is locked, its states cannot move (naming them,
        -- the planner ANDed in jobs_finished_at's every entry)
        delete from jobfeed.jobs j
         where j.id = any (v_ids)
           and not jobfeed.still_needed(j)  -- this statement's snapshot: after the locks
        returning j.id, j.finished_at
    ), del_attempts as (
        delete from jobfeed.attempts a using del where a.job_id = del.id
    ), del_requests as (
        delete from jobfeed.requests r using del where r.job_id = del.id
    )
    select count(*)::int, max(del.finished_at) from del;
end $$;

-- A finished job the sweeper keeps: an unfinished job still runs after it
-- (job_deps: `after`, ctx.wait_for), it is a child of an unfinished parent,
-- or a parent of an unfinished child.
create or replace function jobfeed.still_needed(j jobfeed.jobs)
returns boolean language sql stable as $$
    select exists (select from jobfeed.job_deps d join jobfeed.jobs w on w.id = d.job_id
                    where d.dep_id = j.id and w.state not in ('completed', 'failed', 'canceled'))
        or exists (select from jobfeed.jobs p
                    where p.id = j.parent_id and p.state not in ('completed', 'failed', 'canceled'))
        or exists (select from jobfeed.jobs c
                    where c.parent_id = j.id and c.state not in ('completed', 'failed', 'canceled'))
$$;

-- The release before's sweepers call this: each batch from the oldest.
create or replace function jobfeed.delete_finished(
    p_retention interval, p_limit int default 1000, p_now timestamptz default null)
returns int language sql security definer set search_path = jobfeed, pg_temp as $$
    select d.deleted from jobfeed.delete_finished_v2(p_retention, p_limit, null, p_now) d
$$;

-- Delete up to p_limit periodic slots (schedule_slots) older than p_retention,
-- keeping each kind's newest: a scheduler only ever enqueues the newest slot
-- due, which must stay taken, or a schedule slower than the retention (a
-- monthly job, a week kept) would run its last slot again. Returns how many
-- went. (A schedule every second makes 86,400 slots a day.)
create or replace function jobfeed.delete_old_slots(
    p_retention interval, p_limit int default 10000, p_now timestamptz default null)
returns int language sql security definer set search_path = jobfeed, pg_temp as $$
    with doomed as (
        select t.kind, t.slot from jobfeed.schedule_slots t
         where t.slot < jobfeed.clock(p_now) - p_retention
           and exists (select from jobfeed.schedule_slots n where n.kind = t.kind and n.slot > t.slot)
         order by t.slot
         limit p_limit
    ), del as (
        delete from jobfeed.schedule_slots t using doomed d
         where t.kind = d.kind and t.slot = d.slot
        returning 1
    )
    select count(*)::int from del
$$;
