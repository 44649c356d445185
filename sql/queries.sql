-- Named queries the Python side runs. Each is one call of a function in
-- sql/functions/, so the rules stay in the database.

-- name: register_kind
select jobfeed.register_kind_v2($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12);

-- name: list_kinds
select k::text from jobfeed.list_kinds() k;

-- name: submit
select id, created, view::text from jobfeed.submit_quick($1, $2, $3::jsonb, $4, $5, null, $6, $7, true);

-- name: submit_id
select id, created from jobfeed.submit_quick($1, $2, $3::jsonb, $4, $5, null, $6, $7, false);

-- name: submit_waiting
select id, created, view::text, request_id, reused
  from jobfeed.submit_waiting_v2($1, $2, $3::jsonb, $4::uuid[], $5::text[], $6, $7, null, $8, $9, $10, $11, $12,
                                 $13, $14, $15);

-- name: signal
select first, view::text from jobfeed.signal_v2($1, $2, $3::jsonb, $4);

-- name: submit_many
select id, created from jobfeed.submit_many_v2($1, $2, $3::jsonb[], $4, $5, null, $6, $7);

-- name: submit_many_views
select id, created, view::text from jobfeed.submit_many_views_v2($1, $2, $3::jsonb[], $4, $5, $6, $7);

-- name: submit_request
select id, created, view::text, request_id, reused
  from jobfeed.submit_request($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9, null, $10, $11);

-- name: submit_many_requests
select id, created, view::text, request_id, reused
  from jobfeed.submit_many_requests($1, $2, $3::jsonb[], $4, $5, $6, $7, $8, null, $9, $10, $11);

-- name: leave
select jobfeed.leave($1)::text;

-- name: leave_later
select view::text, leave_at from jobfeed.leave_later($1, $2);

-- name: stay
select view::text, called_off from jobfeed.stay($1);

-- name: may_view
select jobfeed.may_view($1, $2, $3);

-- name: set_kind_request_policy
select jobfeed.set_kind_request_policy_v2($1, $2, $3, $4, $5);

-- name: get_job
select jobfeed.get_job($1)::text;

-- name: get_jobs
-- Each view with what the feed reads of it (api/subscriptions.py, View.of_row):
-- id, version, status, requesters, position and updated_at in epoch seconds,
-- read here from the view just built rather than parsed again by the API.
select v::text, v->>'id', (v->>'version')::int, v->>'status', (v->>'requesters')::int,
       (v->>'position')::int, extract(epoch from (v->>'updated_at')::timestamptz)::float8
  from jobfeed.get_jobs($1) v;

-- name: positions
select id, position from jobfeed.positions($1);

-- name: admin_get_job
select jobfeed.admin_get_job($1)::text;

-- name: admin_get_jobs
select v::text from jobfeed.admin_get_jobs($1) v;

-- name: admin_list_jobs
select v::text from jobfeed.admin_list_jobs($1::jobfeed.job_state, $2, $3, $4) v;

-- name: stats
select jobfeed.stats_v2($1, $2)::text;

-- name: retry
select jobfeed.retry($1)::text;

-- name: cancel
select jobfeed.cancel($1)::text;

-- name: set_kind_paused
select jobfeed.set_kind_paused($1, $2)::text;

-- name: bulk_retry
select changed, picked, last_id from jobfeed.bulk_retry($1::jobfeed.job_state, $2, $3, $4, $5, $6);

-- name: bulk_cancel
select changed, picked, last_id from jobfeed.bulk_cancel($1::jobfeed.job_state, $2, $3, $4, $5, $6);

-- name: claim
select id, kind, target, payload::text, attempts, max_attempts, generation, lease_until, checkpoint::text,
       extract(epoch from lease)::float8, signals::text, children::text, wait, age, traceparent
  from jobfeed.claim_v3($1, $2, $3, $4);

-- name: set_traceparent
select jobfeed.set_traceparent($1, $2);

-- name: worker_beat
select jobfeed.worker_beat($1, $2, $3, $4, $5, $6);

-- name: worker_stopped
select jobfeed.worker_stopped($1);

-- name: list_workers
select jobfeed.list_workers()::text;

-- name: sample_depth
select jobfeed.sample_depth();

-- name: charts
select jobfeed.charts()::text;

-- name: next_due
select jobfeed.next_due($1), now();

-- name: next_due_v2
select jobfeed.next_due_v2($1, $2), now();

-- name: extend_many
select jobfeed.extend_many($1, $2, $3);

-- name: progress
select jobfeed.progress($1, $2, $3, $4, $5);

-- name: checkpoint
select jobfeed.checkpoint($1, $2, $3::jsonb);

-- name: complete_many
select jobfeed.complete_many($1, $2, $3::jsonb[]);

-- name: complete_spawning
select jobfeed.complete_spawning($1, $2, $3::jsonb, $4::jsonb);

-- name: wait_for
select jobfeed.wait_for($1, $2, $3::jsonb, $4::uuid[]);

-- name: child_id
select jobfeed.child_id($1, $2, $3, $4, $5::jsonb, $6);

-- name: complete
select jobfeed.complete($1, $2, $3::jsonb);

-- name: fail_transient
select jobfeed.fail_transient($1, $2, $3, $4, $5);

-- name: fail_permanent
select jobfeed.fail_permanent($1, $2, $3, $4);

-- name: release
select jobfeed.release($1, $2, $3, $4, $5);

-- name: sweep_expired
select jobfeed.sweep_expired();

-- name: next_deadline
select jobfeed.next_deadline();

-- name: leave_due
select jobfeed.leave_due($1);

-- name: delete_finished_v2
select deleted, last_finished_at from jobfeed.delete_finished_v2($1, $2, $3);

-- name: delete_old_slots
select jobfeed.delete_old_slots($1);

-- name: open_admin_session
select jobfeed.open_admin_session(make_interval(secs => $1));

-- name: admin_session_valid
select jobfeed.admin_session_valid($1);

-- name: close_admin_session
select jobfeed.close_admin_session($1);

-- name: register_schedule
select jobfeed.register_schedule($1, $2, $3, $4);

-- name: drop_schedule
select jobfeed.drop_schedule($1);

-- name: enqueue_slot
select jobfeed.enqueue_slot($1, $2, $3);

-- name: list_schedules
select v::text from jobfeed.list_schedules() v;

-- name: file_stage
select jobfeed.file_stage($1, $2, $3);

-- name: file_put
select jobfeed.file_put($1, $2, $3);

-- name: file_attach
select jobfeed.file_attach($1, $2, $3);

-- name: file_discard
select jobfeed.file_discard($1);

-- name: output_begin
select jobfeed.output_begin($1, $2, $3, $4, $5);

-- name: output_finish
select jobfeed.output_finish($1, $2, $3, $4);

-- name: output_discard
select jobfeed.output_discard($1, $2);

-- name: files_of
select id, name, size, content_type, chunk_size from jobfeed.files_of($1, $2);

-- name: file_read
select jobfeed.file_read($1, $2, $3, $4);

-- name: missing_rights
-- The functions a service role ($1) may call and the login role may not: a
-- process started under the wrong role stops at once instead of failing
-- calls later (an owner or a superuser lacks none).
select current_user::text as login, count(*) as missing, min(p.proname::text) as example
  from pg_proc p
 where p.pronamespace = 'jobfeed'::regnamespace
   and has_function_privilege($1, p.oid, 'EXECUTE')
   and not has_function_privilege(p.oid, 'EXECUTE');

-- name: database_identity
-- Which database a connection reached, whatever address it went through (a
-- pooler's or the server's own): the cluster's identifier, and the database's
-- oid in it. Before the schema exists (a first migration), so not a function.
select (select system_identifier from pg_control_system()) as cluster,
       (select d.oid::int8 from pg_database d where d.datname = current_database()) as database,
       current_database()::text as name;

-- name: wake_all
-- The kind alone: every worker of it wakes, whatever the seats (worker/seats.py).
select pg_notify('jobfeed_due', k) from unnest($1::text[]) k;
