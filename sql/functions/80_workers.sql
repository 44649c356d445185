-- Workers' presence: what the dashboard's workers panel and `jobfeed top` show.

-- A worker's beat: its row, created on the first beat. A new worker also
-- removes rows of workers unseen for a day (crashed processes, long gone), so
-- the table stays the size of the fleet without a sweep.
create or replace function jobfeed.worker_beat(
    p_id text, p_host text, p_kinds text[], p_concurrency int, p_running int, p_lease interval,
    p_now timestamptz default null)
returns void language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_new boolean;
begin
    insert into jobfeed.workers as w (id, host, kinds, concurrency, running, lease, started_at, last_seen)
    values (p_id, p_host, p_kinds, p_concurrency, p_running, p_lease, v_now, v_now)
    on conflict (id) do update
       set kinds = excluded.kinds, concurrency = excluded.concurrency, running = excluded.running,
           lease = excluded.lease, last_seen = excluded.last_seen
    returning (xmax = 0) into v_new;
    if v_new then
        delete from jobfeed.workers w where w.last_seen < v_now - interval '1 day';
    end if;
end $$;

-- A worker stopping cleanly leaves the panel at once.
create or replace function jobfeed.worker_stopped(p_id text)
returns void language sql security definer set search_path = jobfeed, pg_temp as $$
    delete from jobfeed.workers w where w.id = p_id
$$;

-- Workers seen in the last hour, newest first; `lost` once a worker has been
-- silent for two of its leases (it beats every third of one). One generic plan:
-- the dashboard asks every few seconds (tests/test_plans.py).
create or replace function jobfeed.list_workers(p_now timestamptz default null)
returns jsonb language sql stable security definer set search_path = jobfeed, pg_temp
set plan_cache_mode = force_generic_plan as $$
    select coalesce(jsonb_agg(jsonb_build_object(
               'id', w.id, 'host', w.host, 'kinds', to_jsonb(w.kinds), 'concurrency', w.concurrency,
               'running', w.running, 'started_at', w.started_at, 'last_seen', w.last_seen,
               'lost', jobfeed.worker_lost(w, p_now))
             order by w.started_at desc, w.id), '[]'::jsonb)
      from jobfeed.workers w
     where w.last_seen > jobfeed.clock(p_now) - interval '1 hour'
$$;
