-- Claiming jobs, and when the next one will be due.

-- Claim up to p_limit jobs of the given kinds for worker p_worker: due queued jobs
-- and running jobs whose lease expired (their worker died). First fails expired
-- jobs with no attempts left. Each claim bumps attempts and generation, sets the
-- lease (the kind's unless p_lease is given).
-- Selection is one kind per statement, in a sub-select with LIMIT and SKIP LOCKED,
-- so no more rows are locked than are claimed and concurrent claimers never wait.
create or replace function jobfeed.claim(
    p_kinds text[], p_limit int, p_worker text, p_lease interval default null,
    p_now timestamptz default null)
returns table (id uuid, kind text, target text, payload jsonb, attempts int, max_attempts int,
               generation int, lease_until timestamptz, checkpoint jsonb)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_kind text;
    v_lease interval;
    v_paused boolean;
    v_left int := p_limit;
    v_got int;
    v_expired boolean;
    v_reclaimed uuid[];
begin
    if p_limit is null or p_limit < 1 or p_kinds is null then
        return;
    end if;
    -- Expired leases are rare: one index probe decides whether to look for them
    -- at all, which spares the common claim two statements.
    v_expired := exists (select from jobfeed.jobs e
                          where e.kind = any (p_kinds) and e.state = 'running' and e.lease_until < v_now);
    if v_expired then
        perform jobfeed.fail_expired(p_kinds, v_now);
    end if;
    foreach v_kind in array p_kinds loop
        exit when v_left < 1;
        select coalesce(p_lease, k.lease), k.paused into v_lease, v_paused from jobfeed.kinds k where k.kind = v_kind;
        v_lease := coalesce(v_lease, p_lease, interval '5 minutes');
        -- A paused kind: nothing of it is claimed, not even an expired lease
        -- (its running jobs finish; the admin routes alone write the flag).
        continue when v_paused;

        -- Expired leases first: those jobs have waited longest. Their last
        -- attempt is logged (the row still says who ran it), then they are
        -- claimed anew with the due queued jobs, in one UPDATE (for a reclaimed
        -- job it leaves state, start, version and updated_at as they are). Ids
        -- are picked into an array so the UPDATE finds each row by primary key:
        -- a join with the picking query is planned (LIMIT being a parameter
        -- here) as a scan of the whole table.
        v_reclaimed := '{}';
        if v_expired then
            v_reclaimed := array(
                select e.id from jobfeed.jobs e
                 where e.kind = v_kind and e.state = 'running' and e.lease_until < v_now
                   and e.attempts < e.max_attempts
                 order by e.lease_until
                 limit v_left
                 for update skip locked);
            if cardinality(v_reclaimed) > 0 then
                perform jobfeed.finish_attempts(v_reclaimed, null, 'lease_expired', 'lease_expired',
                                                'the worker stopped renewing its lease', v_now);
            end if;
        end if;

        -- The rows go straight to the caller (RETURN QUERY), with one NOTIFY
        -- per chunk for the lot.
        return query
            with upd as (
                update jobfeed.jobs j
                   set state = 'running', attempts = j.attempts + 1, generation = j.generation + 1,
                       lease_until = v_now + v_lease, worker_id = p_worker, claimed_at = v_now,
                       started_at = coalesce(j.started_at, v_now),
                       -- the first claim is the only one the public sees (queued -> processing)
                       version = j.version + (j.generation = 0)::int,
                       updated_at = case when j.generation = 0 then v_now else j.updated_at end
                 where j.id = any (v_reclaimed || array(
                           select q.id from jobfeed.jobs q
                            where q.kind = v_kind and q.state = 'queued' and q.run_after <= v_now
                            -- jobs_queued_priority: the scan stops at the limit
                            order by q.priority desc, q.run_after
                            limit v_left - cardinality(v_reclaimed)
                            for update skip locked))
                returning j.*
            ), note as (
                select jobfeed.notify_changed(array_agg(u.id), array_agg(u.version)) from upd u
            )
            select u.id, u.kind, u.target, u.payload, u.attempts, u.max_attempts, u.generation,
                   u.lease_until, u.checkpoint
              from upd u, note;
        get diagnostics v_got = row_count;
        v_left := v_left - v_got;
    end loop;
end $$;

-- When the next job of these kinds becomes claimable (a queued job's run_after or
-- a running job's lease end); null when there is none. Workers sleep until then.
-- Paused kinds are left out: nothing of them is claimable until resumed
-- (which notifies jobfeed_due).
create or replace function jobfeed.next_due(p_kinds text[])
returns timestamptz language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select min(t) from (
        select (select min(j.run_after) from jobfeed.jobs j where j.kind = k and j.state = 'queued') as t
          from unnest(p_kinds) k
         where not exists (select from jobfeed.kinds p where p.kind = k and p.paused)
        union all
        select (select min(j.lease_until) from jobfeed.jobs j where j.kind = k and j.state = 'running')
          from unnest(p_kinds) k
         where not exists (select from jobfeed.kinds p where p.kind = k and p.paused)
    ) s
$$;
