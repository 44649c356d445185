-- Who may call what. Runs after every function file, since a newly created
-- function is executable by PUBLIC until revoked.

revoke execute on all functions in schema jobfeed from public;

grant execute on function
    jobfeed.register_kind(text, int, interval, interval[], double precision, text, boolean),
    jobfeed.list_kinds()
to jobfeed_api, jobfeed_worker;

grant execute on function
    jobfeed.submit(text, text, jsonb, timestamptz, int, timestamptz),
    jobfeed.submit_many(text, text[], jsonb[], timestamptz, int, timestamptz),
    jobfeed.submit_many_views(text, text[], jsonb[], int),
    jobfeed.get_job(uuid),
    jobfeed.get_jobs(uuid[]),
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
    jobfeed.submit_request(text, text, jsonb, timestamptz, int, text, text, int, boolean, timestamptz),
    jobfeed.submit_many_requests(text, text[], jsonb[], int, text[], text[], int, boolean[], timestamptz),
    jobfeed.leave(uuid, timestamptz),
    jobfeed.may_view(uuid, text, uuid)
to jobfeed_api;

grant execute on function jobfeed.set_kind_request_policy(text, text, text, interval) to jobfeed_worker;

grant execute on function
    jobfeed.claim(text[], int, text, interval, timestamptz),
    jobfeed.claim_v2(text[], int, text, interval, timestamptz),
    jobfeed.next_due(text[]),
    jobfeed.extend_many(uuid[], int[], interval, timestamptz),
    jobfeed.extend(uuid, int, interval, timestamptz),
    jobfeed.progress(uuid, int, double precision, double precision, text, timestamptz),
    jobfeed.checkpoint(uuid, int, jsonb),
    jobfeed.complete_many(uuid[], int[], jsonb[], timestamptz),
    jobfeed.complete(uuid, int, jsonb, timestamptz),
    jobfeed.fail_transient(uuid, int, text, text, interval, timestamptz),
    jobfeed.fail_permanent(uuid, int, text, text, timestamptz),
    jobfeed.release(uuid, int, text, interval, text, timestamptz)
to jobfeed_worker;

grant execute on function
    jobfeed.sweep_expired(timestamptz),
    jobfeed.delete_finished(interval, int, timestamptz)
to jobfeed_sweeper;
