-- The common submission in one SQL statement: a target nobody holds becomes a
-- new job, with one INSERT ... ON CONFLICT (the dedupe index decides) and its
-- two notifications, without a PL/pgSQL statement. Everything else (a target
-- already held, an unknown kind, a submission with a problem, a race with the
-- holder finishing, a kind's on_duplicate rerun/replace for a held target) is
-- submit_v2's, which answers or raises as it always did. No requester, as
-- submit_v2: a "requester"-deduped kind's submission here never shares.
-- p_view: answer the job's public view too (the API does; Queue.submit does
-- not, and then no view is built).
-- One generic plan, from a connection's first submit on: under the default
-- plan cache mode its second to sixth submits each planned the statement
-- anew, the sixth twice (custom plans, then the generic one to compare),
-- costing more than running it. The plan is an index probe whatever the
-- table holds: the arbiter is the dedupe index, the kind a key look-up.
create or replace function jobfeed.submit_quick(
    p_kind text, p_target text, p_payload jsonb default '{}', p_run_after timestamptz default null,
    p_max_payload int default 65536, p_now timestamptz default null,
    p_priority int default null, p_concurrency_key text default null, p_view boolean default true)
returns table (id uuid, created boolean, view jsonb)
language sql security definer set search_path = jobfeed, pg_temp set plan_cache_mode = force_generic_plan as $$
    with ins as (
        insert into jobfeed.jobs as j (kind, target, payload, max_attempts, run_after, created_at, updated_at,
                                       priority, concurrency_key, dedupe_scope)
        select p_kind, p_target, coalesce(p_payload, '{}'), k.max_attempts, coalesce(p_run_after, t.now),
               t.now, t.now, coalesce(p_priority, k.priority), p_concurrency_key,
               jobfeed.dedupe_scope(k.dedupe, null)
          from jobfeed.kinds k, (select jobfeed.clock(p_now) as now) t
         where k.kind = p_kind
           and jobfeed.submission_problem(p_target, p_payload, p_max_payload) is null
           and jobfeed.key_problem(p_concurrency_key) is null
        -- the arbiter's check comes before the row is written: a held target
        -- costs one probe of the dedupe index here
        on conflict (kind, target, dedupe_scope) where state not in ('completed', 'failed', 'canceled') do nothing
        returning j.id, j.version, case when p_view then jobfeed.public_view(j) end as view
    ), note as (
        select jobfeed.notify_changed_one(i.id, i.version), jobfeed.notify_due(p_kind, 1) from ins i
    )
    select i.id, true, i.view from ins i, note
    union all
    select s.id, s.created, case when p_view then s.view end
      from jobfeed.submit_v2(p_kind, p_target, p_payload, p_run_after, p_max_payload, p_now, p_priority,
                             p_concurrency_key) s
     where not exists (select from ins)
$$;
