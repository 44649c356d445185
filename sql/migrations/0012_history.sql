-- A jobs table holding a long history of finished jobs.

-- No statistics on jobs.state. Its distribution swings between two ANALYZEs:
-- taken over a week of finished jobs (or an idle queue), they say no job is
-- queued, and every job queued since is then estimated at one row. With that
-- estimate the claim's pick (and next_due) was planned as a walk of the
-- dedupe index over every unfinished job of the kind, filtered and sorted,
-- instead of the ordered scan of jobs_queued_priority that stops at its limit.
-- Without statistics the planner assumes a few rows per state, and an ordered
-- index scan with a LIMIT wins whatever the table holds. The partial indexes
-- (whose predicates name states) keep every plan on the right rows.
alter table jobfeed.jobs alter column state set statistics 0;

-- Statistics an earlier ANALYZE gathered stay until cleared (PostgreSQL 18
-- can clear them; on older servers they stay until the table is recreated,
-- and the claim test's plan holds only from 18 on).
do $$
begin
    if exists (select from pg_proc where proname = 'pg_clear_attribute_stats') then
        perform pg_clear_attribute_stats('jobfeed', 'jobs', 'state', false);
    end if;
end $$;

-- Job ids, cheaper: uuid_v7() drew its random bits from the OS for every row
-- (gen_random_uuid(); this PostgreSQL is built without OpenSSL, so a draw is
-- a read of /dev/urandom), which was half of what inserting a job costs. The
-- random bits are now md5 of a secret drawn once per session (kept in the
-- session's jobfeed.id_seed) and random(), as uuid_v7_in_batch does per batch:
-- still unguessable without the secret, same layout (unix ms, version 7,
-- 12 sub-ms bits, variant 8, 60 random bits), still time-ordered.
create or replace function jobfeed.id_seed()
returns text language sql volatile parallel restricted as $$
    select coalesce(nullif(current_setting('jobfeed.id_seed', true), ''),
                    set_config('jobfeed.id_seed', gen_random_uuid()::text, false))
$$;

-- One expression referring to p_at once, so the planner inlines it (a call
-- of a SQL function that is not inlined costs more than the id itself):
-- floor(unix ms * 4096) is the 48 bits of ms then the 12 sub-ms bits, and the
-- version digit goes in between.
create or replace function jobfeed.uuid_v7(p_at timestamptz default clock_timestamp())
returns uuid language sql volatile parallel restricted as $$
    select (overlay(lpad(to_hex(floor(extract(epoch from p_at) * 4096000)::bigint), 15, '0') placing '7' from 13 for 0)
            || '8' || left(md5(jobfeed.id_seed() || random()::text), 15))::uuid
$$;
