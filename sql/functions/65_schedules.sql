-- Periodic jobs (see worker/schedules.py): the schedule's definition, and one
-- job per slot.

create or replace function jobfeed.register_schedule(
    p_kind text, p_schedule text, p_timezone text, p_every interval, p_now timestamptz default null)
returns void language sql security definer set search_path = jobfeed, pg_temp as $$
    insert into jobfeed.schedules as s (kind, schedule, timezone, every, since, updated_at)
    values (p_kind, p_schedule, coalesce(p_timezone, 'UTC'), p_every, jobfeed.clock(p_now), jobfeed.clock(p_now))
    on conflict (kind) do update
       set schedule = excluded.schedule, timezone = excluded.timezone, every = excluded.every,
           updated_at = excluded.updated_at
     where (s.schedule, s.timezone, s.every) is distinct from (excluded.schedule, excluded.timezone, excluded.every)
$$;

-- A worker runs p_kind, which has no schedule (any more): it makes no slots,
-- so none is listed as coming. Its slots' records stay until the sweeper's.
create or replace function jobfeed.drop_schedule(p_kind text)
returns void language sql security definer set search_path = jobfeed, pg_temp as $$
    delete from jobfeed.schedules s where s.kind = p_kind
$$;

-- Record slot p_slot of p_kind and insert its job (target: the slot's time,
-- RFC 3339 UTC; due at the slot) in one transaction. Null when the slot was
-- taken already (another scheduler, or a repeat) or came before the schedule
-- was first registered. A second scheduler's insert waits for the first's to
-- commit, then finds the slot taken: never two jobs for one slot.
-- A job submitted by hand for the slot's target before the slot came is the
-- slot's job; not yet started, it is made due at the slot (one still waiting
-- for its dependencies or signals, once they are in): a submission for a later
-- time cannot hold a slot back.
create or replace function jobfeed.enqueue_slot(p_kind text, p_slot timestamptz, p_now timestamptz default null)
returns uuid language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_job uuid;
    v_created boolean;
    v_version bigint;
begin
    if not exists (select from jobfeed.schedules s where s.kind = p_kind and s.since <= p_slot) then
        return null;
    end if;
    insert into jobfeed.schedule_slots (kind, slot, created_at) values (p_kind, p_slot, jobfeed.clock(p_now))
    on conflict do nothing;
    if not found then
        return null;
    end if;
    select s.id, s.created into v_job, v_created
      from jobfeed.submit_v2(p_kind, to_char(p_slot at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS"Z"'), '{}',
                             p_slot, 65536, p_now) s;
    if not v_created then
        -- a new version: its scheduled_for is gone, which a stream that
        -- reconnects with the old one must hear of too
        update jobfeed.jobs j set run_after = p_slot, updated_at = greatest(j.updated_at, jobfeed.clock(p_now)),
                                  version = j.version + 1
         where j.id = v_job and j.state in ('queued', 'waiting') and j.generation = 0 and j.run_after > p_slot
        returning j.version into v_version;
        if found then
            perform jobfeed.notify_changed(array[v_job], array[v_version]);
            perform jobfeed.notify_due(p_kind, 1);
        end if;
    end if;
    update jobfeed.schedule_slots t set job_id = v_job where t.kind = p_kind and t.slot = p_slot;
    return v_job;
end $$;

-- Each schedule with its last slot and that slot's job.
create or replace function jobfeed.list_schedules()
returns setof jsonb language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select jsonb_build_object(
        'kind', s.kind, 'schedule', s.schedule, 'timezone', s.timezone,
        'every_seconds', extract(epoch from s.every), 'since', s.since,
        'last_slot', l.slot, 'last_job', l.job_id,
        'last_status', (select jobfeed.public_status(j.state, j.generation) from jobfeed.jobs j where j.id = l.job_id),
        'paused', coalesce((select k.paused from jobfeed.kinds k where k.kind = s.kind), false),
        -- the live workers that run the kind: none, and no slot gets its job
        -- (a schedule stays listed until a worker runs the kind without one)
        'workers', (select count(*) from jobfeed.workers w
                     where s.kind = any (w.kinds) and not jobfeed.worker_lost(w, null)))
      from jobfeed.schedules s
      left join lateral (select t.slot, t.job_id from jobfeed.schedule_slots t
                          where t.kind = s.kind order by t.slot desc limit 1) l on true
     order by s.kind
$$;
