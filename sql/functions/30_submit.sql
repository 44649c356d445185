-- Registering kinds and submitting jobs.

-- Record a kind's settings. Workers, which run the kind, overwrite; other
-- processes (the API, `jobfeed submit`) pass p_overwrite => false and only add
-- a kind nobody has registered yet, so their defaults never undo a worker's.
create or replace function jobfeed.register_kind_v2(
    p_kind text, p_max_attempts int default 5, p_lease interval default '5 minutes',
    p_backoff interval[] default '{1 minute,5 minutes,15 minutes,60 minutes}',
    p_jitter double precision default 0.1, p_description text default '', p_overwrite boolean default true,
    p_priority int default 0, p_max_running int default null, p_max_running_per_key int default null,
    p_rate_count int default null, p_rate_period interval default null)
returns void language sql security definer set search_path = jobfeed, pg_temp as $$
    -- `paused` is never written here: only the admin routes set it.
    insert into jobfeed.kinds as k (kind, max_attempts, lease, backoff, jitter, description, priority,
                                    max_running, max_running_per_key, rate_count, rate_period)
    values (p_kind, p_max_attempts, p_lease, p_backoff, p_jitter, p_description, coalesce(p_priority, 0),
            p_max_running, p_max_running_per_key, p_rate_count, p_rate_period)
    on conflict (kind) do update
       set max_attempts = excluded.max_attempts, lease = excluded.lease, backoff = excluded.backoff,
           jitter = excluded.jitter, description = excluded.description, priority = excluded.priority,
           max_running = excluded.max_running, max_running_per_key = excluded.max_running_per_key,
           rate_count = excluded.rate_count, rate_period = excluded.rate_period, updated_at = now()
     where p_overwrite
       -- only workers (they run the kind) and the owner; the API role only adds kinds
       and (pg_has_role(session_user, 'jobfeed_worker', 'usage')
            or pg_has_role(session_user, (select n.nspowner from pg_namespace n where n.nspname = 'jobfeed'),
                           'usage'))
       and (k.max_attempts, k.lease, k.backoff, k.jitter, k.description, k.priority, k.max_running,
            k.max_running_per_key, k.rate_count, k.rate_period)
           is distinct from (excluded.max_attempts, excluded.lease, excluded.backoff,
                             excluded.jitter, excluded.description, excluded.priority, excluded.max_running,
                             excluded.max_running_per_key, excluded.rate_count, excluded.rate_period)
$$;

-- v0.1.0's register_kind: the flow settings left as they were (a kind it adds
-- gets the defaults: priority 0, no limits).
create or replace function jobfeed.register_kind(
    p_kind text, p_max_attempts int default 5, p_lease interval default '5 minutes',
    p_backoff interval[] default '{1 minute,5 minutes,15 minutes,60 minutes}',
    p_jitter double precision default 0.1, p_description text default '', p_overwrite boolean default true)
returns void language sql security definer set search_path = jobfeed, pg_temp as $$
    insert into jobfeed.kinds as k (kind, max_attempts, lease, backoff, jitter, description)
    values (p_kind, p_max_attempts, p_lease, p_backoff, p_jitter, p_description)
    on conflict (kind) do update
       set max_attempts = excluded.max_attempts, lease = excluded.lease, backoff = excluded.backoff,
           jitter = excluded.jitter, description = excluded.description, updated_at = now()
     where p_overwrite
       and (pg_has_role(session_user, 'jobfeed_worker', 'usage')
            or pg_has_role(session_user, (select n.nspowner from pg_namespace n where n.nspname = 'jobfeed'),
                           'usage'))
       and (k.max_attempts, k.lease, k.backoff, k.jitter, k.description)
           is distinct from (excluded.max_attempts, excluded.lease, excluded.backoff,
                             excluded.jitter, excluded.description)
$$;

-- Submit, deduplicated by (kind, target): returns the new job (created) or the
-- unfinished one that already holds the target, with its public view (what an
-- HTTP submitter is answered, without a second query). Look, insert, look
-- again: whatever finishes or starts in between, the caller gets a live job.
-- p_requester is the identity a "requester"-deduped kind shares jobs by (null:
-- this submission never shares); "global" kinds ignore it.
create or replace function jobfeed.submit_v3(
    p_kind text, p_target text, p_payload jsonb default '{}', p_run_after timestamptz default null,
    p_max_payload int default 65536, p_now timestamptz default null,
    p_priority int default null, p_concurrency_key text default null, p_requester text default null)
returns table (id uuid, created boolean, view jsonb)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_payload jsonb := coalesce(p_payload, '{}'::jsonb);
    v_max int;
    v_priority int;
    v_problem text[] := coalesce(jobfeed.submission_problem(p_target, p_payload, p_max_payload),
                                 jobfeed.key_problem(p_concurrency_key));
    v_scope text;
    v_policy text;
    v_job jobfeed.jobs;
begin
    select k.max_attempts, coalesce(p_priority, k.priority), jobfeed.dedupe_scope(k.dedupe, p_requester),
           k.on_duplicate
      into v_max, v_priority, v_scope, v_policy
      from jobfeed.kinds k where k.kind = p_kind;
    if not found then
        perform jobfeed.raise_error('JF422', 'unknown_kind', format('unknown kind %L', p_kind));
    end if;
    if v_problem is not null then
        perform jobfeed.raise_error(v_problem[1], v_problem[2], v_problem[3]);
    end if;
    loop
        -- Look first: a duplicate (the common case for a shared target) is then
        -- one index probe, without an INSERT's set-up (in-function: 58 -> 24 us).
        select j.* into v_job from jobfeed.jobs j
         where j.kind = p_kind and j.target = p_target and j.dedupe_scope = v_scope
           and j.state not in ('completed', 'failed', 'canceled');
        if found and v_policy in ('rerun', 'replace') then
            -- the duplicate's payload goes to the job (see take_duplicate)
            continue when not jobfeed.take_duplicate(v_job.id, v_policy, v_payload, v_now);
            select j.* into v_job from jobfeed.jobs j where j.id = v_job.id;
        end if;
        if found then
            return query select v_job.id, false, jobfeed.public_view(v_job);
            return;
        end if;
        insert into jobfeed.jobs as j (kind, target, payload, max_attempts, run_after, created_at, updated_at,
                                       priority, concurrency_key, dedupe_scope)
        values (p_kind, p_target, v_payload, v_max, coalesce(p_run_after, v_now), v_now, v_now,
                v_priority, p_concurrency_key, v_scope)
        on conflict (kind, target, dedupe_scope) where state not in ('completed', 'failed', 'canceled') do nothing
        returning j.* into v_job;
        if v_job.id is not null then
            perform jobfeed.notify_changed(array[v_job.id], array[v_job.version]);
            perform jobfeed.notify_due(p_kind, 1);
            return query select v_job.id, true, jobfeed.public_view(v_job);
            return;
        end if;
        -- Another submitter took the target between our look and our insert: look again.
    end loop;
end $$;

-- submit_v3 without a requester (for a "requester"-deduped kind: never shares).
create or replace function jobfeed.submit_v2(
    p_kind text, p_target text, p_payload jsonb default '{}', p_run_after timestamptz default null,
    p_max_payload int default 65536, p_now timestamptz default null,
    p_priority int default null, p_concurrency_key text default null)
returns table (id uuid, created boolean, view jsonb)
language sql security definer set search_path = jobfeed, pg_temp as $$
    select s.id, s.created, s.view from jobfeed.submit_v3(p_kind, p_target, p_payload, p_run_after, p_max_payload,
                                                          p_now, p_priority, p_concurrency_key) s
$$;

-- Whether the first target a batch would insert (the least) is held by an
-- unfinished job of the kind, under the global dedupe: one probe of the dedupe
-- index, so that a batch re-sent or made of duplicates skips trying a plain
-- insert that would trip the index (a subtransaction begun and rolled back).
create or replace function jobfeed.batch_first_target_held(p_kind text, p_targets text[])
returns boolean language sql stable as $$
    select exists (select from jobfeed.jobs j
                    where j.kind = p_kind and j.target = (select min(t) from unnest(p_targets) t)
                      and j.dedupe_scope = '' and j.state not in ('completed', 'failed', 'canceled'))
$$;

-- Submit many jobs of one kind in one statement (an outbox flush, a bulk import).
-- Rows go in in target order: two batches racing over the same targets wait on
-- the dedupe index in one global order, never in a cycle.
-- Row n of the answer is for p_targets[n]: the new job, or the unfinished one
-- that already held that target (also when the same target appears twice in
-- the batch: the first occurrence creates, the rest share).
create or replace function jobfeed.submit_many_v2(
    p_kind text, p_targets text[], p_payloads jsonb[] default null, p_run_after timestamptz default null,
    p_max_payload int default 65536, p_now timestamptz default null,
    p_priority int default null, p_concurrency_key text default null)
returns table (n int, id uuid, created boolean)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_max int;
    v_priority int;
    v_problem text[];
    v_new_ids uuid[];
    v_new_targets text[];
    v_pending text[];
    v_ids uuid[];
    v_created boolean[];
    v_made uuid[];
    v_held uuid[];
    v_dedupe text;
    v_policy text;
    v_dup record;
    v_taken uuid[] := '{}';  -- jobs that took their duplicates' payload
    v_lost uuid[];
begin
    select k.max_attempts, coalesce(p_priority, k.priority), k.dedupe, k.on_duplicate
      into v_max, v_priority, v_dedupe, v_policy
      from jobfeed.kinds k where k.kind = p_kind;
    if not found then
        perform jobfeed.raise_error('JF422', 'unknown_kind', format('unknown kind %L', p_kind));
    end if;
    if p_targets is null then
        perform jobfeed.raise_error('JF422', 'invalid_batch', 'targets are required');
    end if;
    if p_payloads is not null and cardinality(p_payloads) <> cardinality(p_targets) then
        perform jobfeed.raise_error('JF422', 'invalid_batch', 'targets and payloads differ in number');
    end if;
    if v_dedupe = 'requester' then
        -- No requester here: under dedupe="requester" no item shares, so each is
        -- a new job (submit_v3 checks it; nothing to wait on in the index).
        return query
            select t.n::int, s.id, s.created
              from unnest(p_targets, p_payloads) with ordinality t(target, payload, n),
                   lateral jobfeed.submit_v3(p_kind, t.target, t.payload, p_run_after, p_max_payload, p_now,
                                             p_priority, p_concurrency_key) s
             order by t.n;
        return;
    end if;
    -- the first item with a problem refuses the whole batch
    v_problem := jobfeed.batch_problem(p_targets, p_payloads, p_max_payload, p_concurrency_key);
    if v_problem is not null then
        perform jobfeed.raise_error(v_problem[1], v_problem[2], v_problem[3]);
    end if;

    v_new_ids := '{}';
    v_new_targets := '{}';
    -- Item n's job, if it is new, gets id v_made[n].
    v_made := jobfeed.uuid_v7_batch(cardinality(p_targets));

    if (select count(distinct t) from unnest(p_targets) t) = cardinality(p_targets)
       and not jobfeed.batch_first_target_held(p_kind, p_targets) then
        -- No target repeated, the first not held: try new work first, a plain
        -- INSERT, sparing ON CONFLICT's speculative insertion (a quarter of the
        -- insert's cost) and a look per item beforehand. Any target held, or
        -- taken meanwhile by a concurrent submitter, trips the unique index;
        -- the paths below then take over.
        begin
            insert into jobfeed.jobs (id, kind, target, payload, max_attempts, run_after, created_at, updated_at,
                                      priority, concurrency_key)
            select v_made[t.n], p_kind, t.target, coalesce(t.payload, '{}'), v_max,
                   coalesce(p_run_after, v_now), v_now, v_now, v_priority, p_concurrency_key
              from unnest(p_targets, p_payloads) with ordinality t(target, payload, n)
             order by t.target, t.n;
            v_new_ids := v_made;
            v_ids := v_made;
            v_created := array_fill(true, array[cardinality(p_targets)]);
        exception when unique_violation then
            null;
        end;
    end if;

    if v_ids is null then
        -- Who holds each target: an index probe per item, as a scalar
        -- sub-select (`target = any (p_targets)`, or a join, was planned with
        -- stale statistics or as a generic plan as a scan of every job of the
        -- kind). All held (a re-sent batch, a burst of duplicates): share.
        v_held := array(select (select j.id from jobfeed.jobs j
                                 where j.kind = p_kind and j.target = t.target and j.dedupe_scope = ''
                                   and j.state not in ('completed', 'failed', 'canceled'))
                          from unnest(p_targets) with ordinality t(target, n)
                         order by t.n);
        if array_position(v_held, null) is null then
            v_ids := v_held;
            v_created := array_fill(false, array[cardinality(p_targets)]);
        end if;
    end if;

    v_pending := null;  -- first pass: every target
    <<handover>>
    loop
        while v_ids is null loop
            with ins as (
                insert into jobfeed.jobs as j (id, kind, target, payload, max_attempts, run_after, created_at, updated_at,
                                               priority, concurrency_key)
                select v_made[t.n], p_kind, t.target,
                       coalesce(t.payload, '{}'), v_max, coalesce(p_run_after, v_now), v_now, v_now,
                       v_priority, p_concurrency_key
                  from unnest(p_targets, p_payloads) with ordinality t(target, payload, n)
                 where v_pending is null or t.target = any (v_pending)
                 order by t.target, t.n
                on conflict (kind, target, dedupe_scope) where state not in ('completed', 'failed', 'canceled') do nothing
                returning j.id, j.target
            )
            select v_new_ids || coalesce(array_agg(ins.id), '{}'), v_new_targets || coalesce(array_agg(ins.target), '{}')
              into v_new_ids, v_new_targets from ins;
            -- Each target's job: the one we made (hash-joined), else the unfinished
            -- one that holds it (a probe of the dedupe index, as above).
            select array_agg(r.id order by r.n), array_agg(r.created order by r.n) into v_ids, v_created
              from (select t.n,
                           coalesce(i.id, (select j.id from jobfeed.jobs j
                                            where j.kind = p_kind and j.target = t.target and j.dedupe_scope = ''
                                              and j.state not in ('completed', 'failed', 'canceled'))) as id,
                           i.id is not null and t.n = min(t.n) over (partition by t.target) as created
                      from unnest(p_targets) with ordinality t(target, n)
                      left join unnest(v_new_targets, v_new_ids) as i(target, id) on i.target = t.target) r;
            if array_position(v_ids, null) is not null then
                -- A job holding one of our targets finished between insert and look-up: again, for those.
                v_pending := array(select t.target from unnest(p_targets, v_ids) t(target, id) where t.id is null);
                v_ids := null;
            end if;
        end loop;

        exit handover when coalesce(v_policy, 'join') not in ('rerun', 'replace');
        -- Each job with duplicates takes its latest item's payload (see
        -- take_duplicate), in id order as every batch locks rows. A job that
        -- finished between the look above and its hand-over (take_duplicate
        -- waits for its row) did not take it: those items are submitted again,
        -- so each payload still runs.
        v_lost := '{}';
        for v_dup in
            select a.id, (array_agg(coalesce(p_payloads[a.n], '{}'::jsonb) order by a.n desc))[1] as payload
              from unnest(v_ids, v_created) with ordinality a(id, created, n)
             where a.id <> all (v_taken)
             group by a.id having bool_or(not a.created)
             order by a.id
        loop
            if jobfeed.take_duplicate(v_dup.id, v_policy, v_dup.payload, v_now) then
                v_taken := v_taken || v_dup.id;
            else
                v_lost := v_lost || v_dup.id;
            end if;
        end loop;
        exit handover when cardinality(v_lost) = 0;
        v_pending := array(select t.target from unnest(p_targets, v_ids) t(target, id) where t.id = any (v_lost));
        v_ids := null;
    end loop;
    if cardinality(v_new_ids) > 0 then
        perform jobfeed.notify_changed(v_new_ids, array_fill(1::bigint, array[cardinality(v_new_ids)]));
        perform jobfeed.notify_due(p_kind, cardinality(v_new_ids));
    end if;
    return query select a.n::int, a.id, a.created from unnest(v_ids, v_created) with ordinality a(id, created, n);
end $$;

-- submit_many answering each job's public view too: the API's group commit
-- answers every waiting POST /api/jobs of a batch from one call. (Two
-- statements: the second must see the rows the first made.)
create or replace function jobfeed.submit_many_views_v2(
    p_kind text, p_targets text[], p_payloads jsonb[], p_max_payload int default 65536,
    p_run_after timestamptz default null, p_priority int default null, p_concurrency_key text default null)
returns table (n int, id uuid, created boolean, view jsonb)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
#variable_conflict use_column
declare
    v_ids uuid[];
    v_created boolean[];
begin
    select array_agg(s.id order by s.n), array_agg(s.created order by s.n) into v_ids, v_created
      from jobfeed.submit_many_v2(p_kind, p_targets, p_payloads, p_run_after, p_max_payload, null,
                                  p_priority, p_concurrency_key) s;
    -- Each job by primary key, as a scalar sub-select: a join, or = any (v_ids)
    -- once the plan is cached, may be planned as a scan of the whole table.
    return query
        select a.n::int, a.id, a.created, (select jobfeed.public_view(j) from jobfeed.jobs j where j.id = a.id)
          from unnest(v_ids, v_created) with ordinality a(id, created, n)
         order by a.n;
end $$;

-- v0.1.0's submit functions: the _v2 ones with the kind's priority and no
-- concurrency key.
create or replace function jobfeed.submit(
    p_kind text, p_target text, p_payload jsonb default '{}', p_run_after timestamptz default null,
    p_max_payload int default 65536, p_now timestamptz default null)
returns table (id uuid, created boolean, view jsonb)
language sql security definer set search_path = jobfeed, pg_temp as $$
    select s.id, s.created, s.view from jobfeed.submit_v2(p_kind, p_target, p_payload, p_run_after,
                                                          p_max_payload, p_now) s
$$;

create or replace function jobfeed.submit_many(
    p_kind text, p_targets text[], p_payloads jsonb[] default null, p_run_after timestamptz default null,
    p_max_payload int default 65536, p_now timestamptz default null)
returns table (n int, id uuid, created boolean)
language sql security definer set search_path = jobfeed, pg_temp as $$
    select s.n, s.id, s.created from jobfeed.submit_many_v2(p_kind, p_targets, p_payloads, p_run_after,
                                                            p_max_payload, p_now) s
$$;

create or replace function jobfeed.submit_many_views(
    p_kind text, p_targets text[], p_payloads jsonb[], p_max_payload int default 65536)
returns table (n int, id uuid, created boolean, view jsonb)
language sql security definer set search_path = jobfeed, pg_temp as $$
    select s.n, s.id, s.created, s.view from jobfeed.submit_many_views_v2(p_kind, p_targets, p_payloads,
                                                                          p_max_payload) s
$$;
