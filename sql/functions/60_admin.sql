-- Admin actions. Errors: not_found (JF404), invalid_state and target_busy (JF409).

-- Re-run a failed or canceled job: attempts back to 0, queued now (or waiting
-- again, see requeue). Its generation keeps growing, so a stale worker of an
-- earlier run stays fenced out.
create or replace function jobfeed.retry(p_id uuid, p_now timestamptz default null)
returns jsonb language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_state jobfeed.job_state;
    v_again record;
begin
    perform jobfeed.hold_dependencies(array(select d.dep_id from jobfeed.job_deps d where d.job_id = p_id));
    select j.state into v_state from jobfeed.jobs j where j.id = p_id for update;
    if not found then
        perform jobfeed.raise_error('JF404', 'not_found', 'no such job');
    end if;
    if v_state not in ('failed', 'canceled') then
        perform jobfeed.raise_error('JF409', 'invalid_state',
                                    format('only failed or canceled jobs can be retried; this one is %s', v_state));
    end if;
    begin
        v_again := jobfeed.requeue(p_id, v_now);
    exception when unique_violation then
        perform jobfeed.raise_error('JF409', 'target_busy',
                                    'another unfinished job already holds this kind and target');
    end;
    perform jobfeed.notify_changed(array[p_id], array[v_again.o_version]);
    if v_again.o_due then
        perform jobfeed.notify_due(v_again.o_kind, 1);
    end if;
    return jobfeed.admin_get_job(p_id);
end $$;

-- One retry of a failed or canceled job the caller has locked, after its
-- dependencies (hold_dependencies): the order in which a dependency that
-- finishes settles its dependents, so neither waits for the other, and none
-- finishes unseen. Attempts back to 0, and due now (or, never started, at its
-- run_at if that is still ahead); but waiting again while
-- something it waits for (after, ctx.wait_for, a signal) is unfinished, unless
-- that wait is what failed it (dependency_failed, signal_timeout): the retry
-- then runs it without. Its requests ended when it was final: one leaving
-- later must not count against those who request the retried run. Raises
-- unique_violation when an unfinished job holds its target again. Without
-- sequential scans: a plan an admin session kept from a young table read every
-- job to learn whether this one's dependencies are finished.
create or replace function jobfeed.requeue(p_id uuid, p_now timestamptz,
                                           out o_version bigint, out o_kind text, out o_due boolean)
language plpgsql set enable_seqscan = off as $$
declare
    v_waited boolean;
begin
    select j.state = 'failed' and j.last_error_code in ('dependency_failed', 'signal_timeout') into v_waited
      from jobfeed.jobs j where j.id = p_id;
    update jobfeed.jobs j
       set state = 'queued', attempts = 0, lease_until = null, finished_at = null,
           -- a job that never started keeps the time it was asked for, if still ahead:
           -- the retry undoes its cancel (a run's backoff is never kept)
           run_after = case when j.generation = 0 then greatest(j.run_after, p_now) else p_now end,
           result = null, updated_at = p_now, version = j.version + 1, requesters = 0
     where j.id = p_id
    returning j.version, j.kind into o_version, o_kind;
    update jobfeed.requests r set left_at = p_now where r.job_id = p_id and r.left_at is null;
    o_due := coalesce(v_waited, false)
             or not (exists (select from jobfeed.job_deps d join jobfeed.jobs j on j.id = d.dep_id
                              where d.job_id = p_id and j.state not in ('completed', 'failed', 'canceled'))
                     or exists (select from jobfeed.job_signals s where s.job_id = p_id and s.arrived_at is null));
    if not o_due then
        update jobfeed.jobs j set state = 'waiting' where j.id = p_id;
        perform jobfeed.settle_waiting(p_id, p_now);
    end if;
end $$;

-- Cancel a waiting, queued or running job. A worker running it is told at once
-- (notify_fenced), or learns at its next heartbeat (the lease is lost), and stops.
create or replace function jobfeed.cancel(p_id uuid, p_now timestamptz default null)
returns jsonb language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_state jobfeed.job_state;
    v_gen int;
    v_ver bigint;
    v_kind text;
begin
    select j.state, j.generation, j.kind into v_state, v_gen, v_kind from jobfeed.jobs j where j.id = p_id for update;
    if not found then
        perform jobfeed.raise_error('JF404', 'not_found', 'no such job');
    end if;
    if v_state not in ('waiting', 'queued', 'running') then
        perform jobfeed.raise_error('JF409', 'invalid_state',
                                    format('only unfinished jobs can be canceled; this one is %s', v_state));
    end if;
    update jobfeed.jobs j
       set state = 'canceled', lease_until = null, finished_at = v_now, updated_at = v_now,
           version = j.version + 1
     where j.id = p_id
    returning j.version into v_ver;
    if v_state = 'running' then
        perform jobfeed.finish_attempts(array[p_id], array[v_gen], 'canceled', 'canceled',
                                        'canceled by an admin', v_now);
        perform jobfeed.notify_freed(array[v_kind]);
        perform jobfeed.notify_fenced(array[p_id], array[v_gen]);
    end if;
    perform jobfeed.notify_changed(array[p_id], array[v_ver]);
    return jobfeed.admin_get_job(p_id);
end $$;

-- Pause or resume a kind: a paused kind takes submissions, but nothing of it is
-- claimed (running jobs finish). Only these calls write the flag, so it
-- survives registrations and restarts. Answers the kind as list_kinds shows it.
create or replace function jobfeed.set_kind_paused(p_kind text, p_paused boolean)
returns jsonb language plpgsql security definer set search_path = jobfeed, pg_temp as $$
begin
    update jobfeed.kinds k set paused = p_paused, updated_at = now()
     where k.kind = p_kind and k.paused is distinct from p_paused;
    if not exists (select from jobfeed.kinds k where k.kind = p_kind) then
        perform jobfeed.raise_error('JF404', 'not_found', format('no kind %L', p_kind));
    end if;
    if not p_paused then
        perform pg_notify('jobfeed_due', p_kind);  -- the kind alone: every sleeping worker looks again
    end if;
    return (select v from jobfeed.list_kinds() v where v->>'kind' = p_kind);
end $$;

-- Bulk retry and cancel: one bounded batch of the jobs that match a filter
-- (state, kind, last error code, ids; at least one), in id order after
-- p_after. Callers loop, passing the last id back, until a batch comes back
-- short (picked < p_limit): each batch is its own short transaction, and a
-- repeated call finds nothing more to do. `changed` counts the jobs this batch
-- changed; a job that cannot change (its target is held again) is skipped.
-- The pick (bulk_pick) reads only the jobs the action may change, never the
-- whole history; the rest of the batch keeps its kept plans (custom plans for
-- it all, by the function's settings, cost more than twice the time per job).
-- The cancel locks and updates its batch by key, without sequential scans.
create or replace function jobfeed.bulk_problem(
    p_state jobfeed.job_state, p_kind text, p_error_code text, p_ids uuid[])
returns void language plpgsql immutable as $$
begin
    -- an empty id list names no job: alone it is no filter
    if p_state is null and p_kind is null and p_error_code is null and coalesce(cardinality(p_ids), 0) = 0 then
        perform jobfeed.raise_error('JF422', 'filter_required',
                                    'name at least one of state, kind, error_code or ids');
    end if;
end $$;

-- A bulk action's batch: the ids of up to p_limit jobs in one of p_states
-- that match the filter, in id order after p_after. The ids given are read
-- by key. Otherwise, per kind and state, the jobs are a range of
-- jobs_kind_state_id (kind, state, id), in id order. The kinds: the one given,
-- or every kind with a job in one of the states, found by one probe of the
-- index each (PostgreSQL 18 skips the kinds without within the scan; older
-- servers, which would read their jobs, probe for any state but running, so
-- find every kind with such a job), and of those the pairs of kind and state
-- with a job, one descent each. The ranges, written out one by one as dynamic
-- SQL, are merged (a Merge Append reads each only as far as the batch takes
-- from it), and the running jobs (no more than the workers run) are read apart
-- and merged in. A walk in id order
-- through every job read the whole history once per action; a batch taken
-- from each range before merging would read each range once per batch. No
-- sort may gather a whole range: planned on stale estimates, one would sort
-- it at every batch.
create or replace function jobfeed.bulk_pick(
    p_states jobfeed.job_state[], p_state jobfeed.job_state, p_kind text, p_error_code text, p_ids uuid[],
    p_after uuid, p_limit int)
returns uuid[] language plpgsql stable set enable_seqscan = off set enable_sort = off as $$
declare
    v_states jobfeed.job_state[] := array(select s from unnest(p_states) s where p_state is null or s = p_state);
    -- the states the index holds (its predicate leaves running jobs out)
    v_ranged jobfeed.job_state[] := array(select s from unnest(v_states) s where s <> 'running');
    -- the states a kind is probed for (see above)
    v_probed jobfeed.job_state[] := case when current_setting('server_version_num')::int >= 180000 then v_ranged
        else array(select s from unnest(enum_range(null::jobfeed.job_state)) s where s <> 'running') end;
    v_limit int := greatest(p_limit, 1);
    v_ranges text;
    v_ids uuid[] := '{}';
    v_running uuid[] := '{}';
begin
    if p_ids is not null then
        return array(
            select j.id from jobfeed.jobs j
             where j.id = any (p_ids) and j.state = any (v_states)
               and (p_kind is null or j.kind = p_kind)
               and (p_error_code is null or j.last_error_code = p_error_code)
               and (p_after is null or j.id > p_after)
             order by j.id
             limit v_limit);
    end if;
    -- each range ordered on its own, so the planner can merge them
    select string_agg(format('(select j.id from jobfeed.jobs j where j.kind = %L and j.state = %L', k.kind, s.state)
                      || ' and ($1 is null or j.last_error_code = $1) and ($2 is null or j.id > $2)'
                      || ' order by j.id)', ' union all ')
      into v_ranges
      from unnest(case when p_kind is not null then array[p_kind] else array(
               with recursive k(kind) as (
                   (select j.kind from jobfeed.jobs j where j.state = any (v_probed) order by j.kind limit 1)
                   union all
                   select (select j.kind from jobfeed.jobs j where j.kind > k.kind and j.state = any (v_probed)
                            order by j.kind limit 1)
                     from k where k.kind is not null)
               select k.kind from k where k.kind is not null) end) k(kind),
           unnest(v_ranged) s(state)
     -- a pair with no job gets no range: a descent of the index each (a sub-select
     -- of one row, which no plan turns into a join that reads the ranges; running
     -- named so that the index's predicate applies), not a range's planning
     where (select true from jobfeed.jobs j
             where j.kind = k.kind and j.state = s.state and j.state <> 'running' limit 1);
    if v_ranges is not null then
        execute 'select array(select u.id from (' || v_ranges || ') u order by u.id limit $3)'
           into v_ids using p_error_code, p_after, v_limit;
    end if;
    if 'running' = any (v_states) then
        v_running := array(
            select j.id from jobfeed.jobs j
             where j.state = 'running' and (p_kind is null or j.kind = p_kind)
               and (p_error_code is null or j.last_error_code = p_error_code)
               and (p_after is null or j.id > p_after));
    end if;
    return array(select x from unnest(v_ids || v_running) x order by x limit v_limit);
end $$;

create or replace function jobfeed.bulk_retry(
    p_state jobfeed.job_state, p_kind text, p_error_code text, p_ids uuid[],
    p_after uuid default null, p_limit int default 500, p_now timestamptz default null)
returns table (changed int, picked int, last_id uuid)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_ids uuid[];
    v_id uuid;
    v_again record;
    v_done uuid[] := '{}';
    v_vers bigint[] := '{}';
    v_kinds text[] := '{}';
begin
    perform jobfeed.bulk_problem(p_state, p_kind, p_error_code, p_ids);
    v_ids := jobfeed.bulk_pick('{failed,canceled}', p_state, p_kind, p_error_code, p_ids, p_after, p_limit);
    foreach v_id in array v_ids loop
        -- as retry(): its dependencies, then the job, still failed or canceled
        perform jobfeed.hold_dependencies(array(select d.dep_id from jobfeed.job_deps d where d.job_id = v_id));
        perform from jobfeed.jobs j where j.id = v_id and j.state in ('failed', 'canceled') for update;
        continue when not found;
        begin  -- as retry(): a target held by an unfinished job again is left alone
            v_again := jobfeed.requeue(v_id, v_now);
            v_done := v_done || v_id;
            v_vers := v_vers || v_again.o_version;
            if v_again.o_due then
                v_kinds := v_kinds || v_again.o_kind;
            end if;
        exception when unique_violation then
            null;
        end;
    end loop;
    if cardinality(v_done) > 0 then
        perform jobfeed.notify_changed(v_done, v_vers);
        perform jobfeed.notify_due(d.k, d.n) from (select k, count(*)::int as n from unnest(v_kinds) k group by k) d;
    end if;
    return query select cardinality(v_done), cardinality(v_ids), v_ids[cardinality(v_ids)];
end $$;

create or replace function jobfeed.bulk_cancel(
    p_state jobfeed.job_state, p_kind text, p_error_code text, p_ids uuid[],
    p_after uuid default null, p_limit int default 500, p_now timestamptz default null)
returns table (changed int, picked int, last_id uuid)
language plpgsql security definer set search_path = jobfeed, pg_temp set enable_seqscan = off as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_pick uuid[];
    v_ids uuid[];
    v_running uuid[];
    v_gens int[];
    v_freed text[];
    v_done uuid[];
    v_vers bigint[];
begin
    perform jobfeed.bulk_problem(p_state, p_kind, p_error_code, p_ids);
    v_pick := jobfeed.bulk_pick('{waiting,queued,running}', p_state, p_kind, p_error_code, p_ids, p_after, p_limit);
    -- Locked in id order, each still unfinished and matching (it may have
    -- moved on since the pick: then it is skipped). By key: the state
    -- compared as text, so that no index of one state's jobs matches (before
    -- 18, with no skip scan, a cancel of 'queued' read every queued job's entry
    -- of jobs_queued_priority for its batch's ids).
    select coalesce(array_agg(p.id order by p.id), '{}'),
           coalesce(array_agg(p.id) filter (where p.state = 'running'), '{}'),
           coalesce(array_agg(p.generation) filter (where p.state = 'running'), '{}'),
           coalesce(array_agg(p.kind) filter (where p.state = 'running'), '{}')
      into v_ids, v_running, v_gens, v_freed
      from (select j.id, j.state, j.generation, j.kind from jobfeed.jobs j
             where j.id = any (v_pick) and j.state not in ('completed', 'failed', 'canceled')
               and (p_state is null or j.state::text = p_state::text)
               and (p_error_code is null or j.last_error_code = p_error_code)
             order by j.id
             for update) p;
    with upd as (
        update jobfeed.jobs j
           set state = 'canceled', lease_until = null, finished_at = v_now, updated_at = v_now,
               version = j.version + 1
         where j.id = any (v_ids)
        returning j.id, j.version)
    select coalesce(array_agg(u.id), '{}'), coalesce(array_agg(u.version), '{}') into v_done, v_vers from upd u;
    if cardinality(v_running) > 0 then
        perform jobfeed.finish_attempts(v_running, v_gens, 'canceled', 'canceled', 'canceled by an admin', v_now);
        perform jobfeed.notify_freed(v_freed);
        perform jobfeed.notify_fenced(v_running, v_gens);
    end if;
    if cardinality(v_done) > 0 then
        perform jobfeed.notify_changed(v_done, v_vers);
    end if;
    return query select cardinality(v_done), cardinality(v_pick), v_pick[cardinality(v_pick)];
end $$;
