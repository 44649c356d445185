-- Workflows: jobs that wait for other jobs ('waiting' until every job named in
-- their `after` has completed).
--
-- Races: whoever may end the wait (a dependency finishing, the submitter
-- recording the dependencies) locks the waiting job's row first and only then
-- reads the dependencies' states, in a later statement (a fresh snapshot under
-- READ COMMITTED). Two dependencies finishing at once thus settle it one after
-- the other, and the second sees the first; a submitter holds its
-- dependencies (hold_dependencies), so none finishes unseen between its look
-- and commit.

-- Settle one waiting job: failed (dependency_failed, naming the first failed
-- or canceled dependency), queued and due (all completed, every awaited signal
-- arrived, every job of its ctx.wait_for final), or still waiting. A job
-- waiting for jobs (wait_pos rows, see 46_children.sql) shows the share of
-- them that is final as its progress, never going backwards. One generic
-- plan, by key (the default plan cache mode planned its look-ups anew at
-- every call, a custom plan for one id looking cheaper: tests/test_plans.py).
create or replace function jobfeed.settle_waiting(p_id uuid, p_now timestamptz)
returns void language plpgsql set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
declare
    v_job jobfeed.jobs;
    v_bad record;
    v_open boolean;
    v_share record;
    v_progress jsonb;
begin
    select j.* into v_job from jobfeed.jobs j where j.id = p_id and j.state = 'waiting' for update;
    if not found then
        return;
    end if;
    select d.dep_id, j.state into v_bad
      from jobfeed.job_deps d left join jobfeed.jobs j on j.id = d.dep_id
     where d.job_id = p_id and d.wait_pos is null and (j.id is null or j.state in ('failed', 'canceled'))
     order by d.dep_id
     limit 1;
    if v_bad.dep_id is not null then
        update jobfeed.jobs j
           set state = 'failed', finished_at = p_now, updated_at = p_now, last_error_code = 'dependency_failed',
               last_error_message = format('dependency %s %s', v_bad.dep_id,
                                           coalesce(v_bad.state::text || ' (it did not complete)', 'is gone')),
               version = j.version + 1
         where j.id = p_id
        returning j.* into v_job;
        perform jobfeed.notify_changed(array[p_id], array[v_job.version]);
        return;
    end if;
    -- a job waited for that is gone counts as final
    select count(*) filter (where j.state is null or j.state in ('completed', 'failed', 'canceled')) as done,
           count(*) as total
      into v_share
      from jobfeed.job_deps d left join jobfeed.jobs j on j.id = d.dep_id
     where d.job_id = p_id and d.wait_pos is not null;
    v_open := v_share.done < v_share.total
              or exists (select from jobfeed.job_deps d join jobfeed.jobs j on j.id = d.dep_id
                          where d.job_id = p_id and d.wait_pos is null and j.state <> 'completed')
              or exists (select from jobfeed.job_signals s where s.job_id = p_id and s.arrived_at is null);
    if v_share.total > 0 then
        v_progress := jsonb_build_object('done', v_share.done, 'total', v_share.total, 'message', null);
        if jobfeed.progress_rank(v_progress) > jobfeed.progress_rank(v_job.progress) then
            update jobfeed.jobs j set progress = v_progress, version = j.version + 1, updated_at = p_now
             where j.id = p_id
            returning j.version into v_job.version;
            perform jobfeed.notify_changed(array[p_id], array[v_job.version]);
        end if;
    end if;
    if not v_open then
        -- becoming due is not a public change (still 'queued' or 'processing');
        -- a run_at/delay asked for with the submission still holds: due at the
        -- later of the two. updated_at moves with run_after, so that a job due
        -- from p_now shows no scheduled_for even where p_now is ahead of the
        -- clock (the view's "scheduled" is past both).
        update jobfeed.jobs j
           set state = 'queued', run_after = greatest(p_now, j.run_after), updated_at = greatest(j.updated_at, p_now)
         where j.id = p_id;
        perform jobfeed.notify_due(v_job.kind, 1);
    end if;
end $$;

-- Hold the jobs p_ids (those that exist, answered in id order) until commit,
-- so that none reaches a final state unseen between the caller's look at it
-- and its job_deps rows becoming visible: FOR SHARE, or for a job not yet
-- marked has_dependents the UPDATE that marks it (the trigger on job_deps
-- would mark it too, but there upgrading two submitters' share locks on the
-- same job would deadlock). One row at a time, in id order, as every writer
-- locks jobs. By key, whatever the kept plan was made on; one generic plan
-- (the default plan cache mode planned every call anew: tests/test_plans.py).
create or replace function jobfeed.hold_dependencies(p_ids uuid[])
returns uuid[] language plpgsql set enable_seqscan = off set plan_cache_mode = force_generic_plan as $$
declare
    v_job record;
    v_held uuid[] := '{}';
begin
    for v_job in select j.id, j.has_dependents from jobfeed.jobs j where j.id = any (p_ids) order by j.id loop
        if not v_job.has_dependents then
            update jobfeed.jobs j set has_dependents = true where j.id = v_job.id and not j.has_dependents;
        end if;
        if v_job.has_dependents or not found then  -- marked already, or meanwhile by another
            perform from jobfeed.jobs j where j.id = v_job.id for share;
        end if;
        if found then  -- not deleted meanwhile
            v_held := v_held || v_job.id;
        end if;
    end loop;
    return v_held;
end $$;

-- Trigger: a job reached a final state; settle the jobs waiting for it, in id
-- order (a dependent failing here settles its own dependents in turn). Only
-- jobs marked has_dependents fire it (0013_dependents.sql), at every change of
-- state (a one-column WHEN, as jobs_queue_webhooks's).
create or replace function jobfeed.settle_dependents()
returns trigger language plpgsql as $$
declare
    v_id uuid;
begin
    if not jobfeed.became_final(old.state, new.state) then
        return null;
    end if;
    for v_id in select d.job_id from jobfeed.job_deps d where d.dep_id = new.id order by d.job_id loop
        perform jobfeed.settle_waiting(v_id, now());
    end loop;
    return null;
end $$;

create or replace trigger jobs_settle_dependents
    after update of state on jobfeed.jobs
    for each row
    when (new.has_dependents)
    execute function jobfeed.settle_dependents();

-- Submit a job that waits: as submit(), but a new job waits until every job in
-- p_after has completed and every name in p_signals has been delivered (or
-- fails with signal_timeout once p_signal_timeout has passed). A duplicate
-- joins the unfinished job holding the target, which keeps its own
-- conditions. Unknown ids: 422 unknown_dependency, and nothing is written.
-- It takes what any submission may: run_after (a new job
-- waiting on dependencies becomes due at the later of "all satisfied" and
-- run_after), priority and concurrency key, and records a request like
-- submit_request (p_request, or a requester or notify_url given: identity,
-- cap, reuse_for and notify_url as there). request_id is null without one.
create or replace function jobfeed.submit_waiting_v2(
    p_kind text, p_target text, p_payload jsonb, p_after uuid[], p_signals text[],
    p_signal_timeout interval default null, p_max_payload int default 65536, p_now timestamptz default null,
    p_run_after timestamptz default null, p_priority int default null, p_concurrency_key text default null,
    p_request boolean default false, p_requester text default null, p_notify_url text default null,
    p_max_active int default null, p_force boolean default false)
returns table (id uuid, created boolean, view jsonb, request_id uuid, reused boolean)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_after uuid[] := array(select distinct a from unnest(coalesce(p_after, '{}')) a where a is not null order by a);
    v_signals text[] := array(select distinct s from unnest(coalesce(p_signals, '{}')) s order by s);
    v_found uuid[];
    v_row record;
    v_view jsonb;
begin
    if cardinality(v_after) > 100 or cardinality(v_signals) > 100 then
        perform jobfeed.raise_error('JF422', 'invalid_request', 'after and await_signals name at most 100 each');
    end if;
    if exists (select from unnest(v_signals) s where s is null or octet_length(s) not between 1 and 100) then
        perform jobfeed.raise_error('JF422', 'invalid_request', 'a signal name is 1 to 100 bytes');
    end if;
    if p_signal_timeout is not null and (cardinality(v_signals) = 0 or p_signal_timeout <= interval '0') then
        perform jobfeed.raise_error('JF422', 'invalid_request', 'signal_timeout needs await_signals and a positive duration');
    end if;
    -- Hold the dependencies so none changes state before we commit.
    v_found := jobfeed.hold_dependencies(v_after);
    if cardinality(v_found) < cardinality(v_after) then
        perform jobfeed.raise_error('JF422', 'unknown_dependency', format('no such job: %s',
            (select string_agg(a::text, ', ') from unnest(v_after) a where a <> all (v_found))));
    end if;
    if p_request or p_requester is not null or p_notify_url is not null then
        select s.id, s.created, s.view, s.request_id, s.reused into v_row
          from jobfeed.submit_request(p_kind, p_target, p_payload, p_run_after, p_max_payload, p_requester,
                                      p_notify_url, p_max_active, p_force, p_now, p_priority,
                                      p_concurrency_key) s;
    else
        select s.id, s.created, s.view, null::uuid as request_id, false as reused into v_row
          from jobfeed.submit_v3(p_kind, p_target, p_payload, p_run_after, p_max_payload, p_now, p_priority,
                                 p_concurrency_key) s;
    end if;
    v_view := v_row.view;
    if v_row.created and (cardinality(v_after) > 0 or cardinality(v_signals) > 0) then
        -- Not yet visible to anyone: made waiting before it can be claimed.
        update jobfeed.jobs j set state = 'waiting' where j.id = v_row.id;
        insert into jobfeed.job_deps (job_id, dep_id) select v_row.id, a from unnest(v_after) a;
        insert into jobfeed.job_signals (job_id, name, deadline)
        select v_row.id, s, v_now + p_signal_timeout from unnest(v_signals) s;
        perform jobfeed.settle_waiting(v_row.id, v_now);
        select jobfeed.public_view(j) into v_view from jobfeed.jobs j where j.id = v_row.id;
    end if;
    return query select v_row.id, v_row.created, v_view, v_row.request_id, v_row.reused;
end $$;

-- The first form (no scheduling fields, never a request), kept for processes
-- of the release before during a rolling deploy.
create or replace function jobfeed.submit_waiting(
    p_kind text, p_target text, p_payload jsonb, p_after uuid[], p_signals text[],
    p_signal_timeout interval default null, p_max_payload int default 65536, p_now timestamptz default null)
returns table (id uuid, created boolean, view jsonb)
language sql security definer set search_path = jobfeed, pg_temp as $$
    select s.id, s.created, s.view
      from jobfeed.submit_waiting_v2(p_kind, p_target, p_payload, p_after, p_signals, p_signal_timeout,
                                     p_max_payload, p_now) s
$$;

-- Deliver signal p_name to job p_id. The first delivery wins; a repeat changes
-- nothing (first = false). 413 payload_too_large for data over p_max_payload
-- bytes (the handler reads it as it reads a payload; null: no limit), looked at
-- first; 404 not_found; 409 not_awaited for a name the job does not await.
-- Returns the job's public view. One generic plan, by key (as settle_waiting).
create or replace function jobfeed.signal_v2(p_id uuid, p_name text, p_data jsonb, p_max_payload int,
                                             p_now timestamptz default null)
returns table (first boolean, view jsonb)
language plpgsql security definer set search_path = jobfeed, pg_temp
set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_first boolean;
begin
    if octet_length(coalesce(p_data, 'null')::text) > p_max_payload then
        perform jobfeed.raise_error('JF413', 'payload_too_large',
                                    format('the signal''s data is over %s bytes', p_max_payload));
    end if;
    -- the job's row first: settle_waiting locks it too, and so does every
    -- other path that ends the wait
    perform from jobfeed.jobs j where j.id = p_id for update;
    if not found then
        perform jobfeed.raise_error('JF404', 'not_found', 'no such job');
    end if;
    update jobfeed.job_signals s set data = coalesce(p_data, 'null'), arrived_at = v_now
     where s.job_id = p_id and s.name = p_name and s.arrived_at is null;
    v_first := found;
    if not v_first and not exists (select from jobfeed.job_signals s where s.job_id = p_id and s.name = p_name) then
        perform jobfeed.raise_error('JF409', 'not_awaited', format('this job does not await signal %L', p_name));
    end if;
    if v_first then
        perform jobfeed.settle_waiting(p_id, v_now);
    end if;
    return query select v_first, jobfeed.with_position(jobfeed.public_view(j), j.id) from jobfeed.jobs j where j.id = p_id;
end $$;

-- The first release's signal: signal_v2 without a limit on the data.
create or replace function jobfeed.signal(p_id uuid, p_name text, p_data jsonb, p_now timestamptz default null)
returns table (first boolean, view jsonb)
language sql security definer set search_path = jobfeed, pg_temp as $$
    select s.first, s.view from jobfeed.signal_v2(p_id, p_name, p_data, null, p_now) s
$$;

-- Fail waiting jobs whose signals did not all arrive by their deadline
-- (signal_timeout). Called by the sweeper (sweep_expired), whose session keeps
-- the plan: the overdue signals' jobs by key, not a scan of every job, nor of
-- every waiting one (the state as text: see 50_outcomes.sql's header).
create or replace function jobfeed.fail_signal_timeouts(p_now timestamptz)
returns int language plpgsql set enable_seqscan = off as $$
declare
    v_ids uuid[];
    v_vers bigint[];
begin
    with late as (
        select j.id from jobfeed.jobs j
         where j.id in (select s.job_id from jobfeed.job_signals s
                         where s.arrived_at is null and s.deadline <= p_now)
           and j.state::text = 'waiting'
         for update skip locked
    ), upd as (
        update jobfeed.jobs j
           set state = 'failed', finished_at = p_now, updated_at = p_now, last_error_code = 'signal_timeout',
               last_error_message = 'not every awaited signal arrived in time: missing ' || (
                   select string_agg(s.name, ', ' order by s.name) from jobfeed.job_signals s
                    where s.job_id = j.id and s.arrived_at is null),
               version = j.version + 1
          from late
         where j.id = late.id
        returning j.id, j.version
    )
    select array_agg(upd.id), array_agg(upd.version) into v_ids, v_vers from upd;
    if v_ids is null then
        return 0;
    end if;
    perform jobfeed.notify_changed(v_ids, v_vers);
    return cardinality(v_ids);
end $$;

-- The signals of jobs just claimed (the claim query asks once per batch): name
-- -> data for each job that awaited any.
create or replace function jobfeed.signals_of(p_ids uuid[])
returns table (job_id uuid, signals jsonb)
language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select s.job_id, jsonb_object_agg(s.name, s.data)
      from jobfeed.job_signals s
     where s.job_id = any (p_ids)
     group by s.job_id
$$;
