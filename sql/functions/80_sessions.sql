-- Admin sessions (the browser's cookie names one). Opening one also clears out
-- the expired ones, so the table stays as small as the number of live sessions.

create or replace function jobfeed.open_admin_session(p_lifetime interval, p_now timestamptz default null)
returns uuid language plpgsql security definer set search_path = jobfeed, pg_temp as $$
declare
    v_now timestamptz := jobfeed.clock(p_now);
    v_id uuid;
begin
    delete from jobfeed.admin_sessions s where s.expires_at <= v_now;
    insert into jobfeed.admin_sessions (expires_at, created_at) values (v_now + p_lifetime, v_now)
    returning id into v_id;
    return v_id;
end $$;

create or replace function jobfeed.admin_session_valid(p_id uuid, p_now timestamptz default null)
returns boolean language sql stable security definer set search_path = jobfeed, pg_temp as $$
    select exists (select from jobfeed.admin_sessions s
                    where s.id = p_id and s.expires_at > jobfeed.clock(p_now))
$$;

-- Sign-out: true when the session existed.
create or replace function jobfeed.close_admin_session(p_id uuid)
returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$
begin
    delete from jobfeed.admin_sessions s where s.id = p_id;
    return found;
end $$;
