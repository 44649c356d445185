-- Claiming jobs of a kind with limits: max_running (running jobs of the kind),
-- max_running_per_key (running jobs per concurrency_key) and rate (starts per
-- period), across every worker. claim_kind_v2 hands limited kinds here; kinds
-- without limits never come here and pay nothing for them.
--
-- Claimers of a limited kind take turns on a transaction-level advisory lock
-- (claim_v2 takes the locks of all its limited kinds first, in one order, so
-- two claimers never wait on each other crosswise); each then counts what
-- the one before it committed. Over-limit jobs simply stay queued.
create or replace function jobfeed.limits_lock(p_kind text)
returns void language sql as $$
    select pg_advisory_xact_lock(hashtext('jobfeed_limits:' || p_kind))
$$;

-- Its rows come as claim_kind_v2's do, run_after, created_at and traceparent
-- with them. (claim_limited, unreleased, answered without those three.)
drop function if exists jobfeed.claim_limited(text, int, text, interval, timestamptz, boolean, int, int, int, interval);
create or replace function jobfeed.claim_limited_v2(
    p_kind text, p_limit int, p_worker text, p_lease interval, p_now timestamptz, p_expired boolean,
    p_max_running int, p_max_per_key int, p_rate_count int, p_rate_period interval)
returns table (id uuid, kind text, target text, payload jsonb, attempts int, max_attempts int,
               generation int, lease_until timestamptz, checkpoint jsonb, lease interval,
               run_after timestamptz, created_at timestamptz, traceparent text)
language plpgsql as $$
#variable_conflict use_column
declare
    v_left int := p_limit;
    v_room int;
    v_ids uuid[] := '{}';
    v_want int;
    v_scan int;
    v_scanned int;
    v_pick uuid[];
    v_locked uuid[];
    v_skipped uuid[] := '{}';
    v_got int;
    v_total int := 0;
    v_at timestamptz := p_now;
begin
    perform jobfeed.limits_lock(p_kind);
    if p_rate_count is not null then
        delete from jobfeed.kind_starts s where s.kind = p_kind and s.at <= p_now - p_rate_period;
        v_left := least(v_left, p_rate_count - (select coalesce(sum(s.n), 0) from jobfeed.kind_starts s
                                                 where s.kind = p_kind and s.at > p_now - p_rate_period)::int);
    end if;

    -- Expired leases first (they count as running already: reclaiming one
    -- leaves the running count as it is).
    if p_expired and v_left > 0 then
        v_ids := array(
            select e.id from jobfeed.jobs e
             where e.kind = p_kind and e.state = 'running' and e.lease_until < p_now
               and e.attempts < e.max_attempts
             order by e.lease_until
             limit v_left
             for update skip locked);
        if cardinality(v_ids) > 0 then
            perform jobfeed.end_expired_attempts(v_ids, p_now);
        end if;
    end if;

    if p_max_running is not null then
        v_room := p_max_running - (select count(*) from jobfeed.jobs r
                                    where r.kind = p_kind and r.state = 'running')::int;
    end if;

    loop
        v_want := least(v_left - cardinality(v_ids), coalesce(v_room, v_left));
        v_pick := '{}';
        v_locked := '{}';
        if v_want > 0 then
            -- Pick, in claim order, the first due queued jobs whose key has
            -- room: running jobs per key are counted once (jobs_running_key),
            -- full keys are skipped by a hash probe, and within the scanned
            -- candidates a key gets no more than its room (row_number per key).
            -- The scan reads up to v_scan candidates, deeper than wanted, so
            -- one pass fills the claim though keys repeat near the head.
            v_scan := coalesce(v_scan, case when p_max_per_key is null then v_want else 2 * v_want + 64 end);
            with busy as materialized (
                select r.concurrency_key, count(*)::int as n from jobfeed.jobs r
                 where p_max_per_key is not null and r.kind = p_kind and r.state = 'running'
                   and r.concurrency_key is not null
                 group by r.concurrency_key)
            select coalesce(array_agg(c.id order by c.priority desc, c.run_after, c.id)
                                filter (where p_max_per_key is null or c.concurrency_key is null
                                           or c.rn + coalesce(c.running, 0) <= p_max_per_key), '{}'),
                   count(*)
              into v_pick, v_scanned
              from (select q.id, q.priority, q.run_after, q.concurrency_key, b.n as running,
                           row_number() over (partition by q.concurrency_key
                                              order by q.priority desc, q.run_after, q.id) as rn
                      from (select q.id, q.priority, q.run_after, q.concurrency_key from jobfeed.jobs q
                             where q.kind = p_kind and q.state = 'queued' and q.run_after <= p_now
                               and q.id <> all (v_skipped)
                               and (q.concurrency_key is null
                                    or q.concurrency_key not in (select b.concurrency_key from busy b
                                                                  where b.n >= p_max_per_key))
                             order by q.priority desc, q.run_after, q.id
                             limit v_scan) q
                      left join busy b on b.concurrency_key = q.concurrency_key) c;
            v_pick := v_pick[1:v_want];
            -- Lock what was picked; a job another session holds is skipped
            -- (and left out of later passes, so its key's next job may go).
            -- Each by its key: as one scan of the picked ids, PostgreSQL 15
            -- ANDed them, on a table not yet analyzed, with jobs_queued_due's
            -- range of every due job.
            v_locked := array(
                select l.id from unnest(v_pick) p(id)
                 cross join lateral (select j.id, j.priority, j.run_after from jobfeed.jobs j
                                      where j.id = p.id and j.state = 'queued' and j.run_after <= p_now
                                      for update skip locked) l
                 order by l.priority desc, l.run_after, l.id);
            if cardinality(v_locked) < cardinality(v_pick) then
                v_skipped := v_skipped || array(select unnest(v_pick) except select unnest(v_locked));
            end if;
            v_ids := v_ids || v_locked;
        end if;
        exit when cardinality(v_ids) = 0 and cardinality(v_pick) = cardinality(v_locked);
        -- Every pick was held by another session: pick again without those.
        continue when cardinality(v_ids) = 0;
        -- Unless a caller planted the time, p_now is the transaction's start,
        -- from before this claim waited for the kind's lock; a job taken here
        -- may have the slot a completion freed since. Its start is read from
        -- the clock after the counts, so it never precedes the end it
        -- follows, and a rate counts each start when it happened.
        if p_now = now() then
            v_at := clock_timestamp();
        end if;

        return query
            with upd as (
                update jobfeed.jobs j
                   set state = 'running', attempts = j.attempts + 1, generation = j.generation + 1,
                       lease_until = v_at + p_lease, worker_id = p_worker, claimed_at = v_at,
                       started_at = coalesce(j.started_at, v_at),
                       version = j.version + (j.generation = 0)::int,
                       updated_at = case when j.generation = 0 then v_at else j.updated_at end
                 where j.id = any (v_ids)
                -- only what the caller reads, as in claim_kind_v2
                returning j.id, j.kind, j.target, j.payload, j.attempts, j.max_attempts, j.generation,
                          j.lease_until, j.checkpoint, j.run_after, j.created_at, j.traceparent, j.version
            ), note as (
                select jobfeed.notify_changed(array_agg(u.id), array_agg(u.version)) from upd u
            )
            select u.id, u.kind, u.target, u.payload, u.attempts, u.max_attempts, u.generation,
                   u.lease_until, u.checkpoint, p_lease, u.run_after, u.created_at, u.traceparent
              from upd u, note;
        get diagnostics v_got = row_count;
        v_total := v_total + v_got;
        v_left := v_left - v_got;
        if v_room is not null then
            v_room := p_max_running - (select count(*) from jobfeed.jobs r
                                        where r.kind = p_kind and r.state = 'running')::int;
        end if;
        v_ids := '{}';
        -- Another pass only while the claim is short and more may be had:
        -- the scan stopped at its depth (go twice as deep), or a picked job
        -- was locked by another session.
        exit when v_left < 1 or (v_room is not null and v_room < 1) or v_want < 1;
        exit when cardinality(v_pick) = cardinality(v_locked)
              and (cardinality(v_locked) >= v_want or v_scanned < v_scan);
        if v_scanned >= v_scan and cardinality(v_pick) < v_want then
            v_scan := v_scan * 2;
        end if;
    end loop;

    if p_rate_count is not null and v_total > 0 then
        insert into jobfeed.kind_starts as s (kind, at, n) values (p_kind, v_at, v_total)
        on conflict (kind, at) do update set n = s.n + excluded.n;
    end if;
end $$;

-- Running jobs of these kinds (one element per job) just stopped running:
-- completed, failed, canceled. Under max_running or max_running_per_key a job
-- may be waiting for exactly that slot, and no run_after tells the workers when
-- (next_due_v2 leaves such jobs out): wake one claimer per freed slot, so the
-- slot is used at once rather than at the next poll. Kinds without a cap send
-- nothing. (A release or a transient failure wakes its kind already.)
create or replace function jobfeed.notify_freed(p_kinds text[])
returns void language plpgsql as $$
begin
    perform jobfeed.notify_due(f.kind, f.n)
       from (select x as kind, count(*)::int as n from unnest(p_kinds) x group by x) f
       join jobfeed.kinds k on k.kind = f.kind
      where k.max_running is not null or k.max_running_per_key is not null;
end $$;
