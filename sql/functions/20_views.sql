-- JSON views of a job, built once here so every reader (API, feed, CLI, psql)
-- agrees on what is public. Masking lives in public_status and in 'error'
-- being shown only for failed jobs. An 'internal_error' (an exception no
-- handler raised on purpose) shows its code only: its message, kept for
-- admins in last_error and the attempts log, may describe our internals.

create or replace function jobfeed.public_view(j jobfeed.jobs)
returns jsonb language sql stable as $$
    select jsonb_build_object(
        'id', j.id,
        'kind', j.kind,
        'target', j.target,
        'status', jobfeed.public_status(j.state, j.generation),
        'progress', j.progress,
        'result', case when j.state = 'completed' then j.result end,
        'error', case when j.state = 'failed' then
                     jsonb_build_object('code', j.last_error_code, 'message',
                                        case when j.last_error_code = 'internal_error' then 'internal error'
                                             else j.last_error_message end) end,
        'created_at', j.created_at,
        'updated_at', j.updated_at,
        'finished_at', j.finished_at,
        'version', j.version,
        -- active requests: a request stops being one when its job is final
        'requesters', case when j.state not in ('completed', 'failed', 'canceled') then j.requesters else 0 end,
        -- The time asked for with run_at/delay, until the first start. After a
        -- start it stays null: a retry's delay is not the public's business.
        -- Null too once that time has come: the job is due now.
        'scheduled_for', case when j.generation = 0 and j.state in ('queued', 'waiting')
                                   and j.run_after > greatest(j.updated_at, now())
                              then j.run_after end,
        -- files the handler saved (ctx.save_output), downloadable at /api/jobs/{id}/outputs/{name}
        'outputs', coalesce(j.outputs, '[]'::jsonb))
$$;

-- The job's ended attempts: those logged, and its completion, which the job's
-- row already records (worker, claim and finish times), so complete_many, the
-- drain's hot path, writes no second row for it. A completion logged by an
-- earlier version is not read twice.
create or replace function jobfeed.ended_attempts(j jobfeed.jobs)
returns table (job_id uuid, attempt int, generation int, worker_id text, started_at timestamptz,
               finished_at timestamptz, outcome text, error_code text, error_message text)
language sql stable as $$
    select a.job_id, a.attempt, a.generation, a.worker_id, a.started_at, a.finished_at, a.outcome,
           a.error_code, a.error_message
      from jobfeed.attempts a where a.job_id = j.id
    union all
    select j.id, j.attempts, j.generation, j.worker_id, j.claimed_at, j.finished_at, 'completed', null, null
     where j.state = 'completed'
       and not exists (select from jobfeed.attempts a where a.job_id = j.id and a.generation = j.generation)
$$;

-- The true view, without the attempts log (lists, the admin feed).
create or replace function jobfeed.admin_view(j jobfeed.jobs)
returns jsonb language sql stable as $$
    select jobfeed.public_view(j) || jsonb_build_object(
        'state', j.state,
        'attempts', j.attempts,
        'max_attempts', j.max_attempts,
        'generation', j.generation,
        'run_after', j.run_after,
        'lease_until', j.lease_until,
        'worker_id', j.worker_id,
        'started_at', j.started_at,
        'priority', j.priority,
        'concurrency_key', j.concurrency_key,
        'parent_id', j.parent_id,
        'last_error', case when j.last_error_code is not null then
                          jsonb_build_object('code', j.last_error_code, 'message', j.last_error_message) end,
        'payload', j.payload)
$$;

-- How many running jobs of a kind have a lease that expired with attempts left:
-- the claim takes them again before any queued job, so they stand at the head
-- of the line (a range of jobs_running_lease up to now; a dead worker's few).
-- A table, so that a FROM inlines it (a scalar would be a call of its own).
create or replace function jobfeed.reclaimable(p_kind text, p_now timestamptz)
returns table (n int) language sql stable as $$
    select count(*)::int from jobfeed.jobs e
     where e.kind = p_kind and e.state = 'running' and e.lease_until < p_now and e.attempts < e.max_attempts
$$;

-- One job's queue position (see queue_positions; null unless due and never
-- started), for the answers about one job and a few watched ones: the expired
-- leases the claim takes first, then two counts of the claim index's entries,
-- the higher priorities' and those before it in its own priority, each a range
-- of the index that ends where the count does (the jobs behind it are not read).
create or replace function jobfeed.queue_position(p_id uuid, p_now timestamptz)
returns int language sql stable as $$
    select r.n
         + (select count(*)::int from jobfeed.jobs q
             where q.kind = m.kind and q.state = 'queued' and q.priority > m.priority and q.run_after <= p_now)
         + (select count(*)::int from jobfeed.jobs q
             where q.kind = m.kind and q.state = 'queued' and q.priority = m.priority
               and (q.run_after, q.id) < (m.run_after, m.id))
      from jobfeed.jobs m
     cross join lateral jobfeed.reclaimable(m.kind, p_now) r
     where m.id = p_id and m.state = 'queued' and m.generation = 0 and m.run_after <= p_now
$$;

-- The positions of many jobs (queue_positions): per kind, its due queued jobs
-- in the claim's order (jobs_queued_priority), numbered as read after the
-- kind's expired leases (reclaimable), up to the
-- watched job the claim takes last and no further: the higher priorities,
-- then that job's own priority up to it (a row comparison), two ranges of the
-- index read one after the other (an Append reads its parts in turn: no
-- parallel plan may share them out). Each job read is looked up among the
-- watched ones in a hash: the walk is planned anew for each call with their
-- ids as a constant, so no plan a session keeps can compare every watched job
-- with every job read (a join to them was planned so, as a nested loop).
create or replace function jobfeed.queue_positions_walk(p_ids uuid[], p_now timestamptz)
returns table (id uuid, "position" int) language plpgsql stable set max_parallel_workers_per_gather = 0 as $$
declare
    v_mine uuid[];  -- the jobs asked about that have a position: due, queued, never started
    v_last uuid[];  -- of those, per kind, the one the claim takes last
begin
    with mine as materialized (
        select j.id, j.kind, j.priority, j.run_after
          from (select j.id, j.kind, j.priority, j.run_after, j.state, j.generation from jobfeed.jobs j
                 where j.id = any (p_ids) offset 0) j  -- by key (not a range of jobs_queued_due)
         where j.state = 'queued' and j.generation = 0 and j.run_after <= p_now
    )
    select (select array_agg(m.id) from mine m),
           -- of jobs sharing a run_after, the id says which comes last; one
           -- pass per kind, no sort of them all
           array(select l.id from (select distinct m.kind from mine m) k
                  cross join lateral (select m.id from mine m where m.kind = k.kind
                                       order by m.priority, m.run_after desc, m.id desc limit 1) l)
      into v_mine, v_last;
    if v_mine is null then
        return;
    end if;
    -- a job walked is due and queued; if asked about and never started, it has a position
    return query execute $walk$
        select u.id, u."position" + r.n
          from jobfeed.jobs b
         cross join lateral jobfeed.reclaimable(b.kind, $3) r  -- once per kind
         cross join lateral (
            select x.id, (row_number() over () - 1)::int as "position"
              from ((select q.id from jobfeed.jobs q
                      where q.kind = b.kind and q.state = 'queued' and q.run_after <= $3
                        and q.priority > b.priority
                      order by q.priority desc, q.run_after, q.id)
                    union all
                    (select q.id from jobfeed.jobs q
                      where q.kind = b.kind and q.state = 'queued' and q.priority = b.priority
                        and (q.run_after, q.id) <= (b.run_after, b.id)
                      order by q.priority desc, q.run_after, q.id)) x) u
         where b.id = any ($2) and u.id = any ($1)
    $walk$ using v_mine, v_last, p_now;
end
$$;

-- Queue positions: for each of these jobs that is due and never started, how
-- many jobs of its kind the claim takes before it (priority desc, then
-- run_after, then id, as claim_kind_v2 orders them); others have no row.
-- A few jobs (a page or two open, one job re-read) are each counted on their
-- own (queue_position), reading only the entries ahead of each; more are
-- numbered in one walk of each kind's line (queue_positions_walk).
create or replace function jobfeed.queue_positions(p_ids uuid[], p_now timestamptz)
returns table (id uuid, "position" int) language sql stable as $$
    select i.id, f."position"
      from (select distinct i.id from unnest(p_ids) i(id) where cardinality(p_ids) <= 4) i
     cross join lateral (select jobfeed.queue_position(i.id, p_now) as "position" offset 0) f  -- once per job
     where f."position" is not null
    union all
    select w.id, w."position" from jobfeed.queue_positions_walk(p_ids, p_now) w where cardinality(p_ids) > 4
$$;

-- The positions of these jobs (the feed refreshes its watched queued jobs'
-- with one call); jobs with none are left out.
create or replace function jobfeed.positions(p_ids uuid[])
returns table (id uuid, "position" int)
language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select p.id, p."position" from jobfeed.queue_positions(p_ids, now()) p
$$;

-- A view of one job with its queue position added: the answers about one job
-- (its read, the admin's, a request leaving, a signal) carry it; the feed's
-- re-reads get theirs in one pass.
create or replace function jobfeed.with_position(p_view jsonb, p_id uuid)
returns jsonb language sql stable as $$
    select p_view || jsonb_build_object('position', jobfeed.queue_position(p_id, now()))
$$;

create or replace function jobfeed.get_job(p_id uuid)
returns jsonb language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select jobfeed.with_position(jobfeed.public_view(j), j.id) from jobfeed.jobs j where j.id = p_id
$$;

-- Public views of many jobs at once (the feed re-reads after a notification),
-- with their positions (one pass for the lot). The rows by key, whatever the
-- kept plan was made on (a tiny table: a scan of all of it, at every re-read).
-- One generic plan: with a queued job among them, the default plan cache mode
-- planned the statement anew at every re-read (the generic plan's estimate
-- the dearer: it cannot see the array).
create or replace function jobfeed.get_jobs(p_ids uuid[])
returns setof jsonb language sql stable security definer set search_path = jobfeed, pg_temp
set enable_seqscan = off set plan_cache_mode = force_generic_plan as $$
    -- each row read once; positions asked only for the queued ones (none, in
    -- the common re-read of running jobs' progress)
    with rows as materialized (
        select j as job from jobfeed.jobs j where j.id = any (p_ids)
    ), pos as (
        select p.id, p."position"
          from jobfeed.queue_positions(array(select (r.job).id from rows r
                                              where (r.job).state = 'queued' and (r.job).generation = 0),
                                       now()) p
    )
    select jobfeed.public_view(r.job) || jsonb_build_object('position', pos."position")
      from rows r left join pos on pos.id = (r.job).id
$$;

-- One job for the admin: its view, the attempts log, and the jobs its handler
-- submitted with ctx.submit (the first 100 by id, and how many there are).
create or replace function jobfeed.admin_get_job(p_id uuid)
returns jsonb language sql stable security definer set search_path = jobfeed, pg_temp as $$
    -- finished attempts from the log, and the one under way from the job row
    select jobfeed.with_position(jobfeed.admin_view(j), j.id) || jsonb_build_object(
        'children', coalesce((
            select jsonb_agg(jsonb_build_object('id', c.id, 'kind', c.kind, 'target', c.target, 'state', c.state)
                             order by c.id)
              from (select c.id, c.kind, c.target, c.state from jobfeed.jobs c
                     where c.parent_id = j.id order by c.id limit 100) c), '[]'::jsonb),
        'children_count', (select count(*) from jobfeed.jobs c where c.parent_id = j.id),
        'attempts_log', coalesce((
        select jsonb_agg(jsonb_build_object(
                   'attempt', a.attempt, 'generation', a.generation, 'worker_id', a.worker_id,
                   'started_at', a.started_at, 'finished_at', a.finished_at, 'outcome', a.outcome,
                   'error', case when a.error_code is not null then
                                jsonb_build_object('code', a.error_code, 'message', a.error_message) end)
                 order by a.generation)
          from (select a.attempt, a.generation, a.worker_id, a.started_at, a.finished_at, a.outcome,
                       a.error_code, a.error_message
                  from jobfeed.ended_attempts(j) a
                 union all
                select j.attempts, j.generation, j.worker_id, j.claimed_at, null, null, null, null
                 where j.state = 'running') a), '[]'::jsonb))
      from jobfeed.jobs j where j.id = p_id
$$;

-- The admin feed's re-read of changed jobs: one generic plan, by key, as
-- get_jobs (tests/test_plans.py).
create or replace function jobfeed.admin_get_jobs(p_ids uuid[])
returns setof jsonb language sql stable security definer set search_path = jobfeed, pg_temp
set enable_seqscan = off set plan_cache_mode = force_generic_plan as $$
    select jobfeed.admin_view(j) from jobfeed.jobs j where j.id = any (p_ids)
$$;

-- Newest first (ids are time-ordered), keyset-paginated: the page after the
-- row whose id is p_before_id. Unfiltered, it walks the primary key; filtered
-- by kind and/or state, it takes the newest of each (kind, state) pair the
-- filter names from jobs_kind_state_id and merges them (a state alone names
-- it for every registered kind), so a filter matching few of many jobs never
-- walks the whole table. That index leaves running jobs out (0016): those of
-- a kind are read whole through jobs_running_lease and sorted. The bound on
-- id is never null, so it stays an index condition under the generic plan,
-- which is the one used: the default plan cache mode planned the filtered
-- query anew at every call (tests/test_plans.py).
create or replace function jobfeed.admin_list_jobs(
    p_state jobfeed.job_state default null, p_kind text default null, p_limit int default 50,
    p_before_id uuid default null)
returns setof jsonb language plpgsql stable security definer set search_path = jobfeed, pg_temp
set plan_cache_mode = force_generic_plan as $$
declare
    v_limit int := least(greatest(coalesce(p_limit, 50), 1), 500);
    v_before uuid := coalesce(p_before_id, 'ffffffff-ffff-ffff-ffff-ffffffffffff');
begin
    if p_state is null and p_kind is null then
        return query
            select jobfeed.admin_view(j) from jobfeed.jobs j
             where j.id < v_before
             order by j.id desc
             limit v_limit;
        return;
    end if;
    return query
        select jobfeed.admin_view(j)
          from (select x.id
                  from unnest(case when p_kind is null then array(select k.kind from jobfeed.kinds k)
                                   else array[p_kind] end) as kk(kind)
                 cross join unnest(case when p_state is null then enum_range(null::jobfeed.job_state)
                                        else array[p_state] end) as ss(state)
                 cross join lateral (
                       (select j.id from jobfeed.jobs j
                         where j.kind = kk.kind and j.state = ss.state and j.state <> 'running'
                           and j.id < v_before
                         order by j.id desc
                         limit v_limit)
                       union all
                       (select r.id
                          from (select j.id from jobfeed.jobs j
                                 where ss.state = 'running' and j.kind = kk.kind and j.state = 'running'
                                   and j.id < v_before
                                offset 0) r
                         order by r.id desc
                         limit v_limit)) x
                 order by x.id desc
                 limit v_limit) page
          join jobfeed.jobs j on j.id = page.id
         order by j.id desc;
end $$;

create or replace function jobfeed.list_kinds()
returns setof jsonb language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select jsonb_build_object(
        'kind', k.kind, 'description', k.description, 'max_attempts', k.max_attempts,
        'lease_seconds', extract(epoch from k.lease),
        'backoff_seconds', (select jsonb_agg(extract(epoch from b)) from unnest(k.backoff) b),
        'jitter', k.jitter, 'priority', k.priority, 'paused', k.paused,
        'max_running', k.max_running, 'max_running_per_key', k.max_running_per_key,
        'rate', case when k.rate_count is not null then
                    jsonb_build_object('count', k.rate_count, 'period_seconds', extract(epoch from k.rate_period)) end,
        'dedupe', k.dedupe, 'on_duplicate', k.on_duplicate, 'on_abandon', k.on_abandon,
        'reuse_for_seconds', extract(epoch from k.reuse_for))
      from jobfeed.kinds k order by k.kind
$$;

-- Jobs by kind and state, {kind: {state: n}}: of the unfinished states (p_final
-- false), read through the partial index that holds them alone, whatever the
-- history kept; or of the final ones, which reads every finished job the
-- sweeper has not deleted yet (a week of them may be millions). Without
-- statistics on state (0012) the planner takes nearly every row for
-- unfinished and would scan the table: an index it must take instead (for the
-- final states, jobs_finished_at or jobs_kind_state_id).
create or replace function jobfeed.state_counts(p_final boolean)
returns jsonb language sql stable set search_path = jobfeed, pg_temp set enable_seqscan = off as $$
    select coalesce(jsonb_object_agg(c.kind, c.states), '{}'::jsonb) from (
        select s.kind, jsonb_object_agg(s.state, s.n) as states
          from (select j.kind, j.state, count(*) as n from jobfeed.jobs j
                 where not p_final and j.state not in ('completed', 'failed', 'canceled')
                 group by 1, 2
                 union all
                select j.kind, j.state, count(*) as n from jobfeed.jobs j
                 where p_final and j.state in ('completed', 'failed', 'canceled')
                 group by 1, 2) s
         group by s.kind) c
$$;

-- The stats' answer from both halves of the counts (state_counts), with the age
-- of the oldest due job and jobs finished per minute over the last p_minutes
-- (for the dashboard's chart).
create or replace function jobfeed.stats_of(p_unfinished jsonb, p_final jsonb, p_minutes int, p_now timestamptz)
returns jsonb language sql stable set search_path = jobfeed, pg_temp as $$
    select jsonb_build_object(
        'now', p_now,
        'counts', (select coalesce(jsonb_object_agg(k.kind, coalesce(p_unfinished -> k.kind, '{}'::jsonb)
                                                            || coalesce(p_final -> k.kind, '{}'::jsonb)), '{}'::jsonb)
                     from (select jsonb_object_keys(p_unfinished) union select jsonb_object_keys(p_final)) k(kind)),
        'oldest_due_seconds', (
            select extract(epoch from p_now - min(j.run_after)) from jobfeed.jobs j
             where j.state = 'queued' and j.run_after <= p_now
               -- a paused kind's jobs wait because an admin said so: an alert
               -- on this age must not fire for a pause
               and not exists (select from jobfeed.kinds k where k.kind = j.kind and k.paused)),
        'throughput', coalesce((
            select jsonb_agg(jsonb_build_object('minute', m.minute, 'completed', m.completed,
                                                'failed', m.failed) order by m.minute)
              from (
                select date_trunc('minute', j.finished_at) as minute,
                       count(*) filter (where j.state = 'completed') as completed,
                       count(*) filter (where j.state = 'failed') as failed
                  from jobfeed.jobs j
                 where j.state in ('completed', 'failed', 'canceled')
                   and j.finished_at > p_now - make_interval(mins => p_minutes)
                 group by 1) m), '[]'::jsonb))
$$;

-- Counts by kind and state, the age of the oldest due job, and jobs finished per
-- minute over the last p_minutes, all counted now: v0.1.0's API calls it on
-- every request; today's callers read stats_v2.
create or replace function jobfeed.stats(p_minutes int default 15, p_now timestamptz default null)
returns jsonb language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select jobfeed.stats_of(jobfeed.state_counts(false), jobfeed.state_counts(true), p_minutes, jobfeed.clock(p_now))
$$;

-- stats() as of at most p_max_age ago (its 'as_of' says when): the snapshot
-- when it is fresh enough, else counted anew by one caller at a time (the
-- others meanwhile answer the snapshot they find). However many API
-- processes, dashboards and scrapers, the table is counted at most once per
-- p_max_age. The final states' counts, whose cost grows with the history
-- kept, are recounted only once older than 30 times what their last count
-- took (and than p_max_age): a count of a long history then runs at most a
-- thirtieth of the time while anyone watches, and 'finished_as_of' says
-- when they were counted. A short history is recounted every time.
create or replace function jobfeed.stats_v2(
    p_minutes int default 15, p_max_age interval default '5 seconds', p_now timestamptz default null)
returns jsonb language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_snap jobfeed.stats_snapshot;
    v_body jsonb;
    v_started timestamptz;
begin
    select * into v_snap from jobfeed.stats_snapshot s where s.id = 1;
    -- a snapshot answered says when it was counted (as_of) and when it is
    -- answered (now): their difference is its age
    if found and v_snap.minutes = p_minutes and v_snap.as_of > v_now - p_max_age and v_snap.as_of <= v_now then
        return v_snap.body || jsonb_build_object('now', v_now);
    end if;
    if found and v_snap.minutes = p_minutes and not pg_try_advisory_xact_lock(hashtext('jobfeed.stats_v2')) then
        return v_snap.body || jsonb_build_object('now', v_now);  -- someone is counting right now
    end if;
    if v_snap.finished is null or v_snap.finished_as_of > v_now
       or v_snap.finished_as_of <= v_now - greatest(p_max_age, make_interval(secs => 30 * v_snap.finished_seconds)) then
        v_started := clock_timestamp();
        v_snap.finished := jobfeed.state_counts(true);
        v_snap.finished_seconds := extract(epoch from clock_timestamp() - v_started);
        v_snap.finished_as_of := v_now;
    end if;
    v_body := jobfeed.stats_of(jobfeed.state_counts(false), v_snap.finished, p_minutes, v_now)
              || jsonb_build_object('as_of', v_now, 'finished_as_of', v_snap.finished_as_of);
    perform jobfeed.sample_depth_from(v_body -> 'counts', v_now);  -- the depth chart, sweeper or not
    insert into jobfeed.stats_snapshot as s (id, minutes, as_of, body, finished, finished_as_of, finished_seconds)
    values (1, p_minutes, v_now, v_body, v_snap.finished, v_snap.finished_as_of, v_snap.finished_seconds)
    on conflict (id) do update set minutes = excluded.minutes, as_of = excluded.as_of, body = excluded.body,
                                   finished = excluded.finished, finished_as_of = excluded.finished_as_of,
                                   finished_seconds = excluded.finished_seconds;
    return v_body;
end $$;
