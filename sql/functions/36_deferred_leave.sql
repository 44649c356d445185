-- Deferred leaves (sql/migrations/0018_deferred_leave.sql). A job page that
-- closes cannot tell a closed tab from a reload or going Back, so it asks for
-- its request to leave later (leave_later) and a page that comes back calls
-- it off (stay). Until then the request is active like any other: counted in
-- the job's requesters and against the per-requester cap, its webhook due.
-- The sweeper applies the leaves past due (leave_due) through leave(), so the
-- abandon rules stay leave()'s alone.

-- The request leaves at p_now + p_grace unless it stays first: answers its
-- job's public view and when it will leave. A leave already pending at an
-- earlier time keeps it (asking again never puts a leave off). A grace of
-- zero (or none) leaves at once, through leave(); so does a request whose job
-- is final (it waits for nothing: no leave to put off), and one that has left
-- is answered as leave() answers it (idempotent); leave_at null for all
-- three. JF404 for an unknown request.
create or replace function jobfeed.leave_later(p_request uuid, p_grace interval, p_now timestamptz default null)
returns table (view jsonb, leave_at timestamptz)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
#variable_conflict use_column
declare
    v_job_id uuid;
    v_at timestamptz;
begin
    if p_grace is not null and p_grace > '0' then
        update jobfeed.requests r set leave_at = least(r.leave_at, jobfeed.clock(p_now) + p_grace)
          from jobfeed.jobs j
         where r.id = p_request and r.left_at is null
           and j.id = r.job_id and j.state not in ('completed', 'failed', 'canceled')
        returning r.job_id, r.leave_at into v_job_id, v_at;
        if found then
            return query select jobfeed.with_position(jobfeed.public_view(j), j.id), v_at
                           from jobfeed.jobs j where j.id = v_job_id;
            return;
        end if;
    end if;
    return query select jobfeed.leave(p_request, p_now), null::timestamptz;
end $$;

-- The request stays: its pending leave, if any, is called off. Answers its
-- job's public view and whether a leave was pending: a page that came back
-- and finds none may have beaten its own closing beacon here, and asks again
-- a moment later. JF409 request_left when it has left already (its leave was
-- applied: too late to stay), JF404 for an unknown request.
create or replace function jobfeed.stay(p_request uuid)
returns table (view jsonb, called_off boolean)
language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_job_id uuid;
    v_left_at timestamptz;
    v_called_off boolean;
begin
    update jobfeed.requests r set leave_at = null
     where r.id = p_request and r.left_at is null and r.leave_at is not null
    returning r.job_id into v_job_id;
    v_called_off := found;
    if not v_called_off then  -- nothing pending: no write
        select r.job_id, r.left_at into v_job_id, v_left_at from jobfeed.requests r where r.id = p_request;
        if not found then
            perform jobfeed.raise_error('JF404', 'not_found', 'no such request');
        end if;
        if v_left_at is not null then
            perform jobfeed.raise_error('JF409', 'request_left', 'this request has left its job');
        end if;
    end if;
    return query select jobfeed.with_position(jobfeed.public_view(j), j.id), v_called_off
                   from jobfeed.jobs j where j.id = v_job_id;
end $$;

-- The sweeper: up to p_limit pending leaves due by p_now, each applied by
-- leave(), earliest first. Answers how many it applied: a pending leave whose
-- job became final meanwhile is dropped, not counted (that request stopped
-- being active with its job). Sweepers running at once take different
-- requests (SKIP LOCKED); one that stays meanwhile holds its row, is passed
-- over, and is found with no leave pending next time.
create or replace function jobfeed.leave_due(p_limit int default 200, p_now timestamptz default null)
returns int language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_id uuid;
    v_final boolean;
    v_count int := 0;
begin
    for v_id, v_final in
        select r.id, j.state in ('completed', 'failed', 'canceled')
          from jobfeed.requests r join jobfeed.jobs j on j.id = r.job_id
         where r.leave_at <= jobfeed.clock(p_now) and r.left_at is null
         order by r.leave_at
         limit p_limit
           for update of r skip locked
    loop
        if v_final then
            update jobfeed.requests r set leave_at = null where r.id = v_id;
        else
            perform jobfeed.leave(v_id, p_now);
            v_count := v_count + 1;
        end if;
    end loop;
    return v_count;
end $$;
