-- Who may call what. Runs after every function file, since a newly created
-- function is executable by PUBLIC until revoked.

revoke execute on all functions in schema jobfeed from public;

grant execute on function
    jobfeed.register_kind(text, int, interval, interval[], double precision, text, boolean),
    jobfeed.register_kind_v2(text, int, interval, interval[], double precision, text, boolean,
                             int, int, int, int, interval),
    jobfeed.list_kinds()
to jobfeed_api, jobfeed_worker;

grant execute on function
    jobfeed.submit_waiting(text, text, jsonb, uuid[], text[], interval, int, timestamptz),
    jobfeed.submit_waiting_v2(text, text, jsonb, uuid[], text[], interval, int, timestamptz, timestamptz, int, text,
                              boolean, text, text, int, boolean),
    jobfeed.signal(uuid, text, jsonb, timestamptz),
    jobfeed.signal_v2(uuid, text, jsonb, int, timestamptz)
to jobfeed_api, jobfeed_worker;

-- granted as submit_v2 is (it falls back on it)
grant execute on function
    jobfeed.submit_quick(text, text, jsonb, timestamptz, int, timestamptz, int, text, boolean)
to jobfeed_api;

grant execute on function
    jobfeed.submit(text, text, jsonb, timestamptz, int, timestamptz),
    jobfeed.submit_many(text, text[], jsonb[], timestamptz, int, timestamptz),
    jobfeed.submit_many_views(text, text[], jsonb[], int),
    jobfeed.submit_v2(text, text, jsonb, timestamptz, int, timestamptz, int, text),
    jobfeed.submit_v3(text, text, jsonb, timestamptz, int, timestamptz, int, text, text),
    jobfeed.submit_many_v2(text, text[], jsonb[], timestamptz, int, timestamptz, int, text),
    jobfeed.submit_many_views_v2(text, text[], jsonb[], int, timestamptz, int, text),
    jobfeed.get_job(uuid),
    jobfeed.get_jobs(uuid[]),
    jobfeed.positions(uuid[]),
    jobfeed.admin_get_job(uuid),
    jobfeed.admin_get_jobs(uuid[]),
    jobfeed.admin_list_jobs(jobfeed.job_state, text, int, uuid),
    jobfeed.stats(int, timestamptz),
    jobfeed.stats_v2(int, interval, timestamptz),
    jobfeed.retry(uuid, timestamptz),
    jobfeed.cancel(uuid, timestamptz),
    jobfeed.open_admin_session(interval, timestamptz),
    jobfeed.admin_session_valid(uuid, timestamptz),
    jobfeed.close_admin_session(uuid),
    jobfeed.submit_request(text, text, jsonb, timestamptz, int, text, text, int, boolean, timestamptz, int, text),
    jobfeed.submit_many_requests(text, text[], jsonb[], int, text[], text[], int, boolean[], timestamptz,
                                 timestamptz, int, text),
    jobfeed.leave(uuid, timestamptz),
    jobfeed.leave_later(uuid, interval, timestamptz),
    jobfeed.stay(uuid),
    jobfeed.may_view(uuid, text, uuid),
    jobfeed.set_kind_paused(text, boolean),
    jobfeed.list_schedules(),
    jobfeed.bulk_retry(jobfeed.job_state, text, text, uuid[], uuid, int, timestamptz),
    jobfeed.bulk_cancel(jobfeed.job_state, text, text, uuid[], uuid, int, timestamptz)
to jobfeed_api;

grant execute on function
    jobfeed.file_stage(text, text, int),
    jobfeed.file_attach(uuid, bigint[], bigint[]),
    jobfeed.file_discard(bigint[])
to jobfeed_api;

grant execute on function
    jobfeed.output_begin(uuid, int, text, text, int),
    jobfeed.output_finish(uuid, int, bigint, bigint, timestamptz),
    jobfeed.output_discard(uuid, bigint)
to jobfeed_worker;

grant execute on function
    jobfeed.file_put(bigint, int, bytea),
    jobfeed.files_of(uuid, text),
    jobfeed.file_read(bigint, int, int, int)
to jobfeed_api, jobfeed_worker;

grant execute on function jobfeed.set_kind_request_policy(text, text, text, interval) to jobfeed_worker;
grant execute on function jobfeed.set_kind_request_policy_v2(text, text, text, interval, text) to jobfeed_worker;

grant execute on function
    jobfeed.claim(text[], int, text, interval, timestamptz),
    jobfeed.claim_v2(text[], int, text, interval, timestamptz),
    jobfeed.claim_v3(text[], int, text, interval),
    jobfeed.next_due(text[]),
    jobfeed.next_due_v2(text[], timestamptz),
    jobfeed.extend_many(uuid[], int[], interval, timestamptz),
    jobfeed.extend(uuid, int, interval, timestamptz),
    jobfeed.progress(uuid, int, double precision, double precision, text, timestamptz),
    jobfeed.checkpoint(uuid, int, jsonb),
    jobfeed.complete_many(uuid[], int[], jsonb[], timestamptz),
    jobfeed.complete(uuid, int, jsonb, timestamptz),
    jobfeed.fail_transient(uuid, int, text, text, interval, timestamptz),
    jobfeed.fail_permanent(uuid, int, text, text, timestamptz),
    jobfeed.release(uuid, int, text, interval, text, timestamptz),
    jobfeed.job_timings(uuid[]),
    jobfeed.worker_beat(text, text, text[], int, int, interval, timestamptz),
    jobfeed.worker_stopped(text),
    jobfeed.register_schedule(text, text, text, interval, timestamptz),
    jobfeed.drop_schedule(text),
    jobfeed.enqueue_slot(text, timestamptz, timestamptz),
    jobfeed.list_schedules(),
    jobfeed.signals_of(uuid[]),
    jobfeed.child_id(uuid, int, text, text, jsonb, int),
    jobfeed.complete_spawning(uuid, int, jsonb, jsonb, timestamptz),
    jobfeed.wait_for(uuid, int, jsonb, uuid[], timestamptz),
    jobfeed.children_of(uuid[])
to jobfeed_worker;

grant execute on function jobfeed.list_workers(timestamptz), jobfeed.charts(timestamptz) to jobfeed_api;

grant execute on function jobfeed.set_traceparent(uuid, text) to jobfeed_api, jobfeed_worker;

grant execute on function jobfeed.sample_depth(timestamptz) to jobfeed_sweeper;

grant execute on function
    jobfeed.sweep_expired(timestamptz),
    jobfeed.next_signal_deadline(timestamptz),
    jobfeed.next_deadline(timestamptz),
    jobfeed.leave_due(int, timestamptz),
    jobfeed.delete_finished(interval, int, timestamptz),
    jobfeed.delete_finished_v2(interval, int, timestamptz, timestamptz),
    jobfeed.delete_old_slots(interval, int, timestamptz)
to jobfeed_sweeper;
