-- Claiming jobs, and when the next one will be due.

-- Claim up to p_limit jobs of one kind for worker p_worker: running jobs whose
-- lease expired (their worker died; only looked for when p_expired) and due
-- queued jobs. Each claim bumps attempts and generation and sets the lease
-- (the kind's unless p_lease is given), which is returned with each row so the
-- worker renews at the pace of the lease it was actually granted, and with
-- each row's run_after, created_at and traceparent, which the claim does not
-- change (what the worker's timings and spans read, without a second look).
-- One kind per statement, in a sub-select with LIMIT and SKIP LOCKED, so no
-- more rows are locked than are claimed and concurrent claimers never wait.
-- Without sequential scans or sorts: PL/pgSQL keeps the plans of a worker's
-- first claims, and on a young table (not yet analyzed, every estimate a row or
-- two) those read every row to find the picked ids, or every queued row of the
-- kind through jobs_queued_due and sort them all to keep the first p_limit
-- (LockRows sits between the Limit and the Sort, so the sort is not bounded):
-- a cost growing with the backlog until autovacuum analyzes. jobs_queued_priority
-- has the claim's order; claim_limited_v2, called from here, runs under the same
-- settings, and its sorts of a few candidates remain (nothing else gives their order).
-- (claim_kind, unreleased, answered without the last three columns.)
drop function if exists jobfeed.claim_kind(text, int, text, interval, timestamptz, boolean);
create or replace function jobfeed.claim_kind_v2(
    p_kind text, p_limit int, p_worker text, p_lease interval, p_now timestamptz, p_expired boolean)
returns table (id uuid, kind text, target text, payload jsonb, attempts int, max_attempts int,
               generation int, lease_until timestamptz, checkpoint jsonb, lease interval,
               run_after timestamptz, created_at timestamptz, traceparent text)
language plpgsql set enable_seqscan = off set enable_sort = off as $$
#variable_conflict use_column
declare
    v_lease interval;
    v_paused boolean;
    v_max_running int;
    v_max_per_key int;
    v_rate_count int;
    v_rate_period interval;
    v_reclaimed uuid[] := '{}';
begin
    select coalesce(p_lease, k.lease), k.paused, k.max_running, k.max_running_per_key, k.rate_count, k.rate_period
      into v_lease, v_paused, v_max_running, v_max_per_key, v_rate_count, v_rate_period
      from jobfeed.kinds k where k.kind = p_kind;
    v_lease := coalesce(v_lease, p_lease, interval '5 minutes');
    -- A paused kind: nothing of it is claimed, not even an expired lease (its
    -- running jobs finish; only the admin routes write the flag).
    if v_paused then
        return;
    end if;
    if v_max_running is not null or v_max_per_key is not null or v_rate_count is not null then
        return query select * from jobfeed.claim_limited_v2(p_kind, p_limit, p_worker, v_lease, p_now, p_expired,
                                                            v_max_running, v_max_per_key, v_rate_count, v_rate_period);
        return;
    end if;

    -- Expired leases first: those jobs have waited longest. Their last
    -- attempt is logged (the row still says who ran it), then they are
    -- claimed anew with the due queued jobs, in one UPDATE (for a reclaimed
    -- job it leaves state, start, version and updated_at as they are). Ids
    -- are picked into an array so the UPDATE finds each row by primary key:
    -- a join with the picking query is planned (LIMIT being a parameter
    -- here) as a scan of the whole table.
    if p_expired then
        v_reclaimed := array(
            select e.id from jobfeed.jobs e
             where e.kind = p_kind and e.state = 'running' and e.lease_until < p_now
               and e.attempts < e.max_attempts
             order by e.lease_until
             limit p_limit
             for update skip locked);
        if cardinality(v_reclaimed) > 0 then
            perform jobfeed.end_expired_attempts(v_reclaimed, p_now);
        end if;
    end if;

    -- The rows go straight to the caller (RETURN QUERY), with one NOTIFY
    -- per chunk for the lot.
    return query
        with upd as (
            update jobfeed.jobs j
               set state = 'running', attempts = j.attempts + 1, generation = j.generation + 1,
                   lease_until = p_now + v_lease, worker_id = p_worker, claimed_at = p_now,
                   started_at = coalesce(j.started_at, p_now),
                   -- the first claim is the only one the public sees (queued -> processing)
                   version = j.version + (j.generation = 0)::int,
                   updated_at = case when j.generation = 0 then p_now else j.updated_at end
             where j.id = any (v_reclaimed || array(
                       select q.id from jobfeed.jobs q
                        where q.kind = p_kind and q.state = 'queued' and q.run_after <= p_now
                        -- higher priority first, then the earlier run_after, then the id (queue_positions
                        -- counts in this order): jobs_queued_priority,
                        -- so the scan stops at the limit
                        order by q.priority desc, q.run_after, q.id
                        limit p_limit - cardinality(v_reclaimed)
                        for update skip locked))
            -- only what the caller reads: a CTE keeps whole rows, payloads and results
            -- included, for every job claimed
            returning j.id, j.kind, j.target, j.payload, j.attempts, j.max_attempts, j.generation,
                      j.lease_until, j.checkpoint, j.run_after, j.created_at, j.traceparent, j.version
        ), note as (
            select jobfeed.notify_changed(array_agg(u.id), array_agg(u.version)) from upd u
        )
        select u.id, u.kind, u.target, u.payload, u.attempts, u.max_attempts, u.generation,
               u.lease_until, u.checkpoint, v_lease, u.run_after, u.created_at, u.traceparent
          from upd u, note;
end $$;

-- Claim up to p_limit jobs of the given kinds, the free slots shared fairly
-- among them, in rounds: each kind still in play gets an equal share of the
-- slots left (one each when fewer slots than kinds are left: the kinds named
-- first get them, and workers rotate the array); a kind that could not fill
-- its share leaves the game, and what it left is shared in the next round. A
-- backlog in one kind thus never starves another. One kind per statement; at
-- most one round more than there are kinds. Fails first the expired jobs with
-- no attempts left. Returns each job with the lease it was granted, and what
-- the worker's timings and spans read (claim_kind_v2's last three columns, as
-- the claim wrote them: a job inserted after the caller's statement began is
-- not in that statement's snapshot, so claim_v3 cannot read them again).
create or replace function jobfeed.claim_kinds(
    p_kinds text[], p_limit int, p_worker text, p_lease interval default null,
    p_now timestamptz default null)
returns table (id uuid, kind text, target text, payload jsonb, attempts int, max_attempts int,
               generation int, lease_until timestamptz, checkpoint jsonb, lease interval,
               run_after timestamptz, created_at timestamptz, traceparent text)
-- enable_seqscan off: the plan a session keeps for the expired-lease probe,
-- made on a small table, may be a scan of it (PostgreSQL 15 made one)
language plpgsql security definer set search_path = jobfeed, pg_temp set enable_seqscan = off as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_kinds text[];
    v_more text[];
    v_kind text;
    v_left int := p_limit;
    v_share int;
    v_want int;
    v_got int;
    v_expired boolean;
begin
    if p_limit is null or p_limit < 1 or p_kinds is null then
        return;
    end if;
    -- each kind once, in the order given
    v_kinds := array(select x from unnest(p_kinds) with ordinality u(x, n)
                      where x is not null group by x order by min(n));
    -- Expired leases are rare: one index probe decides whether to look for them
    -- at all, which spares the common claim two statements.
    v_expired := exists (select from jobfeed.jobs e
                          where e.kind = any (v_kinds) and e.state = 'running' and e.lease_until < v_now);
    if v_expired then
        perform jobfeed.fail_expired(v_kinds, v_now);
    end if;
    -- Limited kinds' turns (see claim_limited_v2), taken in one order by everyone.
    for v_kind in select k.kind from jobfeed.kinds k
                   where k.kind = any (v_kinds) and not k.paused
                     and (k.max_running is not null or k.max_running_per_key is not null or k.rate_count is not null)
                   order by k.kind loop
        perform jobfeed.limits_lock(v_kind);
    end loop;
    while v_left > 0 and cardinality(v_kinds) > 0 loop
        v_share := greatest(v_left / cardinality(v_kinds), 1);
        v_more := '{}';
        foreach v_kind in array v_kinds loop
            exit when v_left < 1;
            v_want := least(v_share, v_left);
            return query select *
                           from jobfeed.claim_kind_v2(v_kind, v_want, p_worker, p_lease, v_now, v_expired) c;
            get diagnostics v_got = row_count;
            v_left := v_left - v_got;
            if v_got = v_want then
                v_more := v_more || v_kind;  -- it may have more
            end if;
        end loop;
        v_kinds := v_more;
    end loop;
end $$;

-- claim_kinds without the last three columns (workers before claim_v3 call it).
create or replace function jobfeed.claim_v2(
    p_kinds text[], p_limit int, p_worker text, p_lease interval default null,
    p_now timestamptz default null)
returns table (id uuid, kind text, target text, payload jsonb, attempts int, max_attempts int,
               generation int, lease_until timestamptz, checkpoint jsonb, lease interval)
language sql security definer set search_path = jobfeed, pg_temp as $$
    select c.id, c.kind, c.target, c.payload, c.attempts, c.max_attempts, c.generation, c.lease_until,
           c.checkpoint, c.lease
      from jobfeed.claim_kinds(p_kinds, p_limit, p_worker, p_lease, p_now) c
$$;

-- The worker's claim: claim_kinds' jobs, each with the signals it awaited
-- (signals_of), its children (children_of) and what job_timings reads (how
-- long it waited once due and how old it is, by the database's clock, for the
-- workers' histograms; the submitter's traceparent, for the run's span), in
-- one call. One kind with no expired lease (the common claim) goes straight
-- to claim_kind_v2, which leaves claim_kinds' set-up out: sharing among kinds, the
-- look for expired leases and the limited kinds' locks (claim_limited_v2 takes
-- its kind's own). Each function layer costs more than the claim of a job
-- itself when every claim is a transaction of its own: so one statement with
-- a kept generic plan, and signals_of and children_of called only when a
-- claimed job has any. Without sequential scans: that kept plan is made at a
-- session's first claim, and one made while job_deps or job_signals was small
-- would read the whole table at every claim once workflows have filled it
-- (until an analyze replans it); their primary keys start with job_id.
-- Its commit waits for the WAL flush, as every write's does: a claim a
-- database crash lost would be made again under the same generation, and
-- the first run, still going, would be fenced out by nothing (its outcome
-- taken for the second's, a job seen processing shown queued again).
create or replace function jobfeed.claim_v3(
    p_kinds text[], p_limit int, p_worker text, p_lease interval default null)
returns table (id uuid, kind text, target text, payload jsonb, attempts int, max_attempts int,
               generation int, lease_until timestamptz, checkpoint jsonb, lease interval,
               signals jsonb, children jsonb, wait double precision, age double precision, traceparent text)
language plpgsql security definer set search_path = jobfeed, pg_temp
set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$
#variable_conflict use_column
begin
    return query
    with one as materialized (
        select p_kinds[1] as kind
         where cardinality(p_kinds) = 1 and p_kinds[1] is not null and p_limit > 0
           -- the earliest expired lease, in jobs_running_lease's order: as an
           -- EXISTS, the plan kept from a worker's first claim on an empty
           -- table took the index of unfinished jobs by kind and read every
           -- queued and running job of the kind at each claim
           and (select e.lease_until from jobfeed.jobs e
                 where e.kind = p_kinds[1] and e.state = 'running' and e.lease_until < now()
                 order by e.lease_until limit 1) is null
    ), c as materialized (
        select v.*, 0::bigint as n
          from jobfeed.claim_kind_v2(p_kinds[1], p_limit, p_worker, p_lease, now(), false) v
         where exists (select from one)
        union all
        select v.*
          from jobfeed.claim_kinds(p_kinds, p_limit, p_worker, p_lease) with ordinality v
         where not exists (select from one)
    ), ids as materialized (
        select array(select c.id from c) as a
    ), s as materialized (  -- materialized: the exists stays a one-time filter, the call is skipped
        select * from jobfeed.signals_of((select ids.a from ids))
         where exists (select from jobfeed.job_signals x where x.job_id = any ((select ids.a from ids)::uuid[]))
    ), w as materialized (
        select * from jobfeed.children_of((select ids.a from ids))
         where exists (select from jobfeed.job_deps x
                        where x.job_id = any ((select ids.a from ids)::uuid[]) and x.wait_pos is not null)
    )
    select c.id, c.kind, c.target, c.payload, c.attempts, c.max_attempts, c.generation, c.lease_until,
           c.checkpoint, c.lease, s.signals, w.children,
           extract(epoch from now() - c.run_after)::float8, extract(epoch from now() - c.created_at)::float8,
           c.traceparent
      from c left join s on s.job_id = c.id left join w on w.job_id = c.id
     order by c.n;
end $$;

-- v0.1.0's claim: claim_v2 without the lease column.
create or replace function jobfeed.claim(
    p_kinds text[], p_limit int, p_worker text, p_lease interval default null,
    p_now timestamptz default null)
returns table (id uuid, kind text, target text, payload jsonb, attempts int, max_attempts int,
               generation int, lease_until timestamptz, checkpoint jsonb)
language sql security definer set search_path = jobfeed, pg_temp as $$
    select c.id, c.kind, c.target, c.payload, c.attempts, c.max_attempts, c.generation, c.lease_until, c.checkpoint
      from jobfeed.claim_v2(p_kinds, p_limit, p_worker, p_lease, p_now) c
$$;

-- next_due (below) for a worker whose claim at p_claimed_at took fewer jobs than it
-- asked for: a job of a kind with max_running_per_key that was due by then and
-- is still queued was left because its key is full (or another claimer has
-- it). It becomes claimable when a slot of its key frees, which notifies
-- jobfeed_due (notify_freed), not at a time: counted as due now, it would
-- have the worker claim in a loop. So for those kinds only jobs due after
-- p_claimed_at count (one index probe). p_claimed_at null: next_due.
-- Asked after most claims: one generic plan, as a custom plan per call cost
-- more to plan than to run.
create or replace function jobfeed.next_due_v2(p_kinds text[], p_claimed_at timestamptz)
returns timestamptz language sql stable security definer set search_path = jobfeed, pg_temp
set plan_cache_mode = force_generic_plan as $$
    select min(t) from (
        -- a kind at its max_running waits for a running job (below); one at its
        -- rate waits for its oldest start in the window to leave it
        select case
                 when k.max_running is not null
                      and (select count(*) from jobfeed.jobs r where r.kind = u.k and r.state = 'running')
                          >= k.max_running then null
                 when k.rate_count is not null
                      and (select coalesce(sum(s.n), 0) from jobfeed.kind_starts s
                            where s.kind = u.k and s.at > now() - k.rate_period) >= k.rate_count
                   then greatest(q.t, (select min(s.at) + k.rate_period from jobfeed.kind_starts s
                                        where s.kind = u.k and s.at > now() - k.rate_period))
                 else q.t end as t
          from unnest(p_kinds) u(k)
          left join jobfeed.kinds k on k.kind = u.k
          cross join lateral (select min(j.run_after) as t from jobfeed.jobs j
                               where j.kind = u.k and j.state = 'queued'
                                 and j.run_after > coalesce(case when k.max_running_per_key is not null
                                                                 then p_claimed_at end, '-infinity')) q
         where not coalesce(k.paused, false)
        union all
        select (select min(j.lease_until) from jobfeed.jobs j where j.kind = u.k and j.state = 'running')
          from unnest(p_kinds) u(k)
         where not exists (select from jobfeed.kinds p where p.kind = u.k and p.paused)
    ) s
$$;

-- When the next job of these kinds becomes claimable (a queued job's run_after or
-- a running job's lease end); null when there is none. Workers sleep until then.
-- Paused kinds are left out: nothing of them is claimable until resumed
-- (which notifies jobfeed_due).
create or replace function jobfeed.next_due(p_kinds text[])
returns timestamptz language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select jobfeed.next_due_v2(p_kinds, null)
$$;

-- How long each just-claimed job waited once due, and how old it is (seconds,
-- by the database's clock): for the workers' wait and end-to-end histograms;
-- and the submitter's traceparent, for the run's span. The release before's
-- workers read it after each claim (claim_v3 answers the same with the claim);
-- a job no longer here is left out. By key always (see claim_kind_v2).
create or replace function jobfeed.job_timings(p_ids uuid[])
returns table (id uuid, kind text, wait double precision, age double precision, traceparent text)
language sql stable security definer set search_path = jobfeed, pg_temp set enable_seqscan = off as $$
    select j.id, j.kind, extract(epoch from j.claimed_at - j.run_after)::float8,
           extract(epoch from now() - j.created_at)::float8, j.traceparent
      from jobfeed.jobs j
     where j.id = any (p_ids)
$$;

-- The submitter's trace context, stored right after the submit (only when the
-- submit was traced). Malformed values are not stored.
create or replace function jobfeed.set_traceparent(p_id uuid, p_traceparent text)
returns void language sql security definer set search_path = jobfeed, pg_temp as $$
    update jobfeed.jobs j set traceparent = p_traceparent
     where j.id = p_id and p_traceparent ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$'
$$;
