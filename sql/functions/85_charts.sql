-- The dashboard's charts: depth by kind over the last hour, wait p50/p95 by kind,
-- failures by code.

-- One sample per kind (queued and running, counted through jobs_kind_state_id),
-- taken by the sweeper each round; samples older than two hours go.
create or replace function jobfeed.sample_depth(p_now timestamptz default null)
returns int language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_n int;
begin
    delete from jobfeed.depth_samples s where s.at < v_now - interval '2 hours';
    insert into jobfeed.depth_samples (at, kind, queued, running)
    select v_now, k.kind,
           (select count(*) from jobfeed.jobs j where j.kind = k.kind and j.state = 'queued'),
           (select count(*) from jobfeed.jobs j where j.kind = k.kind and j.state = 'running')
      from jobfeed.kinds k
    on conflict do nothing;
    get diagnostics v_n = row_count;
    return v_n;
end $$;

-- The same sample from counts made already (stats_v2's, when it recounts), at
-- most one a minute: without a sweeper the chart still fills while anyone
-- reads the stats (the dashboard, /metrics, /api/admin/stats); with one, its
-- samples leave these out.
create or replace function jobfeed.sample_depth_from(p_counts jsonb, p_now timestamptz)
returns void language plpgsql as $$
begin
    if exists (select from jobfeed.depth_samples s
                where s.at > p_now - interval '1 minute' and s.at <= p_now) then
        return;
    end if;
    delete from jobfeed.depth_samples s where s.at < p_now - interval '2 hours';
    insert into jobfeed.depth_samples (at, kind, queued, running)
    select p_now, k.kind, coalesce((p_counts -> k.kind ->> 'queued')::int, 0),
           coalesce((p_counts -> k.kind ->> 'running')::int, 0)
      from jobfeed.kinds k
    on conflict do nothing;
end $$;

-- Over the last hour: the depth samples; the wait (due to claimed) of the last
-- attempt of jobs that finished, p50 and p95 by kind; jobs that failed, by kind
-- and code. Finished jobs are found through jobs_finished_at, never a scan.
create or replace function jobfeed.charts(p_now timestamptz default null)
returns jsonb language sql stable security definer set search_path = jobfeed, pg_temp as $$
    with recent as (
        select j.kind, j.state, j.last_error_code, extract(epoch from j.claimed_at - j.run_after) as wait
          from jobfeed.jobs j
         where j.state in ('completed', 'failed', 'canceled')
           and j.finished_at > jobfeed.clock(p_now) - interval '1 hour')
    select jsonb_build_object(
        'now', jobfeed.clock(p_now),
        'depth', coalesce((
            select jsonb_agg(jsonb_build_object('at', s.at, 'kind', s.kind, 'queued', s.queued,
                                                'running', s.running) order by s.at, s.kind)
              from jobfeed.depth_samples s
             where s.at > jobfeed.clock(p_now) - interval '1 hour'), '[]'::jsonb),
        'wait', coalesce((
            select jsonb_agg(jsonb_build_object('kind', w.kind, 'jobs', w.n, 'p50', w.p50, 'p95', w.p95)
                             order by w.kind)
              from (select r.kind, count(*) as n,
                           percentile_cont(0.5) within group (order by r.wait) as p50,
                           percentile_cont(0.95) within group (order by r.wait) as p95
                      from recent r where r.wait is not null group by r.kind) w), '[]'::jsonb),
        'failures', coalesce((
            select jsonb_agg(jsonb_build_object('kind', f.kind, 'code', f.code, 'jobs', f.n)
                             order by f.n desc, f.kind, f.code)
              from (select r.kind, coalesce(r.last_error_code, 'unknown') as code, count(*) as n
                      from recent r where r.state = 'failed' group by 1, 2) f), '[]'::jsonb))
$$;
