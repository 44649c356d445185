-- Helpers shared by the queue's functions. Not callable by the service roles.

-- What end users see. Retries are invisible: once a job has been claimed
-- (generation > 0) it shows 'processing' until it reaches a final state.
-- Stable, not immutable: the planner inlines an immutable function only when
-- all of it is immutable, and an enum's text (p_state::text) is stable, so
-- every view called it as a function of its own.
create or replace function jobfeed.public_status(p_state jobfeed.job_state, p_generation int)
returns text language sql stable parallel safe as $$
    select case p_state
        when 'waiting' then case when p_generation > 0 then 'processing' else 'queued' end
        when 'queued' then case when p_generation > 0 then 'processing' else 'queued' end
        when 'running' then 'processing'
        else p_state::text
    end
$$;

-- Before PostgreSQL 18 the statements of a SQL-language function that is not
-- inlined are planned at every call; 18 keeps their plans. There such a
-- function is redefined (94_keep_plans.sql) as PL/pgSQL around the same
-- statement, whose plan a session keeps: its body stays written once, in SQL,
-- and means the same (a column wins over a parameter of the same name, a
-- scalar is the first row's value, or null). Its plans are generic, as the SQL
-- function's were (planned without the parameters' values), made once.
create or replace function jobfeed.keep_plans_before_18(p_fn regproc)
returns void language plpgsql as $$
declare
    v_def text;
    v_body text;
    v_fn pg_proc;
begin
    if current_setting('server_version_num')::int >= 180000 then
        return;
    end if;
    select * into v_fn from pg_proc p where p.oid = p_fn;
    v_def := pg_get_functiondef(p_fn);
    v_body := regexp_replace(substring(v_def from 'AS \$function\$(.*)\$function\$'), ';?\s*$', '');
    v_body := E'\n#variable_conflict use_column\n' || case
        when v_fn.proretset then E'begin\n    return query ' || v_body || E';\nend\n'
        -- a void function's rows (each chunk's NOTIFY, say) all run, as in SQL
        when v_fn.prorettype = 'void'::regtype
            then E'begin\n' || regexp_replace(v_body, '^((\s|--[^\n]*\n)*)select\M', '\1perform', 'i') || E';\nend\n'
        -- (INTO on a line of its own: the body's last line may be a comment)
        else E'declare\n    _result ' || format_type(v_fn.prorettype, null) || E';\nbegin\n' || v_body
             || E'\n    into _result;\n    return _result;\nend\n'
    end;
    execute replace(substring(v_def from '^(.*)AS \$function\$'), E'\n LANGUAGE sql\n',
                    E'\n LANGUAGE plpgsql\n'
                    || case when not coalesce(v_fn.proconfig::text ~ 'plan_cache_mode=', false)
                            then E' SET plan_cache_mode TO ''force_generic_plan''\n' else '' end)
            || 'AS $function$' || v_body || '$function$';
end
$$;

-- Whether a change of state from p_old to p_new ended the job (its triggers' test).
create or replace function jobfeed.became_final(p_old jobfeed.job_state, p_new jobfeed.job_state)
returns boolean language sql immutable parallel safe as $$
    select p_new in ('completed', 'failed', 'canceled') and p_old is distinct from p_new
$$;

-- Whether the session's login role owns the schema (tests and the operator at
-- psql), and so may plant the time (clock, below).
create or replace function jobfeed.may_set_clock()
returns boolean language sql stable as $$
    select pg_has_role(session_user, (select n.nspowner from pg_namespace n where n.nspname = 'jobfeed'), 'usage')
$$;

-- The time a function works at: now(), or p_now when the session may set the
-- clock. A service role passing p_now is ignored, so it cannot, say, claim jobs
-- whose lease has not expired by pretending the clock has moved on. Without a
-- sub-select of its own, so the planner inlines it: most callers pass null.
create or replace function jobfeed.clock(p_now timestamptz)
returns timestamptz language sql stable as $$
    select case
        when p_now is null then now()
        when jobfeed.may_set_clock() then p_now
        else now()
    end
$$;

-- Raise a queue error the Python side maps to an HTTP status: the SQLSTATE class
-- 'JF' marks ours, the HINT carries the stable error code.
create or replace function jobfeed.raise_error(p_sqlstate text, p_code text, p_message text)
returns void language plpgsql as $$
begin
    raise exception '%', p_message using errcode = p_sqlstate, hint = p_code;
end $$;

-- What is wrong with a submission, as {sqlstate, code, message}, or null when
-- nothing is. The one place for the rule; a single SQL expression, so that
-- submit_many's set-based check over a whole batch inlines it.
create or replace function jobfeed.submission_problem(p_target text, p_payload jsonb, p_max_payload int)
returns text[] language sql stable parallel safe as $$
    select case
        when p_target is null or octet_length(p_target) not between 1 and 512
            then array['JF422', 'invalid_target', 'target must be 1 to 512 bytes']
        when jsonb_typeof(coalesce(p_payload, '{}')) <> 'object'
            then array['JF422', 'invalid_payload', 'payload must be a JSON object']
        when octet_length(coalesce(p_payload, '{}')::text) > p_max_payload
            then array['JF413', 'payload_too_large', format('payload is over %s bytes', p_max_payload)]
    end
$$;

-- What is wrong with a concurrency key (null: none), in submission_problem's
-- form. With submission_problem, the rules a job's row must meet: every
-- function that writes a job's target, payload or key checks them first (the
-- table has no CHECK constraints for them, see migration 0019).
create or replace function jobfeed.key_problem(p_concurrency_key text)
returns text[] language sql immutable parallel safe as $$
    select case when octet_length(p_concurrency_key) not between 1 and 512
                then array['JF422', 'invalid_concurrency_key', 'concurrency_key must be 1 to 512 bytes'] end
$$;

-- What is wrong with a batch of one kind, in submission_problem's form: its
-- first item with a problem (the message naming the item), else its
-- concurrency key's; null when nothing is. submit_many_v2 raises it; the
-- request batch's one-statement path (submit_many_requests) is taken only
-- when it is null.
create or replace function jobfeed.batch_problem(p_targets text[], p_payloads jsonb[], p_max_payload int,
                                                 p_concurrency_key text)
returns text[] language sql stable parallel safe as $$
    select coalesce(
        (select array[c.problem[1], c.problem[2], format('item %s: %s', c.n, c.problem[3])]
           from (select t.n, jobfeed.submission_problem(t.target, t.payload, p_max_payload) as problem
                   from unnest(p_targets, p_payloads) with ordinality t(target, payload, n)) c
          where c.problem is not null
          order by c.n
          limit 1),
        jobfeed.key_problem(p_concurrency_key))
$$;

-- Ids for a batch of new jobs, cheaper than uuid_v7() per row (which draws from
-- the OS each time: this PostgreSQL is built without OpenSSL, ~4 us a draw).
-- p_prefix is the first 17 hex digits of one uuid_v7() taken for the whole
-- batch (its time, version and sub-millisecond bits, then the variant digit
-- '8'); the other 60 bits are md5 of one strong random p_seed per batch and the
-- item's number, so they stay unguessable. Same layout as uuid_v7(): time-ordered.
create or replace function jobfeed.uuid_v7_in_batch(p_prefix text, p_seed text, p_n bigint)
returns uuid language sql immutable parallel safe as $$
    select (p_prefix || left(md5(p_seed || p_n::text), 15))::uuid
$$;

-- p_n ids for one batch, in that layout: one uuid_v7() prefix and one strong
-- seed for the lot. One generic plan: under the default plan cache mode a
-- small batch's call planned the statement anew every time (the generic
-- plan's row estimate for generate_series(1, p_n) looks dearer than a custom
-- plan for a few rows), which cost more than making the ids (tests/test_plans.py).
create or replace function jobfeed.uuid_v7_batch(p_n int)
returns uuid[] language plpgsql volatile set plan_cache_mode = force_generic_plan as $$
declare
    v_prefix text := left(replace(jobfeed.uuid_v7()::text, '-', ''), 16) || '8';
    v_seed text := gen_random_uuid()::text;
begin
    return array(select jobfeed.uuid_v7_in_batch(v_prefix, v_seed, k) from generate_series(1, p_n) k order by k);
end $$;

-- "This job changed", the payload notify_changed writes for one job.
create or replace function jobfeed.notify_changed_one(p_id uuid, p_version bigint)
returns void language sql as $$
    select pg_notify('jobfeed_changed', p_id::text || ':' || p_version::text)
$$;

-- Jobs with a number each, on p_channel as "id:n,id:n,...": one NOTIFY per chunk
-- of 150 (a payload holds < 8000 bytes), never one per row. The chunks in one
-- statement: a statement per chunk, each subscripting the arrays, cost more
-- than the NOTIFYs. PL/pgSQL, whose plan the session keeps: a completion batch
-- calls it.
create or replace function jobfeed.notify_pairs(p_channel text, p_ids uuid[], p_numbers bigint[])
returns void language plpgsql as $$
begin
    perform pg_notify(p_channel, string_agg(u.id::text || ':' || u.n::text, ',' order by u.k))
       from unnest(p_ids, p_numbers) with ordinality u(id, n, k)
      group by (u.k - 1) / 150;
end $$;

-- "These jobs changed", with their versions. Listeners re-read state; the
-- version lets the public feed skip jobs whose public view did not change.
create or replace function jobfeed.notify_changed(p_ids uuid[], p_versions bigint[])
returns void language plpgsql as $$
begin
    if cardinality(p_ids) = 1 then  -- the common case, without the aggregate
        perform jobfeed.notify_changed_one(p_ids[1], p_versions[1]);
        return;
    end if;
    perform jobfeed.notify_pairs('jobfeed_changed', p_ids, p_versions);
end $$;

-- "These attempts were ended by someone else" (a cancel, a replacing duplicate,
-- the last requester leaving), as "id:generation" on jobfeed_fenced: the worker
-- running one stops its handler at once instead of at its next heartbeat
-- (which stays the fallback: a notification is only a hint).
create or replace function jobfeed.notify_fenced(p_ids uuid[], p_generations int[])
returns void language sql as $$
    select jobfeed.notify_pairs('jobfeed_fenced', p_ids, p_generations::bigint[])
$$;

-- "p_count jobs of p_kind became due", on jobfeed_due, as 'count:offset:kind'.
-- Workers take turns: each holds a numbered seat per kind (an advisory lock on
-- its own connection; see worker/runner.py), and a notification wakes only the
-- p_count seats from the offset on, drawn here at random, so a submit of one
-- job wakes one worker, not all of them. Workers with no seat view (or an old
-- payload of the kind alone) wake for every notification.
create or replace function jobfeed.notify_due(p_kind text, p_count int)
returns void language sql as $$
    select pg_notify('jobfeed_due', p_count::text || ':' || floor(random() * 1000000)::int::text || ':' || p_kind)
$$;

-- A progress report's place on the way to done: done/total, or 0 when the
-- total is unknown (such reports are never judged to go backwards).
create or replace function jobfeed.progress_rank(p jsonb)
returns double precision language sql immutable parallel safe as $$
    select case
        when p is null then -1
        when coalesce((p ->> 'total')::double precision, 0) > 0
            then (p ->> 'done')::double precision / (p ->> 'total')::double precision
        else 0
    end
$$;

-- Would showing progress p_new instead of p_old look like going backwards? A
-- bar shown (a total): by fractions (a count after a bar that had moved is a
-- step back); a count shown (no total): by what is done, whatever the new
-- report's total.
create or replace function jobfeed.progress_behind(p_new jsonb, p_old jsonb)
returns boolean language sql immutable parallel safe as $$
    select case
        when p_old is null then false
        when coalesce((p_old ->> 'total')::double precision, 0) > 0
            then jobfeed.progress_rank(p_new) < jobfeed.progress_rank(p_old)
        else (p_new ->> 'done')::double precision < (p_old ->> 'done')::double precision
    end
$$;

-- Log the end of the attempts (job, generation) from the job rows, which still
-- hold the attempt's number, worker and claim time. p_generations null: the
-- jobs' current ones. (complete_many logs only a rerun's completion, from its
-- UPDATE; a completed job's row is its last attempt's record: ended_attempts.)
-- The jobs by key (a nested loop on jobs_pkey): its plan is kept for the
-- session (every retry, failure, release and cancel calls it), and one made on a
-- tiny table hash-joined a scan of the whole table, kept as it grew. One
-- generic plan: the default plan cache mode planned every call anew (a custom
-- plan for a short p_ids looks cheaper than the generic one; tests/test_plans.py).
create or replace function jobfeed.finish_attempts(
    p_ids uuid[], p_generations int[], p_outcome text, p_code text, p_message text, p_now timestamptz)
returns void language sql set enable_seqscan = off set enable_hashjoin = off set enable_mergejoin = off
set plan_cache_mode = force_generic_plan as $$
    insert into jobfeed.attempts (job_id, generation, attempt, worker_id, started_at, finished_at,
                                  outcome, error_code, error_message)
    select j.id, j.generation, j.attempts, j.worker_id, j.claimed_at, p_now, p_outcome, p_code, p_message
      from unnest(p_ids, p_generations) as t(id, generation)
      join jobfeed.jobs j on j.id = t.id and (t.generation is null or j.generation = t.generation)
    on conflict (job_id, generation) do nothing
$$;

-- Running jobs whose lease expired, about to be claimed again: their attempt
-- ends as lease_expired, in the log and in last_error (which the admin list
-- and the error_code filters read), before the claim rewrites the rows.
create or replace function jobfeed.end_expired_attempts(p_ids uuid[], p_now timestamptz)
returns void language sql as $$
    select jobfeed.finish_attempts(p_ids, null, 'lease_expired', 'lease_expired',
                                   'the worker stopped renewing its lease', p_now);
    -- due again since its lease ran out: what the next claim's wait counts from
    -- (the worker's histogram, the dashboard's chart)
    update jobfeed.jobs j
       set last_error_code = 'lease_expired', last_error_message = 'the worker stopped renewing its lease',
           run_after = j.lease_until
     where j.id = any (p_ids);
$$;

-- Jobs whose lease expired with no attempts left become failed (lease_expired)
-- instead of sitting in 'running' forever. Called by claim and by the sweeper.
-- p_kinds null means every kind.
create or replace function jobfeed.fail_expired(p_kinds text[], p_now timestamptz)
returns int language plpgsql as $$
declare
    v_ids uuid[];
    v_gens int[];
    v_vers bigint[];
    v_kinds text[];
    v_rerun record;
begin
    -- A rerun asked for (on_duplicate="rerun") runs next, with the newest
    -- payload: queued now, whether or not attempts are left, so that neither
    -- the lease's end fails the job nor a reclaim runs the old payload again.
    for v_rerun in
        select j.id, j.generation from jobfeed.jobs j
         where j.state = 'running' and j.lease_until < p_now
           and j.rerun_payload is not null and (p_kinds is null or j.kind = any (p_kinds))
         for update skip locked
    loop
        perform jobfeed.start_rerun(v_rerun.id, v_rerun.generation, 'lease_expired', 'lease_expired',
                                    'the lease expired; the rerun asked for runs next', p_now);
    end loop;
    with expired as (
        select j.id from jobfeed.jobs j
         where j.state = 'running' and j.lease_until < p_now and j.attempts >= j.max_attempts
           and (p_kinds is null or j.kind = any (p_kinds))
         for update skip locked
    ), upd as (
        update jobfeed.jobs j
           set state = 'failed', lease_until = null, finished_at = p_now, updated_at = p_now,
               last_error_code = 'lease_expired',
               last_error_message = 'the lease expired and no attempts are left',
               version = j.version + 1
          from expired e
         where j.id = e.id
        returning j.id, j.generation, j.version, j.kind
    )
    select array_agg(id), array_agg(generation), array_agg(version), array_agg(kind)
      into v_ids, v_gens, v_vers, v_kinds from upd;
    if v_ids is null then
        return 0;
    end if;
    perform jobfeed.finish_attempts(v_ids, v_gens, 'lease_expired', 'lease_expired',
                                    'the lease expired and no attempts are left', p_now);
    perform jobfeed.notify_changed(v_ids, v_vers);
    perform jobfeed.notify_freed(v_kinds);
    return cardinality(v_ids);
end $$;

-- Which submissions may share a job (jobs.dedupe_scope): all of a "global"
-- kind (''); under "requester" those of one identity, and a submission
-- without one none (null: distinct in the unique index).
create or replace function jobfeed.dedupe_scope(p_dedupe text, p_requester text)
returns text language sql immutable parallel safe as $$
    select case when p_dedupe = 'requester' then nullif(p_requester, '') else '' end
$$;

-- A worker is lost when it has not beaten for two of its leases (its jobs'
-- leases have run out by then): the dashboard, `jobfeed top` and the schedules
-- list count only the others.
create or replace function jobfeed.worker_lost(w jobfeed.workers, p_now timestamptz)
returns boolean language sql stable as $$
    select w.last_seen < jobfeed.clock(p_now) - 2 * w.lease
$$;
