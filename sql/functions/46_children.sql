-- Children: jobs a handler submits (ctx.submit) and jobs it waits for
-- (ctx.wait_for). A handler's children are written only with its outcome, by
-- complete_spawning or wait_for below, in the transaction that fences that
-- outcome by generation: a stale attempt writes none, and a failed or released
-- attempt's children are never written. Their ids are known before: child_id
-- derives them from the parent's seed and (kind, target), so every attempt of
-- the parent names the same children, and a retry cannot make a second set.

-- The id ctx.submit answers for a child of (kind, target): the unfinished job
-- holding that target (the child joins it, as any duplicate does), else the
-- id the child will have once the parent's outcome writes it. Checks the
-- submission as submit does. Null: the parent's lease is lost.
create or replace function jobfeed.child_id(
    p_parent uuid, p_generation int, p_kind text, p_target text, p_payload jsonb,
    p_max_payload int default 65536)
returns uuid language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_problem text[] := jobfeed.submission_problem(p_target, p_payload, p_max_payload);
    v_seed uuid;
    v_holder uuid;
begin
    if not exists (select from jobfeed.kinds k where k.kind = p_kind) then
        perform jobfeed.raise_error('JF422', 'unknown_kind', format('unknown kind %L', p_kind));
    end if;
    if v_problem is not null then
        perform jobfeed.raise_error(v_problem[1], v_problem[2], v_problem[3]);
    end if;
    -- the seed is drawn once: a concurrent first draw waits, then finds it set
    update jobfeed.jobs j set child_seed = jobfeed.uuid_v7()
     where j.id = p_parent and j.generation = p_generation and j.state::text = 'running' and j.child_seed is null
    returning j.child_seed into v_seed;
    if v_seed is null then
        select j.child_seed into v_seed from jobfeed.jobs j
         where j.id = p_parent and j.generation = p_generation and j.state::text = 'running';
        if v_seed is null then
            return null;
        end if;
    end if;
    select j.id into v_holder from jobfeed.jobs j
     where j.kind = p_kind and j.target = p_target and j.dedupe_scope = ''
       and j.state not in ('completed', 'failed', 'canceled');
    if v_holder = p_parent then
        perform jobfeed.raise_error('JF422', 'invalid_request', 'a job cannot be its own child');
    end if;
    -- uuid_v7's layout: the seed's time prefix, then 60 bits only the seed knows
    return coalesce(v_holder, (left(replace(v_seed::text, '-', ''), 17)
                               || left(md5(v_seed::text || chr(31) || p_kind || chr(31) || p_target), 15))::uuid);
end $$;

-- Write the planned children (a JSON array of {id, kind, target, payload,
-- priority, concurrency_key} from child_id and the handler) of a parent whose
-- row the caller holds. A child already written (by an earlier attempt) or
-- joined stays as it is. When another job took a child's target since
-- child_id answered, the child joins that job: the answer maps such planned
-- ids to the job they joined.
create or replace function jobfeed.spawn_children(p_parent uuid, p_children jsonb, p_now timestamptz)
returns jsonb language plpgsql as $$
declare
    v_c record;
    v_job jobfeed.jobs;
    v_alias jsonb := '{}';
    v_ids uuid[] := '{}';
    v_vers bigint[] := '{}';
    v_kinds text[] := '{}';
    v_problem text[];
begin
    for v_c in select * from jsonb_to_recordset(coalesce(p_children, '[]'))
                   as c(id uuid, kind text, target text, payload jsonb, priority int, concurrency_key text) loop
        continue when exists (select from jobfeed.jobs j where j.id = v_c.id);
        -- a job row's rules, whoever calls (ctx.submit checked them first, and the
        -- payload's size, which is not limited here)
        v_problem := coalesce(jobfeed.submission_problem(v_c.target, v_c.payload, null),
                              jobfeed.key_problem(v_c.concurrency_key));
        if v_problem is not null then
            perform jobfeed.raise_error(v_problem[1], v_problem[2], format('child %s: %s', v_c.id, v_problem[3]));
        end if;
        v_job := null;
        insert into jobfeed.jobs as j (id, kind, target, payload, max_attempts, run_after, created_at, updated_at,
                                       priority, concurrency_key, parent_id)
        select v_c.id, v_c.kind, v_c.target, coalesce(v_c.payload, '{}'), k.max_attempts, p_now, p_now, p_now,
               coalesce(v_c.priority, k.priority), v_c.concurrency_key, p_parent
          from jobfeed.kinds k where k.kind = v_c.kind
        -- (children share as "global" kinds do: dedupe_scope '')
        on conflict (kind, target, dedupe_scope) where state not in ('completed', 'failed', 'canceled') do nothing
        returning j.* into v_job;
        if v_job.id is not null then
            v_ids := v_ids || v_job.id;
            v_vers := v_vers || v_job.version;
            v_kinds := v_kinds || v_job.kind;
        else
            v_alias := v_alias || jsonb_build_object(v_c.id::text, (
                select j.id from jobfeed.jobs j
                 where j.kind = v_c.kind and j.target = v_c.target and j.dedupe_scope = ''
                   and j.state not in ('completed', 'failed', 'canceled')));
        end if;
    end loop;
    if cardinality(v_ids) > 0 then
        perform jobfeed.notify_changed(v_ids, v_vers);
        -- the kinds as written, not read back: a plan kept from a small table
        -- read every job to find the new ones again
        perform jobfeed.notify_due(d.k, d.n)
           from (select k, count(*)::int as n from unnest(v_kinds) k group by k order by k) d;
    end if;
    return v_alias;
end $$;

-- Complete a job and write the children its handler submitted, in one
-- transaction fenced by generation. False: the lease is lost, nothing written.
create or replace function jobfeed.complete_spawning(
    p_id uuid, p_generation int, p_result jsonb, p_children jsonb, p_now timestamptz default null)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
begin
    if cardinality(jobfeed.lock_held(array[p_id], array[p_generation])) = 0 then
        return false;
    end if;
    perform jobfeed.spawn_children(p_id, p_children, v_now);
    return cardinality(jobfeed.complete_many(array[p_id], array[p_generation], array[p_result], p_now)) = 1;
end $$;

-- The handler returned ctx.wait_for(p_wait): write its children, then the job
-- waits ('waiting', its lease released, the attempt not counted, as a
-- release) until every job in p_wait is final (completed, failed or
-- canceled), and runs again with them in job.children. Its public progress
-- meanwhile is the share of them that is final (settle_waiting). An id that
-- names no job fails it with unknown_dependency, its own id with invalid_wait. Fenced:
-- false when the lease is lost, and nothing is written.
--
-- Races: as submit_waiting, it holds the jobs it waits for (hold_dependencies)
-- before settling, so one finishing now either is seen final here or
-- finds the job_deps rows once we commit and settles the job itself.
-- One generic plan, by key (the default plan cache mode planned its look for
-- unknown ids anew at every call: tests/test_plans.py).
create or replace function jobfeed.wait_for(
    p_id uuid, p_generation int, p_children jsonb, p_wait uuid[], p_now timestamptz default null)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp
set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_alias jsonb;
    v_wait uuid[];
    v_missing text;
    v_kind text;
begin
    if cardinality(jobfeed.lock_held(array[p_id], array[p_generation])) = 0 then
        return false;
    end if;
    -- checked before any child is written: a failed attempt writes none
    if cardinality(p_wait) > 1000 then
        return jobfeed.fail_permanent(p_id, p_generation, 'invalid_wait', 'wait_for names at most 1000 jobs', p_now);
    end if;
    if p_id = any (p_wait) then  -- it would wait for ever
        return jobfeed.fail_permanent(p_id, p_generation, 'invalid_wait', 'a job cannot wait for itself', p_now);
    end if;
    select string_agg(coalesce(w::text, 'null'), ', ') into v_missing from unnest(p_wait) w
     where w is null
        or not (exists (select from jobfeed.jobs j where j.id = w)
                or exists (select from jsonb_array_elements(coalesce(p_children, '[]')) c
                            where c ->> 'id' = w::text));
    if v_missing is not null then
        return jobfeed.fail_permanent(p_id, p_generation, 'unknown_dependency',
                                      format('wait_for names no such job: %s', v_missing), p_now);
    end if;
    v_alias := jobfeed.spawn_children(p_id, p_children, v_now);
    v_wait := array(select coalesce((v_alias ->> w::text)::uuid, w)
                      from unnest(coalesce(p_wait, '{}')) with ordinality u(w, n) order by n);
    perform jobfeed.hold_dependencies(v_wait);
    delete from jobfeed.job_deps d where d.job_id = p_id and d.wait_pos is not null;
    insert into jobfeed.job_deps (job_id, dep_id, wait_pos)
    select p_id, w, min(n) from unnest(v_wait) with ordinality u(w, n) group by w
    on conflict (job_id, dep_id) do update set wait_pos = excluded.wait_pos;
    -- logged first, while the row still holds the attempt's number
    perform jobfeed.finish_attempts(array[p_id], array[p_generation], 'waiting', null, null, v_now);
    update jobfeed.jobs j
       set state = 'waiting', attempts = greatest(j.attempts - 1, 0), lease_until = null
     where j.id = p_id
    returning j.kind into v_kind;
    perform jobfeed.notify_freed(array[v_kind]);  -- it no longer runs: a capped kind's slot frees
    perform jobfeed.settle_waiting(p_id, v_now);
    return true;
end $$;

-- What each just-claimed job's latest wait_for waited for, in its order:
-- {id, kind, target, status, result, error} as the public view shows them
-- (status null: the job is gone). Every claim calls it. PL/pgSQL with one
-- generic plan: as a SQL function, or with a custom plan per call, the query
-- (public_view expanded over the jobs row) was planned again on every claim,
-- which cost more than the claim itself even with nothing to find. That plan
-- is made at a worker's first claim of a job with children, maybe on a small
-- table: without hash and merge joins (or scans) it probes each child by key,
-- where a hash join read every job at each such claim.
create or replace function jobfeed.children_of(p_ids uuid[])
returns table (job_id uuid, children jsonb)
language plpgsql stable security definer set search_path = jobfeed, pg_temp
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_hashjoin = off
set enable_mergejoin = off as $$
begin
    return query
    select d.job_id, jsonb_agg(jsonb_build_object(
               'id', d.dep_id, 'kind', v -> 'kind', 'target', v -> 'target', 'status', v -> 'status',
               'result', v -> 'result', 'error', v -> 'error') order by d.wait_pos)
      from jobfeed.job_deps d
      left join jobfeed.jobs j on j.id = d.dep_id
      cross join lateral (select case when j.id is not null then jobfeed.public_view(j) end as v) pv
     where d.job_id = any (p_ids) and d.wait_pos is not null
     group by d.job_id;
end $$;
