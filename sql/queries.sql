-- Named queries the Python side runs. Each is one call of a function in
-- sql/functions/, so the rules stay in the database.

-- name: register_kind
select jobfeed.register_kind($1, $2, $3, $4, $5, $6, $7);

-- name: list_kinds
select k::text from jobfeed.list_kinds() k;

-- name: submit
select id, created, view::text from jobfeed.submit($1, $2, $3::jsonb, $4, $5);

-- name: submit_many
select id, created from jobfeed.submit_many($1, $2, $3::jsonb[], $4, $5);

-- name: submit_many_views
select id, created, view::text from jobfeed.submit_many_views($1, $2, $3::jsonb[], $4);

-- name: submit_request
select id, created, view::text, request_id, reused
  from jobfeed.submit_request($1, $2, $3::jsonb, $4, $5, $6, $7, $8, $9);

-- name: submit_many_requests
select id, created, view::text, request_id, reused
  from jobfeed.submit_many_requests($1, $2, $3::jsonb[], $4, $5, $6, $7, $8);

-- name: leave
select jobfeed.leave($1)::text;

-- name: may_view
select jobfeed.may_view($1, $2, $3);

-- name: set_kind_request_policy
select jobfeed.set_kind_request_policy($1, $2, $3, $4);

-- name: get_job
select jobfeed.get_job($1)::text;

-- name: get_jobs
select v::text from jobfeed.get_jobs($1) v;

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

-- name: claim
select id, kind, target, payload::text, attempts, max_attempts, generation, lease_until, checkpoint::text,
       extract(epoch from lease)::float8
  from jobfeed.claim_v2($1, $2, $3, $4);

-- name: next_due
select jobfeed.next_due($1), now();

-- name: extend_many
select jobfeed.extend_many($1, $2, $3);

-- name: progress
select jobfeed.progress($1, $2, $3, $4, $5);

-- name: checkpoint
select jobfeed.checkpoint($1, $2, $3::jsonb);

-- name: complete_many
select jobfeed.complete_many($1, $2, $3::jsonb[]);

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

-- name: delete_finished
select jobfeed.delete_finished($1, $2);

-- name: open_admin_session
select jobfeed.open_admin_session(make_interval(secs => $1));

-- name: admin_session_valid
select jobfeed.admin_session_valid($1);

-- name: close_admin_session
select jobfeed.close_admin_session($1);
