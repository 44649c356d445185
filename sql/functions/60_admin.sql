-- Admin actions. Errors: not_found (JF404), invalid_state and target_busy (JF409).

-- Re-run a failed or canceled job: attempts back to 0, queued now. Its generation
-- keeps growing, so a stale worker of an earlier run stays fenced out.
create or replace function jobfeed.retry(p_id uuid, p_now timestamptz default null)
returns jsonb language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_state jobfeed.job_state;
    v_kind text;
    v_ver bigint;
begin
    select j.state into v_state from jobfeed.jobs j where j.id = p_id for update;
    if not found then
        perform jobfeed.raise_error('JF404', 'not_found', 'no such job');
    end if;
    if v_state not in ('failed', 'canceled') then
        perform jobfeed.raise_error('JF409', 'invalid_state',
                                    format('only failed or canceled jobs can be retried; this one is %s', v_state));
    end if;
    begin
        update jobfeed.jobs j
           set state = 'queued', attempts = 0, run_after = v_now, lease_until = null, finished_at = null,
               result = null, updated_at = v_now, version = j.version + 1,
               requesters = 0  -- its requests ended when it was final
         where j.id = p_id
        returning j.version, j.kind into v_ver, v_kind;
    exception when unique_violation then
        perform jobfeed.raise_error('JF409', 'target_busy',
                                    'another unfinished job already holds this kind and target');
    end;
    -- Its requests ended when it was final: one leaving later must not count
    -- against those who request the retried run.
    update jobfeed.requests r set left_at = v_now where r.job_id = p_id and r.left_at is null;
    perform jobfeed.notify_changed(array[p_id], array[v_ver]);
    perform jobfeed.notify_due(v_kind, 1);
    return jobfeed.admin_get_job(p_id);
end $$;

-- Cancel a queued or running job. A worker running it learns at its next
-- heartbeat (the lease is lost) and stops.
create or replace function jobfeed.cancel(p_id uuid, p_now timestamptz default null)
returns jsonb language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_state jobfeed.job_state;
    v_gen int;
    v_ver bigint;
begin
    select j.state, j.generation into v_state, v_gen from jobfeed.jobs j where j.id = p_id for update;
    if not found then
        perform jobfeed.raise_error('JF404', 'not_found', 'no such job');
    end if;
    if v_state not in ('queued', 'running') then
        perform jobfeed.raise_error('JF409', 'invalid_state',
                                    format('only unfinished jobs can be canceled; this one is %s', v_state));
    end if;
    update jobfeed.jobs j
       set state = 'canceled', lease_until = null, finished_at = v_now, updated_at = v_now,
           version = j.version + 1
     where j.id = p_id
    returning j.version into v_ver;
    if v_state = 'running' then
        perform jobfeed.finish_attempts(array[p_id], array[v_gen], 'canceled', 'canceled',
                                        'canceled by an admin', v_now);
    end if;
    perform jobfeed.notify_changed(array[p_id], array[v_ver]);
    return jobfeed.admin_get_job(p_id);
end $$;
