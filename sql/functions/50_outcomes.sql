-- Everything a worker writes about a job it holds. Each takes (id, generation) and
-- touches the job only while it is running under that generation; false (or the
-- id missing from a batch's answer) means the lease is lost: the job was
-- reclaimed by another worker, canceled, or failed for an expired lease. The
-- worker must stop and drop its outcome.
--
-- Every look at a job by id and state, here and in the other files, tests the
-- state as text (`j.state::text = 'running'`): written plainly, the
-- planner may pick the partial index of running jobs (estimated tiny after an
-- ANALYZE taken while nothing ran, or on a young table not yet analyzed, whose
-- plan a session then keeps) and read every running job's entry at each call
-- (a batch: for each of its rows); this way each row is found by primary key.
--
-- Every batch write locks its rows in id order: the heartbeat (extend_many)
-- and the completion batch (complete_many) run on two connections over
-- overlapping ids, and rows locked in the order the arrays arrive deadlock.
-- Locked in one global order, one waits for the other and both succeed. Each
-- takes its rows in that order through its UPDATE's plan (how: complete_many).

-- Lock, in id order, the rows of these (id, generation) pairs that are still
-- running under that generation; returns their ids (the single-job writes of
-- 46_children take their job's row with it first). The sort sits below the
-- row locking in the plan, so the locks are taken in sorted order whatever
-- join the planner picks.
-- No nested loop: a plan kept from when the table
-- was nearly empty joined every running job with every item, 1,000 x 1,000
-- for a batch. `j.id = any (p_ids)` finds the jobs by key and the pairs are
-- matched in a hash join. No sequential scan either: such a plan read the
-- whole table (young, not yet analyzed) for the one job of each completion.
create or replace function jobfeed.lock_held(p_ids uuid[], p_generations int[])
returns uuid[] language sql set enable_nestloop = off set enable_seqscan = off as $$
    select array(
        select j.id
          from unnest(p_ids, p_generations) as t(id, generation)
          join jobfeed.jobs j on j.id = t.id
         where j.id = any (p_ids) and j.generation = t.generation and j.state::text = 'running'
         order by j.id
           for update of j)
$$;

-- Renew leases, many jobs in one call (the runner's heartbeat). Returns the ids
-- whose lease is lost.
-- Its rows in id order through the UPDATE's plan, as complete_many takes its
-- own (see there); the kind's lease by a sub-select, so that jobs is the only
-- join.
create or replace function jobfeed.extend_many(
    p_ids uuid[], p_generations int[], p_lease interval default null, p_now timestamptz default null)
returns uuid[] language plpgsql security definer set search_path = jobfeed, pg_temp
set enable_seqscan = off set enable_bitmapscan = off set enable_hashjoin = off set enable_mergejoin = off
set plan_cache_mode = force_generic_plan as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_kept uuid[];
begin
    with upd as (
        update jobfeed.jobs j
           set lease_until = v_now + coalesce(p_lease, (select k.lease from jobfeed.kinds k where k.kind = j.kind))
          from (select u.id, u.generation from unnest(p_ids, p_generations) as u(id, generation)
                 order by u.id) as t
         where j.id = t.id and j.generation = t.generation and j.state::text = 'running'
           and exists (select from jobfeed.kinds k where k.kind = j.kind)  -- no lease to renew by
        returning j.id
    )
    select coalesce(array_agg(upd.id), '{}') into v_kept from upd;
    return array(select x from unnest(p_ids) x where x <> all (v_kept));
end $$;

create or replace function jobfeed.extend(
    p_id uuid, p_generation int, p_lease interval default null, p_now timestamptz default null)
returns boolean language sql security definer set search_path = jobfeed, pg_temp as $$
    select cardinality(jobfeed.extend_many(array[p_id], array[p_generation], p_lease, p_now)) = 0
$$;

-- Progress never goes backwards in public: a report behind the shown one (a
-- retry starting over, see progress_behind) is accepted but not shown.
-- Identical reports change nothing.
create or replace function jobfeed.progress(
    p_id uuid, p_generation int, p_done double precision, p_total double precision default null,
    p_message text default null, p_now timestamptz default null)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_new jsonb;
    v_old jsonb;
    v_ver bigint;
begin
    -- NaN and infinity would be stored as JSON strings and, ranking above every
    -- number, freeze the public progress for the rest of the job.
    if p_done is null or p_done < 0 or p_total < 0
       or p_done in ('NaN', 'Infinity') or p_total in ('NaN', 'Infinity') then
        perform jobfeed.raise_error('JF422', 'invalid_progress', 'done and total must be finite and not negative');
    end if;
    v_new := jsonb_build_object('done', p_done, 'total', p_total, 'message', p_message);
    select j.progress into v_old from jobfeed.jobs j
     where j.id = p_id and j.generation = p_generation and j.state::text = 'running'
       for update;
    if not found then
        return false;
    end if;
    if v_old is not distinct from v_new or jobfeed.progress_behind(v_new, v_old) then
        return true;
    end if;
    update jobfeed.jobs j set progress = v_new, version = j.version + 1, updated_at = v_now
     where j.id = p_id
    returning j.version into v_ver;
    perform jobfeed.notify_changed(array[p_id], array[v_ver]);
    return true;
end $$;

-- State the next attempt receives (in claim's 'checkpoint' column).
create or replace function jobfeed.checkpoint(p_id uuid, p_generation int, p_state jsonb)
returns boolean language sql security definer set search_path = jobfeed, pg_temp as $$
    with upd as (
        update jobfeed.jobs j set checkpoint = p_state
         where j.id = p_id and j.generation = p_generation and j.state::text = 'running'
        returning 1
    )
    select exists (select from upd)
$$;

-- Complete many jobs in one statement; returns the ids that were completed.
-- A job with a rerun pending (on_duplicate="rerun") is not final: the same
-- statement queues it again at once with the newest payload and the kind's
-- attempts anew, its public status staying 'processing' (no version bump).
-- The UPDATE locks its rows in id order itself, as lock_held would in a pass
-- of its own: the items sorted by id drive a nested loop whose only way into
-- jobs is the primary key (no scans, bitmaps, hash or merge joins), and every
-- way through the primary key is in id order. Generic plans: a completion of
-- one job spent more on planning its statements than on running them; under
-- these settings the plan made once per session (maybe on a near-empty table)
-- still finds each job by a probe at any size.
create or replace function jobfeed.complete_many(
    p_ids uuid[], p_generations int[], p_results jsonb[], p_now timestamptz default null)
returns uuid[] language plpgsql security definer set search_path = jobfeed, pg_temp
set enable_seqscan = off set enable_bitmapscan = off set enable_hashjoin = off set enable_mergejoin = off
set plan_cache_mode = force_generic_plan as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_ids uuid[];
    v_vers bigint[];
    v_kinds text[];
    v_reruns text[];
begin
    with upd as (
        update jobfeed.jobs j
           set state = case when j.rerun_payload is null then 'completed' else 'queued' end::jobfeed.job_state,
               result = case when j.rerun_payload is null then t.result end, lease_until = null,
               finished_at = case when j.rerun_payload is null then v_now end,
               updated_at = case when j.rerun_payload is null then v_now else j.updated_at end,
               version = j.version + (j.rerun_payload is null)::int,
               payload = coalesce(j.rerun_payload, j.payload),
               run_after = case when j.rerun_payload is null then j.run_after else v_now end,
               checkpoint = case when j.rerun_payload is null then j.checkpoint end,
               max_attempts = case when j.rerun_payload is null then j.max_attempts
                                   else j.attempts + coalesce((select k.max_attempts from jobfeed.kinds k
                                                                where k.kind = j.kind), j.max_attempts) end,
               rerun_payload = null
          from (select u.id, u.generation, u.result
                  from unnest(p_ids, p_generations, p_results) as u(id, generation, result)
                 order by u.id) as t
         where j.id = t.id and j.generation = t.generation and j.state::text = 'running'
        returning j.id, j.generation, j.version, j.attempts, j.worker_id, j.claimed_at, j.kind,
                  j.state::text = 'queued' as rerun
    ), logged as (
        -- A completed job's row holds its last attempt (ended_attempts reads it
        -- there); a rerun's moves on, so its attempt is logged, as
        -- finish_attempts would, from the UPDATE's own rows.
        insert into jobfeed.attempts (job_id, generation, attempt, worker_id, started_at, finished_at, outcome)
        select upd.id, upd.generation, upd.attempts, upd.worker_id, upd.claimed_at, v_now, 'completed'
          from upd where upd.rerun
        on conflict (job_id, generation) do nothing
    )
    select array_agg(upd.id), array_agg(upd.version), array_agg(upd.kind) filter (where not upd.rerun),
           array_agg(upd.kind) filter (where upd.rerun)
      into v_ids, v_vers, v_kinds, v_reruns from upd;
    if v_ids is null then
        return '{}';
    end if;
    perform jobfeed.notify_changed(v_ids, v_vers);
    perform jobfeed.notify_freed(v_kinds);
    if v_reruns is not null then
        perform jobfeed.notify_due(r.kind, r.n::int)
           from (select x as kind, count(*) as n from unnest(v_reruns) x group by x) r;
    end if;
    return v_ids;
end $$;

create or replace function jobfeed.complete(
    p_id uuid, p_generation int, p_result jsonb default null, p_now timestamptz default null)
returns boolean language sql security definer set search_path = jobfeed, pg_temp as $$
    select cardinality(jobfeed.complete_many(array[p_id], array[p_generation], array[p_result], p_now)) = 1
$$;

-- A passing failure: back to queued after the kind's backoff (with jitter; a
-- longer p_retry_after, e.g. from a 429, wins), or failed once attempts are used
-- up. The public status stays 'processing' until then, and the error stays private.
create or replace function jobfeed.fail_transient(
    p_id uuid, p_generation int, p_code text, p_message text default null,
    p_retry_after interval default null, p_now timestamptz default null)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_attempts int;
    v_max int;
    v_backoff interval[];
    v_jitter double precision;
    v_delay interval;
    v_ver bigint;
    v_kind text;
begin
    if jobfeed.start_rerun(p_id, p_generation, 'transient', p_code, p_message, v_now) then
        return true;  -- the rerun with the newest payload is the next attempt
    end if;
    select j.attempts, j.max_attempts, j.kind, k.backoff, k.jitter
      into v_attempts, v_max, v_kind, v_backoff, v_jitter
      from jobfeed.jobs j left join jobfeed.kinds k on k.kind = j.kind
     where j.id = p_id and j.generation = p_generation and j.state::text = 'running'
       for update of j;
    if not found then
        return false;
    end if;
    if v_attempts >= v_max then
        update jobfeed.jobs j
           set state = 'failed', lease_until = null, finished_at = v_now, updated_at = v_now,
               last_error_code = p_code, last_error_message = p_message, version = j.version + 1
         where j.id = p_id
        returning j.version into v_ver;
        perform jobfeed.finish_attempts(array[p_id], array[p_generation], 'transient', p_code, p_message, v_now);
        perform jobfeed.notify_changed(array[p_id], array[v_ver]);
        perform jobfeed.notify_freed(array[v_kind]);
        return true;
    end if;
    v_backoff := coalesce(v_backoff, '{1 minute,5 minutes,15 minutes,60 minutes}');
    -- random() is read into a variable, not called inside the UPDATE.
    v_delay := v_backoff[least(v_attempts, cardinality(v_backoff))]
               * (1 + coalesce(v_jitter, 0) * (2 * random() - 1));
    v_delay := greatest(v_delay, coalesce(p_retry_after, interval '0'));
    update jobfeed.jobs j
       set state = 'queued', lease_until = null, run_after = v_now + v_delay,
           last_error_code = p_code, last_error_message = p_message
     where j.id = p_id
    returning j.version into v_ver;
    perform jobfeed.finish_attempts(array[p_id], array[p_generation], 'transient', p_code, p_message, v_now);
    perform jobfeed.notify_changed(array[p_id], array[v_ver]);
    perform jobfeed.notify_due(v_kind, 1);
    return true;
end $$;

create or replace function jobfeed.fail_permanent(
    p_id uuid, p_generation int, p_code text, p_message text default null, p_now timestamptz default null)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_ver bigint;
    v_kind text;
begin
    if jobfeed.start_rerun(p_id, p_generation, 'permanent', p_code, p_message, v_now) then
        return true;  -- this payload failed; the newest one still runs
    end if;
    update jobfeed.jobs j
       set state = 'failed', lease_until = null, finished_at = v_now, updated_at = v_now,
           last_error_code = p_code, last_error_message = p_message, version = j.version + 1
     where j.id = p_id and j.generation = p_generation and j.state::text = 'running'
    returning j.version, j.kind into v_ver, v_kind;
    if not found then
        return false;
    end if;
    perform jobfeed.finish_attempts(array[p_id], array[p_generation], 'permanent', p_code, p_message, v_now);
    perform jobfeed.notify_changed(array[p_id], array[v_ver]);
    perform jobfeed.notify_freed(array[v_kind]);
    return true;
end $$;

-- Not the job's fault (time budget up, our own credentials refused, shutdown):
-- back to queued after p_retry_after, and the attempt is not counted.
create or replace function jobfeed.release(
    p_id uuid, p_generation int, p_code text, p_retry_after interval default '0',
    p_message text default null, p_now timestamptz default null)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_ver bigint;
    v_kind text;
begin
    perform from jobfeed.jobs j
     where j.id = p_id and j.generation = p_generation and j.state::text = 'running'
       for update;
    if not found then
        return false;
    end if;
    -- logged first, while the row still holds the attempt's number
    perform jobfeed.finish_attempts(array[p_id], array[p_generation], 'released', p_code, p_message, v_now);
    update jobfeed.jobs j
       set state = 'queued', attempts = greatest(j.attempts - 1, 0), lease_until = null,
           run_after = v_now + coalesce(p_retry_after, interval '0'),
           -- a rerun asked for meanwhile: the next attempt runs the newest payload
           payload = coalesce(j.rerun_payload, j.payload), rerun_payload = null,
           checkpoint = case when j.rerun_payload is null then j.checkpoint end,
           last_error_code = p_code, last_error_message = p_message
     where j.id = p_id
    returning j.version, j.kind into v_ver, v_kind;
    perform jobfeed.notify_changed(array[p_id], array[v_ver]);
    perform jobfeed.notify_due(v_kind, 1);
    return true;
end $$;
