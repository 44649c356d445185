-- Requests: who waits for a job (sql/migrations/0005_requests.sql).
--
-- jobs.requesters counts a job's active requests. Joining and leaving both
-- update it under the job's row lock, so a leave that finds none left and
-- cancels the job (its kind's on_abandon) is serialized with every join: a
-- join that comes second finds the job final and starts a new one. A request
-- stops being active when its job is final; the public view then shows 0.

-- "The requesters of these jobs changed": the same "id:version" hint as
-- notify_changed, the version marked with an 'r' since it did not move (the
-- feed re-reads the job; SSE sends it under the same id).
create or replace function jobfeed.notify_requesters(p_ids uuid[], p_versions bigint[])
returns void language sql as $$
    select pg_notify('jobfeed_changed', string_agg(c.item, ','))
      from (select t.k / 150 as chunk, t.id::text || ':' || t.v::text || 'r' as item
              from unnest(p_ids, p_versions) with ordinality t(id, v, k)) c
     group by c.chunk
$$;

-- Refuse (JF429 too_many_jobs) when a requester would hold more than p_max
-- active requests with p_adding more. Takes a transaction lock per requester,
-- so that one requester's concurrent submissions are counted one after another.
create or replace function jobfeed.check_requester_cap(p_requester text, p_adding int, p_max int)
returns void language plpgsql as $$
declare
    v_active int;
begin
    if p_requester is null or p_max is null then
        return;
    end if;
    perform pg_advisory_xact_lock(hashtextextended('jobfeed.requester:' || p_requester, 0));
    select count(*) into v_active
      from jobfeed.requests r join jobfeed.jobs j on j.id = r.job_id
     where r.requester = p_requester and r.left_at is null and j.state not in ('completed', 'failed', 'canceled');
    if v_active + p_adding > p_max then
        perform jobfeed.raise_error('JF429', 'too_many_jobs',
                                    format('this requester already waits for %s jobs (at most %s)', v_active, p_max));
    end if;
end $$;

-- A worker records its kind's request policies (workers run the kind),
-- dedupe="requester" and the rerun and replace duplicate policies included.
create or replace function jobfeed.set_kind_request_policy_v2(
    p_kind text, p_on_abandon text default 'cancel', p_on_duplicate text default 'join',
    p_reuse_for interval default null, p_dedupe text default 'global')
returns void language plpgsql security definer set search_path = jobfeed, pg_temp as $$
begin
    if p_on_abandon is null or p_on_abandon not in ('cancel', 'keep') then
        perform jobfeed.raise_error('JF422', 'invalid_kind', 'on_abandon must be "cancel" or "keep"');
    end if;
    if p_on_duplicate is null or p_on_duplicate not in ('join', 'reject_different', 'rerun', 'replace') then
        perform jobfeed.raise_error('JF422', 'invalid_kind',
                                    'on_duplicate must be "join", "reject_different", "rerun" or "replace"');
    end if;
    if p_dedupe is null or p_dedupe not in ('global', 'requester') then
        perform jobfeed.raise_error('JF422', 'invalid_kind', 'dedupe must be "global" or "requester"');
    end if;
    if p_reuse_for <= '0' then
        perform jobfeed.raise_error('JF422', 'invalid_kind', 'reuse_for must be longer than zero');
    end if;
    update jobfeed.kinds k
       set on_abandon = p_on_abandon, on_duplicate = p_on_duplicate, reuse_for = p_reuse_for, dedupe = p_dedupe,
           updated_at = now()
     where k.kind = p_kind
       and (k.on_abandon, k.on_duplicate, k.reuse_for, k.dedupe)
           is distinct from (p_on_abandon, p_on_duplicate, p_reuse_for, p_dedupe);
end $$;

-- The first release's set_kind_request_policy: join or reject_different, the
-- kind's dedupe left as it is.
create or replace function jobfeed.set_kind_request_policy(
    p_kind text, p_on_abandon text default 'cancel', p_on_duplicate text default 'join',
    p_reuse_for interval default null)
returns void language plpgsql security definer set search_path = jobfeed, pg_temp as $$
begin
    if p_on_duplicate is null or p_on_duplicate not in ('join', 'reject_different') then
        perform jobfeed.raise_error('JF422', 'invalid_kind', 'on_duplicate must be "join" or "reject_different"');
    end if;
    perform jobfeed.set_kind_request_policy_v2(p_kind, p_on_abandon, p_on_duplicate, p_reuse_for,
                                               (select k.dedupe from jobfeed.kinds k where k.kind = p_kind));
end $$;

-- The completed job a submission of (kind, target) by p_requester may reuse:
-- the latest one completed within the kind's reuse_for that the submission
-- could have shared (same dedupe scope: under dedupe="requester" only the same
-- identity's, none for an anonymous one); null when the kind reuses nothing,
-- or when an unfinished job holds the target (the submission joins it).
-- p_made: a job this submission has just written, which holds nothing here
-- (see submit_request).
drop function if exists jobfeed.reusable(text, text, timestamptz);
drop function if exists jobfeed.reusable(text, text, text, timestamptz);
create or replace function jobfeed.reusable(p_kind text, p_target text, p_requester text, p_now timestamptz,
                                            p_made uuid default null)
returns uuid language sql stable as $$
    select j.id from jobfeed.jobs j, jobfeed.kinds k
     where k.kind = p_kind and k.reuse_for is not null
       and j.kind = p_kind and j.target = p_target and j.state = 'completed'
       and j.dedupe_scope = jobfeed.dedupe_scope(k.dedupe, p_requester)
       and j.finished_at > p_now - k.reuse_for
       -- a newer run under way (a forced one) is the target's job: joined, not passed over
       and not exists (select from jobfeed.jobs u
                        where u.kind = p_kind and u.target = p_target and u.dedupe_scope = j.dedupe_scope
                          and u.state not in ('completed', 'failed', 'canceled')
                          and u.id is distinct from p_made)
     order by j.finished_at desc
     limit 1
$$;

-- reject_different: a duplicate whose payload differs from the unfinished job's
-- is refused (JF409 payload_conflict).
create or replace function jobfeed.check_duplicate(p_kind text, p_job uuid, p_payload jsonb)
returns void language plpgsql as $$
begin
    if exists (select from jobfeed.kinds k join jobfeed.jobs j on j.id = p_job
                where k.kind = p_kind and k.on_duplicate = 'reject_different'
                  and j.payload is distinct from coalesce(p_payload, '{}'::jsonb)) then
        perform jobfeed.raise_error('JF409', 'payload_conflict',
                                    'an unfinished job for this target has a different payload');
    end if;
end $$;

-- on_duplicate "rerun" and "replace": what a duplicate carrying p_payload does
-- to the unfinished job p_id (under its row lock). A job not running right now
-- (never started, between attempts, waiting) takes the newest payload for its
-- next attempt. A running one: "rerun" asks for one more run after this
-- attempt (rerun_payload: the newest wins, so several duplicates during one
-- attempt give one rerun; the attempt's end takes it, see start_rerun and
-- complete_many); "replace" fences the attempt out (generation bump: its lease
-- is lost, its writes refused), does not count it, and queues the job at once
-- with the new payload. Public status stays 'processing': no version bump.
-- False when the job is final by now (the caller submits again).
create or replace function jobfeed.take_duplicate(p_id uuid, p_policy text, p_payload jsonb, p_now timestamptz)
returns boolean language plpgsql as $$
declare
    v_job jobfeed.jobs;
begin
    select j.* into v_job from jobfeed.jobs j
     where j.id = p_id and j.state not in ('completed', 'failed', 'canceled')
       for update;
    if not found then
        return false;
    end if;
    if v_job.state <> 'running' then
        update jobfeed.jobs j set payload = p_payload, rerun_payload = null where j.id = p_id;
    elsif p_policy = 'rerun' then
        update jobfeed.jobs j set rerun_payload = p_payload where j.id = p_id;
    else
        perform jobfeed.finish_attempts(array[p_id], array[v_job.generation], 'replaced', 'replaced',
                                        'a duplicate submission replaced this attempt', p_now);
        perform jobfeed.notify_fenced(array[p_id], array[v_job.generation]);
        update jobfeed.jobs j
           set state = 'queued', generation = j.generation + 1, attempts = greatest(j.attempts - 1, 0),
               lease_until = null, run_after = p_now, payload = p_payload, rerun_payload = null
         where j.id = p_id;
        perform jobfeed.notify_due(v_job.kind, 1);
    end if;
    return true;
end $$;

-- The attempt (p_id, p_generation) ends while a rerun is pending: the job goes
-- back to queued at once with the newest payload and the kind's attempts anew
-- (those used so far stay counted in `attempts`), and the attempt is logged
-- with p_outcome. False (nothing done) when no rerun is pending or the lease
-- is lost. complete_many does the same in its own statement.
create or replace function jobfeed.start_rerun(
    p_id uuid, p_generation int, p_outcome text, p_code text, p_message text, p_now timestamptz)
returns boolean language plpgsql as $$
declare
    v_kind text;
begin
    select j.kind into v_kind from jobfeed.jobs j
     where j.id = p_id and j.generation = p_generation and j.state::text = 'running' and j.rerun_payload is not null
       for update;
    if not found then
        return false;
    end if;
    perform jobfeed.finish_attempts(array[p_id], array[p_generation], p_outcome, p_code, p_message, p_now);
    update jobfeed.jobs j
       set state = 'queued', lease_until = null, run_after = p_now, payload = j.rerun_payload,
           rerun_payload = null, checkpoint = null,
           max_attempts = j.attempts + coalesce((select k.max_attempts from jobfeed.kinds k where k.kind = j.kind),
                                                j.max_attempts)
     where j.id = p_id;
    perform jobfeed.notify_due(v_kind, 1);
    return true;
end $$;

-- Earlier (unreleased) signatures of submit_request/submit_many_requests, before
-- they took the scheduling fields: gone, so that calls are never ambiguous.
drop function if exists jobfeed.submit_request(text, text, jsonb, timestamptz, int, text, text, int, boolean,
                                               timestamptz);
drop function if exists jobfeed.submit_many_requests(text, text[], jsonb[], int, text[], text[], int, boolean[],
                                                     timestamptz);

-- submit_v2() that also records a request, in the same statement: answers the
-- job, whether it was made, its public view (requesters counted) and the
-- request's id. The scheduling fields (run_after, priority, concurrency key)
-- go to submit_v2 as they are.
create or replace function jobfeed.submit_request(
    p_kind text, p_target text, p_payload jsonb default '{}', p_run_after timestamptz default null,
    p_max_payload int default 65536, p_requester text default null, p_notify_url text default null,
    p_max_active int default null, p_force boolean default false, p_now timestamptz default null,
    p_priority int default null, p_concurrency_key text default null)
returns table (id uuid, created boolean, view jsonb, request_id uuid, reused boolean)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_reuses boolean := not coalesce(p_force, false);
    v_id uuid;
    v_created boolean;
    v_made uuid;
    v_job jobfeed.jobs;
    v_request uuid;
begin
    v_id := case when v_reuses then jobfeed.reusable(p_kind, p_target, p_requester, v_now) end;
    if v_id is null then
        perform jobfeed.check_requester_cap(p_requester, 1, p_max_active);
        loop
            select s.id, s.created into v_id, v_created
              from jobfeed.submit_v3(p_kind, p_target, p_payload, p_run_after, p_max_payload, p_now,
                                     p_priority, p_concurrency_key, p_requester) s;
            -- The target's job may have completed since reusable() looked: its
            -- entry left the dedupe index as this job was written (or just below,
            -- and this is the loop's second round). That is the recent result
            -- this submission gets; the job it made goes, unseen by anyone.
            if v_created and v_reuses then
                v_made := v_id;
                v_id := coalesce(jobfeed.reusable(p_kind, p_target, p_requester, v_now, v_made), v_made);
                if v_id <> v_made then
                    delete from jobfeed.jobs j where j.id = v_made;
                    exit;
                end if;
            end if;
            -- The row lock a leave also takes: if the last requester left and the
            -- job was canceled meanwhile, it is no longer unfinished: submit again.
            update jobfeed.jobs j set requesters = j.requesters + 1, notify = j.notify or p_notify_url is not null
             where j.id = v_id and j.state not in ('completed', 'failed', 'canceled')
            returning j.* into v_job;
            exit when found;
        end loop;
    end if;
    if v_job.id is null then  -- a recent result: this request is one of its (inactive) requests, never capped
        insert into jobfeed.requests (job_id, requester, notify_url, created_at)
        values (v_id, p_requester, p_notify_url, v_now)
        returning requests.id into v_request;
        if p_notify_url is not null then  -- final already: its webhook goes now
            perform jobfeed.queue_deliveries(array[v_request]);
        end if;
        return query select v_id, false, (select jobfeed.public_view(j) from jobfeed.jobs j where j.id = v_id),
                            v_request, true;
        return;
    end if;
    if not v_created then
        perform jobfeed.check_duplicate(p_kind, v_id, p_payload);
    end if;
    insert into jobfeed.requests (job_id, requester, notify_url, created_at)
    values (v_id, p_requester, p_notify_url, v_now)
    returning requests.id into v_request;
    if not v_created then
        perform jobfeed.notify_requesters(array[v_id], array[v_job.version]);
    end if;
    return query select v_id, v_created, jobfeed.public_view(v_job), v_request, false;
end $$;

-- submit_many_views_v2() that records one request per item (the API's group
-- commit: every HTTP submission is a request, and may carry scheduling fields;
-- the batch shares one run_after, priority and concurrency key). p_requesters
-- and p_notify_urls are per item (null: none).
-- Its plans are generic: seeing each call's arrays, the planner kept making a
-- plan for that call, and planning the batch's statements anew each time cost
-- more than running them. A generic plan is made once per session, maybe on a
-- near-empty table, and kept: scans and hash joins are off so that it can only
-- be what suits a batch of any size over a table of any size, index probes
-- (every look-up here is an equality on an indexed column).
create or replace function jobfeed.submit_many_requests(
    p_kind text, p_targets text[], p_payloads jsonb[], p_max_payload int default 65536,
    p_requesters text[] default null, p_notify_urls text[] default null, p_max_active int default null,
    p_forces boolean[] default null, p_now timestamptz default null,
    p_run_after timestamptz default null, p_priority int default null, p_concurrency_key text default null)
returns table (n int, id uuid, created boolean, view jsonb, request_id uuid, reused boolean)
language plpgsql security definer set search_path = jobfeed, pg_temp
set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_bitmapscan = off
set enable_hashjoin = off set enable_mergejoin = off as $$
#variable_conflict use_column
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_count int := cardinality(p_targets);
    v_ids uuid[] := array_fill(null::uuid, array[coalesce(cardinality(p_targets), 0)]);
    v_created boolean[] := array_fill(false, array[coalesce(cardinality(p_targets), 0)]);
    v_reused boolean[] := array_fill(false, array[coalesce(cardinality(p_targets), 0)]);
    v_pending int[];
    v_round record;
    v_job record;
    v_counted jsonb;  -- this round's counted jobs: id -> view (after the count)
    v_round_joined uuid[];
    v_round_versions bigint[];
    v_view_of jsonb := '{}';  -- every round's
    v_joined uuid[] := '{}';
    v_joined_versions bigint[] := '{}';
    v_requests uuid[];
    v_views jsonb[];
    v_kind record;  -- the kind's row, read once
    v_known boolean;
    v_by_requester boolean;
    v_made uuid[];
    v_made_views jsonb[];
begin
    if p_targets is null then
        perform jobfeed.raise_error('JF422', 'invalid_batch', 'targets are required');
    end if;
    select k.dedupe, k.reuse_for, k.max_attempts, coalesce(p_priority, k.priority) as priority
      into v_kind from jobfeed.kinds k where k.kind = p_kind;
    v_known := found;
    v_by_requester := coalesce(v_kind.dedupe = 'requester', false);
    if p_max_active is not null then  -- each requester's lock in name order: no circular waits
        -- an item that will reuse a recent result adds no active request; with
        -- dedupe="requester" items go one by one, and a forced item of the same
        -- target and requester before it starts a new run that it then joins
        perform jobfeed.check_requester_cap(r.requester, r.n::int, p_max_active)
           from (select t.requester, count(*) as n
                   from unnest(p_requesters, p_targets, p_forces) with ordinality t(requester, target, force, k)
                  where t.requester is not null
                    and (coalesce(t.force, false) or jobfeed.reusable(p_kind, t.target, t.requester, v_now) is null
                         or (v_by_requester and exists (
                                select from unnest(p_requesters, p_targets, p_forces) with ordinality
                                            f(requester, target, force, k)
                                 where f.force and f.target = t.target and f.requester = t.requester and f.k < t.k)))
                  group by t.requester order by t.requester) r;
    end if;
    if v_by_requester then
        -- dedupe="requester": items share by (target, requester), so each goes
        -- alone, in (target, requester) order (two batches racing over the same
        -- ones wait on the dedupe index in one order, never in a cycle); the
        -- caps were checked above, their locks are held.
        v_views := array_fill(null::jsonb, array[v_count]);
        v_requests := array_fill(null::uuid, array[v_count]);
        for v_round in select k from generate_series(1, v_count) k order by p_targets[k], p_requesters[k], k loop
            select s.* into v_job
              from jobfeed.submit_request(p_kind, p_targets[v_round.k], p_payloads[v_round.k], p_run_after,
                                          p_max_payload, p_requesters[v_round.k], p_notify_urls[v_round.k], null,
                                          p_forces[v_round.k], p_now, p_priority, p_concurrency_key) s;
            v_ids[v_round.k] := v_job.id;
            v_created[v_round.k] := v_job.created;
            v_views[v_round.k] := v_job.view;
            v_requests[v_round.k] := v_job.request_id;
            v_reused[v_round.k] := v_job.reused;
        end loop;
        return query select k::int, v_ids[k], v_created[k], v_views[k], v_requests[k], v_reused[k]
                       from generate_series(1, v_count) k order by k;
        return;
    end if;
    -- New work, the common batch (distinct targets nobody holds, nothing to
    -- reuse, every item fit): each job written with its request counted and
    -- its request beside it, in one statement, instead of a job written, then
    -- counted, then read for its view. The first target in insert order is
    -- probed first (batch_first_target_held), so a batch of duplicates goes
    -- straight the general way; a target held after all (or taken meanwhile)
    -- trips the unique index, and the general way below answers or refuses
    -- each item as it always did.
    if v_known and v_kind.reuse_for is null and v_count > 0
       and not jobfeed.batch_first_target_held(p_kind, p_targets)
       and (select count(distinct t) from unnest(p_targets) t) = v_count
       and (p_payloads is null or cardinality(p_payloads) = v_count)
       and jobfeed.batch_problem(p_targets, p_payloads, p_max_payload, p_concurrency_key) is null then
        v_made := jobfeed.uuid_v7_batch(2 * v_count);  -- the jobs' ids, then the requests'
        begin
            with ins as (
                insert into jobfeed.jobs as j (id, kind, target, payload, max_attempts, run_after, created_at,
                                               updated_at, priority, concurrency_key, requesters, notify)
                select v_made[t.n], p_kind, t.target, coalesce(t.payload, '{}'), v_kind.max_attempts,
                       coalesce(p_run_after, v_now), v_now, v_now, v_kind.priority, p_concurrency_key,
                       1, p_notify_urls[t.n] is not null
                  from unnest(p_targets, p_payloads) with ordinality t(target, payload, n)
                 order by t.target, t.n  -- as submit_many_v2: racing batches wait in one order
                returning j.id, jobfeed.public_view(j) as view
            ), req as (
                insert into jobfeed.requests (id, job_id, requester, notify_url, created_at)
                select v_made[v_count + k], v_made[k], p_requesters[k], p_notify_urls[k], v_now
                  from generate_series(1, v_count) k order by k
            )
            select array_agg(i.view order by x.k) into v_made_views
              from ins i join unnest(v_made[1:v_count]) with ordinality x(id, k) on x.id = i.id;
        exception when unique_violation then
            v_made_views := null;
        end;
        if v_made_views is not null then
            perform jobfeed.notify_changed(v_made[1:v_count], array_fill(1::bigint, array[v_count]));
            perform jobfeed.notify_due(p_kind, v_count);
            return query select k::int, v_made[k], true, v_made_views[k], v_made[v_count + k], false
                           from generate_series(1, v_count) k order by k;
            return;
        end if;
    end if;
    -- reuse_for: items not forced whose target completed recently get that job
    if v_kind.reuse_for is not null then
        for v_round in
            select k, jobfeed.reusable(p_kind, p_targets[k], p_requesters[k], v_now) as id
              from generate_series(1, v_count) k where not coalesce(p_forces[k], false)
        loop
            if v_round.id is not null then
                v_ids[v_round.k] := v_round.id;
                v_reused[v_round.k] := true;
            end if;
        end loop;
    end if;
    v_pending := array(select k from generate_series(1, v_count) k where not v_reused[k]);
    while cardinality(v_pending) > 0 loop
        for v_round in
            select v_pending[s.n] as k, s.id, s.created
              from jobfeed.submit_many_v2(p_kind, array(select p_targets[k] from unnest(v_pending) k),
                                          array(select p_payloads[k] from unnest(v_pending) k),
                                          p_run_after, p_max_payload, p_now, p_priority, p_concurrency_key) s
        loop
            v_ids[v_round.k] := v_round.id;
            v_created[v_round.k] := v_round.created;
        end loop;
        -- The jobs this round shares with earlier submissions, locked in id
        -- order (two batches sharing jobs never wait on each other in a
        -- circle); the ones it made are its own already. Then one UPDATE
        -- counts every job's requests and answers its view.
        perform from jobfeed.jobs j
         where j.id in (select v_ids[k] from unnest(v_pending) k where not v_created[k])
         order by j.id
           for update;
        with counted as (
            select v_ids[p.k] as id, count(*)::int as c, bool_or(v_created[p.k]) as made,
                   bool_or(p_notify_urls[p.k] is not null) as notify
              from unnest(v_pending) p(k)
             group by v_ids[p.k]),
        updated as (
            update jobfeed.jobs j set requesters = j.requesters + c.c, notify = j.notify or c.notify
              from counted c
             where j.id = c.id and j.state not in ('completed', 'failed', 'canceled')
            returning j.id, j.version, c.made, jobfeed.public_view(j) as view)
        -- (keyed look-ups, not joins: a batch's items never meet each other pairwise)
        select coalesce(jsonb_object_agg(u.id::text, u.view), '{}'),
               coalesce(array_agg(u.id) filter (where not u.made), '{}'),
               coalesce(array_agg(u.version) filter (where not u.made), '{}')
          into v_counted, v_round_joined, v_round_versions
          from updated u;
        perform jobfeed.check_duplicate(p_kind, v_ids[k], p_payloads[k])
           from unnest(v_pending) k where not v_created[k] and v_counted ? v_ids[k]::text;
        v_view_of := v_view_of || v_counted;
        v_joined := v_joined || v_round_joined;
        v_joined_versions := v_joined_versions || v_round_versions;
        -- abandoned and canceled since submit_many saw them: again
        v_pending := array(select k from unnest(v_pending) k where not v_counted ? v_ids[k]::text);
    end loop;
    -- As in submit_request: a job this batch made for an item not forced,
    -- while the target's job completed since reusable() looked, goes; every
    -- item it answered gets that recent result instead.
    if v_kind.reuse_for is not null then
        for v_round in
            select m.made, jobfeed.reusable(p_kind, p_targets[m.k], p_requesters[m.k], v_now, m.made) as id
              from (select distinct on (v_ids[k]) v_ids[k] as made, k from generate_series(1, v_count) k
                     where v_created[k] and not coalesce(p_forces[k], false) order by v_ids[k], k) m
        loop
            continue when v_round.id is null;
            delete from jobfeed.jobs j where j.id = v_round.made;
            v_reused := array(select v_reused[k] or v_ids[k] = v_round.made from generate_series(1, v_count) k);
            v_created := array(select v_created[k] and v_ids[k] <> v_round.made from generate_series(1, v_count) k);
            v_ids := array(select case when v_ids[k] = v_round.made then v_round.id else v_ids[k] end
                             from generate_series(1, v_count) k);
        end loop;
    end if;

    v_requests := jobfeed.uuid_v7_batch(v_count);
    insert into jobfeed.requests (id, job_id, requester, notify_url, created_at)
    select v_requests[k], v_ids[k], p_requesters[k], p_notify_urls[k], v_now
      from generate_series(1, v_count) k order by k;
    -- items answered with a final job (reuse_for) that want to hear: now
    perform jobfeed.queue_deliveries(array(select v_requests[k] from generate_series(1, v_count) k
                                            where v_reused[k] and p_notify_urls[k] is not null));
    if cardinality(v_joined) > 0 then
        perform jobfeed.notify_requesters(v_joined, v_joined_versions);
    end if;
    return query
        select k::int, v_ids[k], v_created[k],
               coalesce(v_view_of -> v_ids[k]::text,  -- a reused job was not counted: read
                        (select jobfeed.public_view(j) from jobfeed.jobs j where j.id = v_ids[k])),
               v_requests[k], v_reused[k]
          from generate_series(1, v_count) k order by k;
end $$;

-- A request leaves: answers its job's public view. Idempotent. When the last
-- active request of an unfinished job leaves, the kind's on_abandon decides:
-- 'cancel' cancels it (a running worker loses its lease), 'keep' lets it run.
create or replace function jobfeed.leave(p_request uuid, p_now timestamptz default null)
returns jsonb language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_job_id uuid;
    v_left boolean;
    v_job jobfeed.jobs;
    v_policy text;
    v_was_running boolean;
begin
    update jobfeed.requests r set left_at = v_now
     where r.id = p_request and r.left_at is null
    returning r.job_id into v_job_id;
    v_left := found;
    if not v_left then
        select r.job_id into v_job_id from jobfeed.requests r where r.id = p_request;
        if not found then
            perform jobfeed.raise_error('JF404', 'not_found', 'no such request');
        end if;
        return (select jobfeed.with_position(jobfeed.public_view(j), j.id) from jobfeed.jobs j where j.id = v_job_id);
    end if;
    update jobfeed.jobs j set requesters = greatest(j.requesters - 1, 0)
     where j.id = v_job_id and j.state not in ('completed', 'failed', 'canceled')
    returning j.* into v_job;
    if not found then  -- final already: nothing to count
        return (select jobfeed.with_position(jobfeed.public_view(j), j.id) from jobfeed.jobs j where j.id = v_job_id);
    end if;
    select k.on_abandon into v_policy from jobfeed.kinds k where k.kind = v_job.kind;
    if v_job.requesters = 0 and coalesce(v_policy, 'cancel') = 'cancel' then
        v_was_running := v_job.state = 'running';
        update jobfeed.jobs j
           set state = 'canceled', lease_until = null, finished_at = v_now, updated_at = v_now,
               version = j.version + 1
         where j.id = v_job.id
        returning j.* into v_job;
        if v_was_running then
            perform jobfeed.finish_attempts(array[v_job.id], array[v_job.generation], 'canceled', 'abandoned',
                                            'every requester left', v_now);
            perform jobfeed.notify_fenced(array[v_job.id], array[v_job.generation]);
        end if;
        perform jobfeed.notify_changed(array[v_job.id], array[v_job.version]);
    else
        perform jobfeed.notify_requesters(array[v_job.id], array[v_job.version]);
    end if;
    return jobfeed.with_position(jobfeed.public_view(v_job), v_job.id);
end $$;

-- JOBFEED_JOB_ACCESS=requesters: may this caller see the job? Yes for anyone
-- who ever requested it (also after leaving, and after it finished: that is
-- when its result matters), by identity or by one of its request ids.
create or replace function jobfeed.may_view(p_job uuid, p_requester text, p_request uuid)
returns boolean language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select exists (select from jobfeed.requests r
                    where r.job_id = p_job
                      and (r.id = p_request or (p_requester is not null and r.requester = p_requester)))
$$;

-- Webhooks: when a job that some request wants to hear about becomes final,
-- one delivery job per such request still waiting (kind jobfeed.webhook,
-- target the request's id, payload the URL, a webhook id stable across
-- retries and the final public view). Workers that have JOBFEED_WEBHOOK_SECRET
-- run them (jobfeed/worker/webhooks.py): retried with backoff, at least once.
create or replace function jobfeed.queue_webhooks()
returns trigger language plpgsql security definer set search_path = jobfeed, pg_temp as $$
begin
    if not jobfeed.became_final(old.state, new.state) then
        return null;
    end if;
    perform jobfeed.queue_deliveries(array(select r.id from jobfeed.requests r
                                            where r.job_id = new.id and r.notify_url is not null
                                              and r.left_at is null));
    return null;
end $$;

-- One delivery job per request of p_requests that gave a URL and whose job is
-- final (the trigger's, when the job ends; a submission answered with a job
-- that is final already, reuse_for, when it is made).
create or replace function jobfeed.queue_deliveries(p_requests uuid[])
returns void language plpgsql as $$
declare
    v_max int;
    v_count int;
begin
    if cardinality(p_requests) = 0 then
        return;
    end if;
    insert into jobfeed.kinds (kind, max_attempts, lease, backoff, description)
    values ('jobfeed.webhook', 10, '1 minute', '{10 seconds,1 minute,5 minutes,15 minutes,60 minutes}',
            'delivers a final job view to a notify_url')
    on conflict (kind) do nothing;
    select k.max_attempts into v_max from jobfeed.kinds k where k.kind = 'jobfeed.webhook';
    insert into jobfeed.jobs as j (kind, target, payload, max_attempts, run_after, created_at, updated_at)
    select 'jobfeed.webhook', r.id::text,
           jsonb_build_object('url', r.notify_url, 'webhook_id', 'msg_' || replace(r.id::text, '-', ''),
                              'job_id', f.id,
                              -- the view as GET answers it; a final job has no position
                              'body', jobfeed.public_view(f) || '{"position": null}'),
           v_max, now(), now(), now()
      from jobfeed.requests r join jobfeed.jobs f on f.id = r.job_id
     where r.id = any (p_requests) and r.notify_url is not null
       and f.state in ('completed', 'failed', 'canceled')
     order by r.id
    on conflict (kind, target, dedupe_scope) where state not in ('completed', 'failed', 'canceled') do nothing;
    get diagnostics v_count = row_count;
    if v_count > 0 then
        perform jobfeed.notify_due('jobfeed.webhook', v_count);
    end if;
end $$;

-- The WHEN names one column: PostgreSQL prepares a trigger's WHEN anew for
-- every UPDATE statement of a job's state (every claim and outcome), and the
-- whole test there cost each of them more than this function's call costs
-- the few jobs with notify set; the function checks the rest (became_final).
create or replace trigger jobs_queue_webhooks
    after update of state on jobfeed.jobs
    for each row
    when (new.notify)
    execute function jobfeed.queue_webhooks();
