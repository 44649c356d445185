"""The mutation check's edits to how PostgreSQL plans the queue's statements:
a plan a session keeps from a young table, which must still find its rows by
key once the table grew (tests/test_queue_reads.py, tests/test_queue_bulk.py,
tests/test_queue_claims.py);
a statement planned anew at every call (tests/test_plans.py); and a bulk pick
that sorts, or walks every job, where an index range was meant."""

from __future__ import annotations

from mutation_edit import BULK, COMPLETE_MANY_HEAD, EXTEND_MANY_HEAD, NO_SCANS, READS, Edit

# the calls a long-lived session makes by job id, under plans kept from a tiny table
KEPT_PLANS = READS + "::test_retries_reads_and_sweeps_find_jobs_by_key_after_the_table_grew_under_kept_plans"

# an admin session's bulk batches, under plans kept from a young table
BULK_BY_KEY = BULK + "::test_bulk_batches_pick_by_their_filter_after_the_table_grew_under_kept_plans"
CANCEL_READS = BULK + "::test_a_bulk_cancel_reads_the_unfinished_jobs_not_the_history"
PICK_RANGES = BULK + "::test_a_bulk_pick_ranges_only_the_kinds_with_jobs_in_its_states"
PICK_LOOKS = BULK + "::test_a_bulk_pick_looks_only_at_the_kinds_with_jobs_in_its_states"
# what a worker writes about a job it holds, and an admin's retry, under plans kept while few jobs ran
HELD_BY_KEY = READS + "::test_writes_to_one_job_find_it_by_key_with_thousands_running_under_kept_plans"

CLAIMS_YOUNG = "tests/test_queue_claims.py::test_a_claim_reads_a_young_tables_backlog_in_order_and_stops"

FLOW_PLANS = "tests/test_plans.py::test_workflows_schedules_sweeps_and_dashboard_reads_keep_their_plans"


def _running_plainly(name: str, file: str, look: str, what: str) -> Edit:
    """look, a fenced look at one job by id, testing its state plainly: the
    plan a session keeps may read every running job's index entry."""
    return Edit(name, file, look, look.replace("j.state::text = 'running'", "j.state = 'running'"), (HELD_BY_KEY,),
                f"{what} finds its job by key, whatever plan the session kept")


PLAN_EDITS: list[Edit] = [
    # ------------------------------------------------------------ plans kept from a young table
    # JIT: caught on any server (the catalog); the scan and the BitmapAnd on a server before 18 only
    Edit("functions-compiled-by-jit", "sql/functions/95_no_jit.sql",
         "        execute format('alter function %s set jit = off', f);\n", "        null;\n",
         (READS + "::test_no_statement_of_jobfeeds_is_compiled_by_jit",), "no statement of jobfeed's is compiled by JIT"),
    Edit("views-call-status-per-job", "sql/functions/10_helpers.sql",
         "returns text language sql stable parallel safe as $$\n    select case p_state\n",
         "returns text language sql immutable parallel safe as $$\n    select case p_state\n",
         (READS + "::test_the_views_are_one_expression_with_no_call_of_jobfeeds_per_job",),
         "the views inline the public status, no call of its own per job"),
    Edit("sql-functions-replanned-before-18", "sql/functions/10_helpers.sql",
         "    if current_setting('server_version_num')::int >= 180000 then\n",
         "    if current_setting('server_version_num')::int >= 150000 then\n",
         ("tests/test_plans.py::test_a_submit_next_due_and_the_feeds_reread_keep_their_plans_on_every_server",),
         "a single submit, next_due and the feed's re-read keep their plans before PostgreSQL 18 too",
         before_18=True),
    Edit("table-readers-replanned-before-18", "sql/functions/94_keep_plans.sql",
         "   and (p.proconfig is not null or p.prosecdef\n        or p.oid in (",
         "   and (p.proconfig is not null or p.prosecdef\n        or false and p.oid in (",
         ("tests/test_plans.py::test_submits_claims_and_outcomes_keep_their_plans",),
         "a queued job's position, a batch's checks and a join's announcement keep their plans before 18",
         before_18=True),
    Edit("void-function-runs-its-first-row-only", "sql/functions/10_helpers.sql",
         "            then E'begin\\n' || regexp_replace(v_body, '^((\\s|--[^\\n]*\\n)*)select\\M', '\\1perform', 'i')"
         " || E';\\nend\\n'\n",
         "            then E'begin\\n' || regexp_replace(v_body, '^((\\s|--[^\\n]*\\n)*)select\\M(.*)$', '\\1perform\\3"
         " limit 1', 'i') || E';\\nend\\n'\n",
         ("tests/test_requests_batch.py::test_a_batch_joining_many_jobs_announces_every_ones_requesters",),
         "a void function's statement runs to its last row before 18 too (every chunk's NOTIFY)",
         before_18=True),
    Edit("multi-kind-claim-scans-young-table", "sql/functions/40_claim.sql",
         "language plpgsql security definer set search_path = jobfeed, pg_temp set enable_seqscan = off as $$\n"
         "#variable_conflict use_column",
         "language plpgsql security definer set search_path = jobfeed, pg_temp as $$\n#variable_conflict use_column",
         (READS + "::test_a_worker_finds_its_jobs_by_key_after_the_table_grew_under_its_cached_plans",),
         "the multi-kind claim's expired-lease probe goes by index, whatever plan a young table left",
         before_18=True),
    Edit("limited-claim-locks-through-due-range", "sql/functions/41_claim_limited.sql",
         "                select l.id from unnest(v_pick) p(id)\n"
         "                 cross join lateral (select j.id, j.priority, j.run_after from jobfeed.jobs j\n"
         "                                      where j.id = p.id and j.state = 'queued' and j.run_after <= p_now\n"
         "                                      for update skip locked) l\n"
         "                 order by l.priority desc, l.run_after, l.id);\n",
         "                select j.id from jobfeed.jobs j\n"
         "                 where j.id = any (v_pick) and j.state = 'queued' and j.run_after <= p_now\n"
         "                 order by j.priority desc, j.run_after, j.id\n"
         "                 for update skip locked);\n",
         (CLAIMS_YOUNG,), "a limited claim locks its picks by key, not through the range of every due job",
         before_18=True),
    Edit("claim-scans-young-table", "sql/functions/40_claim.sql",
         "language plpgsql set enable_seqscan = off set enable_sort", "language plpgsql set enable_sort",
         (READS + "::test_a_worker_finds_its_jobs_by_key_after_the_table_grew_under_its_cached_plans",), "a claim finds the picked jobs by key, whatever plan a young table left"),
    Edit("attempt-log-scans-kept-plan", "sql/functions/10_helpers.sql",
         "returns void language sql set enable_seqscan = off set enable_hashjoin = off set enable_mergejoin = off\n",
         "returns void language sql\n",
         (KEPT_PLANS,), "a retry's attempt log finds the job by key, whatever plan the session kept"),
    Edit("views-reread-scans-kept-plan", "sql/functions/20_views.sql",
         "set enable_seqscan = off set plan_cache_mode = force_generic_plan as $$\n"
         "    -- each row read once; positions asked only",
         "set plan_cache_mode = force_generic_plan as $$\n    -- each row read once; positions asked only",
         (KEPT_PLANS,), "the feed's re-read finds the views by key, whatever plan the session kept"),
    Edit("views-reread-planned-every-time", "sql/functions/20_views.sql",
         "set enable_seqscan = off set plan_cache_mode = force_generic_plan as $$\n"
         "    -- each row read once; positions asked only",
         "set enable_seqscan = off as $$\n    -- each row read once; positions asked only",
         ("tests/test_plans.py::test_a_submit_next_due_and_the_feeds_reread_keep_their_plans_on_every_server",),
         "the feed's re-read keeps one plan, not one per re-read"),
    Edit("signal-sweep-scans-kept-plan", "sql/functions/45_workflows.sql",
         "returns int language plpgsql set enable_seqscan = off as $$\ndeclare\n    v_ids uuid[];\n    v_vers bigint[];",
         "returns int language plpgsql as $$\ndeclare\n    v_ids uuid[];\n    v_vers bigint[];",
         (KEPT_PLANS,), "the sweeper finds overdue signals' jobs by key, whatever plan it kept"),
    Edit("signal-sweep-reads-waiting", "sql/functions/45_workflows.sql",
         "           and j.state::text = 'waiting'\n", "           and j.state = 'waiting'\n",
         (KEPT_PLANS,), "the sweeper finds overdue signals' jobs by key, not among every waiting job"),
    Edit("missing-signals-by-overdue-index", "sql/migrations/0020_signal_deadlines.sql",
         "where arrived_at is null and deadline is not null;", "where arrived_at is null;",
         (READS + "::test_a_signal_looks_at_its_jobs_missing_signals_by_key_under_kept_plans",),
         "a look at one job's missing signals goes by its key, whatever plan the session kept"),
    Edit("dependency-hold-scans-kept-plan", "sql/functions/45_workflows.sql",
         "returns uuid[] language plpgsql set enable_seqscan = off set plan_cache_mode",
         "returns uuid[] language plpgsql set plan_cache_mode",
         (KEPT_PLANS,), "a submit's hold on its dependencies finds them by key, whatever plan the session kept"),
    _running_plainly("progress-reads-running", "sql/functions/50_outcomes.sql",
                     "    select j.progress into v_old from jobfeed.jobs j\n     where j.id = p_id and j.generation = p_generation and j.state::text = 'running'",
                     "a progress report"),
    _running_plainly("checkpoint-reads-running", "sql/functions/50_outcomes.sql",
                     "        update jobfeed.jobs j set checkpoint = p_state\n         where j.id = p_id and j.generation = p_generation and j.state::text = 'running'",
                     "a checkpoint"),
    _running_plainly("retry-look-reads-running", "sql/functions/50_outcomes.sql",
                     "      from jobfeed.jobs j left join jobfeed.kinds k on k.kind = j.kind\n     where j.id = p_id and j.generation = p_generation and j.state::text = 'running'",
                     "a transient failure"),
    _running_plainly("failure-reads-running", "sql/functions/50_outcomes.sql",
                     "version = j.version + 1\n     where j.id = p_id and j.generation = p_generation and j.state::text = 'running'",
                     "a permanent failure"),
    _running_plainly("release-reads-running", "sql/functions/50_outcomes.sql",
                     "    perform from jobfeed.jobs j\n     where j.id = p_id and j.generation = p_generation and j.state::text = 'running'",
                     "a release"),
    _running_plainly("rerun-look-reads-running", "sql/functions/35_requests.sql",
                     "     where j.id = p_id and j.generation = p_generation and j.state::text = 'running' and j.rerun_payload is not null",
                     "a failure's look for a pending rerun"),
    _running_plainly("child-seed-reads-running", "sql/functions/46_children.sql",
                     "and j.state::text = 'running' and j.child_seed is null",
                     "a first child"),
    _running_plainly("child-seed-again-reads-running", "sql/functions/46_children.sql",
                     "and j.state::text = 'running';",
                     "a further child"),
    _running_plainly("output-begin-reads-running", "sql/functions/47_files.sql",
                     "and j.state::text = 'running') then",
                     "an output begun"),
    _running_plainly("output-finish-reads-running", "sql/functions/47_files.sql",
                     "    perform from jobfeed.jobs j\n     where j.id = p_job and j.generation = p_generation and j.state::text = 'running'",
                     "an output published"),
    Edit("retry-due-look-scans-kept-plan", "sql/functions/60_admin.sql",
         "language plpgsql set enable_seqscan = off as $$\ndeclare\n    v_waited boolean;",
         "language plpgsql as $$\ndeclare\n    v_waited boolean;",
         (HELD_BY_KEY,), "an admin's retry looks at the job's dependencies by key, whatever plan the session kept"),
    Edit("bulk-cancel-scans-kept-plan", "sql/functions/60_admin.sql",
         "pg_temp set enable_seqscan = off as $$\n#variable_conflict use_column\ndeclare\n"
         "    v_now timestamptz := jobfeed.clock(p_now);\n    v_pick uuid[];",
         "pg_temp as $$\n#variable_conflict use_column\ndeclare\n"
         "    v_now timestamptz := jobfeed.clock(p_now);\n    v_pick uuid[];",
         (BULK_BY_KEY,), "a bulk cancel updates its batch by key, whatever plan the session kept"),
    Edit("claim-lease-probe-reads-unfinished", "sql/functions/40_claim.sql",
         "           and (select e.lease_until from jobfeed.jobs e\n"
         "                 where e.kind = p_kinds[1] and e.state = 'running' and e.lease_until < now()\n"
         "                 order by e.lease_until limit 1) is null\n",
         "           and not exists (select from jobfeed.jobs e\n"
         "                            where e.kind = p_kinds[1] and e.state = 'running' and e.lease_until < now())\n",
         ("tests/test_queue_claims.py::test_a_claim_planned_on_an_empty_table_looks_for_expired_leases_by_index",),
         "a claim's look for expired leases reads them only, whatever plan its first claim left"),
    Edit("children-hash-kept-plan", "sql/functions/46_children.sql",
         "set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_hashjoin = off\n"
         "set enable_mergejoin = off as $$",
         "set plan_cache_mode = force_generic_plan as $$",
         ("tests/test_queue_claims.py::test_a_workers_kept_claim_plan_reads_a_claimed_jobs_children_by_key",),
         "a claimed job's children are read by key, whatever plan the worker's first such claim left"),
    Edit("children-announced-read-back", "sql/functions/46_children.sql",
         "        perform jobfeed.notify_due(d.k, d.n)\n"
         "           from (select k, count(*)::int as n from unnest(v_kinds) k group by k order by k) d;\n",
         "        perform jobfeed.notify_due(d.k, d.n)\n"
         "           from (select j.kind as k, count(*)::int as n from jobfeed.jobs j where j.id = any (v_ids)\n"
         "                  group by j.kind order by j.kind) d;\n",
         (READS + "::test_spawned_children_are_announced_as_written_under_kept_plans",),
         "spawned children are announced as written, whatever plan the session kept"),
    Edit("completion-scans-young-table", "sql/functions/50_outcomes.sql",
         NO_SCANS + COMPLETE_MANY_HEAD, COMPLETE_MANY_HEAD,
         (READS + "::test_a_worker_finds_its_jobs_by_key_after_the_table_grew_under_its_cached_plans",), "a completion finds its jobs by key, whatever plan a young table left"),
    Edit("heartbeat-scans-young-table", "sql/functions/50_outcomes.sql",
         NO_SCANS + EXTEND_MANY_HEAD, EXTEND_MANY_HEAD,
         (READS + "::test_a_worker_finds_its_jobs_by_key_after_the_table_grew_under_its_cached_plans",),
         "a heartbeat finds its jobs by key, whatever plan a young table left"),
    # ------------------------------------------------------------ planned at every call; bulk picks
    Edit("small-batch-ids-replanned", "sql/functions/10_helpers.sql",
         "returns uuid[] language plpgsql volatile set plan_cache_mode = force_generic_plan as $$",
         "returns uuid[] language plpgsql volatile as $$",
         ("tests/test_plans.py::test_submits_claims_and_outcomes_keep_their_plans",),
         "a small batch's ids are made by one generic plan, not planned at every call"),
    Edit("attempt-log-replanned", "sql/functions/10_helpers.sql",
         "returns void language sql set enable_seqscan = off set enable_hashjoin = off set enable_mergejoin = off\n"
         "set plan_cache_mode = force_generic_plan as $$",
         "returns void language sql set enable_seqscan = off set enable_hashjoin = off set enable_mergejoin = off as $$",
         ("tests/test_plans.py::test_submits_claims_and_outcomes_keep_their_plans",),
         "a retry's attempt log is written by one generic plan, not planned at every call"),
    Edit("admin-list-replanned", "sql/functions/20_views.sql",
         "returns setof jsonb language plpgsql stable security definer set search_path = jobfeed, pg_temp\n"
         "set plan_cache_mode = force_generic_plan as $$",
         "returns setof jsonb language plpgsql stable security definer set search_path = jobfeed, pg_temp as $$",
         ("tests/test_plans.py::test_flow_control_and_admin_paths_keep_their_plans",),
         "the admin list's filtered query keeps one generic plan"),
    Edit("held-dependencies-replanned", "sql/functions/45_workflows.sql",
         "returns uuid[] language plpgsql set enable_seqscan = off set plan_cache_mode = force_generic_plan as $$",
         "returns uuid[] language plpgsql set enable_seqscan = off as $$",
         ("tests/test_plans.py::test_flow_control_and_admin_paths_keep_their_plans",),
         "a retry's hold on its dependencies keeps one generic plan"),
    Edit("settle-waiting-replanned", "sql/functions/45_workflows.sql",
         "returns void language plpgsql set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$",
         "returns void language plpgsql as $$",
         (FLOW_PLANS,), "a waiting job's settling keeps one generic plan"),
    Edit("signal-replanned", "sql/functions/45_workflows.sql",
         "language plpgsql security definer set search_path = jobfeed, pg_temp\n"
         "set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$\n#variable_conflict use_column\n"
         "declare\n    v_now timestamptz := jobfeed.clock(p_now);\n    v_first boolean;",
         "language plpgsql security definer set search_path = jobfeed, pg_temp as $$\n#variable_conflict use_column\n"
         "declare\n    v_now timestamptz := jobfeed.clock(p_now);\n    v_first boolean;",
         (FLOW_PLANS,), "a signal's delivery keeps one generic plan"),
    Edit("wait-for-replanned", "sql/functions/46_children.sql",
         "returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp\n"
         "set plan_cache_mode = force_generic_plan set enable_seqscan = off as $$\ndeclare\n"
         "    v_now timestamptz := jobfeed.clock(p_now);\n    v_alias jsonb;",
         "returns boolean language plpgsql security definer set search_path = jobfeed, pg_temp as $$\ndeclare\n"
         "    v_now timestamptz := jobfeed.clock(p_now);\n    v_alias jsonb;",
         (FLOW_PLANS,), "a wait_for outcome keeps one generic plan"),
    Edit("workers-list-replanned", "sql/functions/80_workers.sql",
         "returns jsonb language sql stable security definer set search_path = jobfeed, pg_temp\n"
         "set plan_cache_mode = force_generic_plan as $$",
         "returns jsonb language sql stable security definer set search_path = jobfeed, pg_temp as $$",
         (FLOW_PLANS,), "the dashboard's workers list keeps one generic plan"),
    Edit("admin-reread-replanned", "sql/functions/20_views.sql",
         "set enable_seqscan = off set plan_cache_mode = force_generic_plan as $$\n"
         "    select jobfeed.admin_view(j) from jobfeed.jobs j where j.id = any (p_ids)",
         "set enable_seqscan = off as $$\n"
         "    select jobfeed.admin_view(j) from jobfeed.jobs j where j.id = any (p_ids)",
         (FLOW_PLANS,), "the admin feed's re-read of changed jobs keeps one generic plan"),
    Edit("positions-walk-the-line", "sql/functions/20_views.sql",
         "and (q.run_after, q.id) <= (b.run_after, b.id)", "and true",
         ("tests/test_requests_position.py::test_the_walk_for_watched_jobs_reads_no_further_than_the_last_of_them",),
         "the feed's walk for watched jobs ends at the last of them, not at the end of its priority"),
    Edit("positions-end-at-a-tie", "sql/functions/20_views.sql",
         "order by m.priority, m.run_after desc, m.id desc limit 1", "order by m.priority, m.run_after desc limit 1",
         ("tests/test_requests_position.py",),
         "of watched jobs sharing a run_after, the walk ends at the last in the claim's order"),
    Edit("positions-watched-by-range", "sql/functions/20_views.sql",
         "where j.id = any (p_ids) offset 0) j", "where j.id = any (p_ids)) j",
         ("tests/test_requests_position.py::test_the_walk_for_watched_jobs_reads_no_further_than_the_last_of_them",),
         "the walk finds the watched jobs by key, not in a range of the due ones"),
    Edit("bulk-pick-kinds-from-every-job", "sql/functions/60_admin.sql",
         "(select j.kind from jobfeed.jobs j where j.state = any (v_probed) order by j.kind limit 1)",
         "(select distinct j.kind from jobfeed.jobs j)",
         (CANCEL_READS,), "a bulk action without a kind finds the kinds with one probe each, not by reading every job"),
    Edit("bulk-pick-first-kind-only", "sql/functions/60_admin.sql",
         "where j.kind > k.kind and j.state", "where j.kind < k.kind and j.state",
         (CANCEL_READS,), "a bulk action without a kind takes the jobs of every kind"),
    Edit("bulk-pick-kinds-of-any-state", "sql/functions/60_admin.sql",
         "    v_probed jobfeed.job_state[] := case when current_setting('server_version_num')::int >= 180000 then v_ranged",
         "    v_probed jobfeed.job_state[] := case when current_setting('server_version_num')::int >= 990000 then v_ranged",
         (PICK_LOOKS,), "a bulk action's batch looks only at the kinds with jobs in its states, not every kind (PostgreSQL 18)"),
    Edit("bulk-pick-ranges-kinds-without-jobs", "sql/functions/60_admin.sql",
         "     where (select true from jobfeed.jobs j\n"
         "             where j.kind = k.kind and j.state = s.state and j.state <> 'running' limit 1);\n",
         "     where true;\n",
         (PICK_RANGES,), "a bulk action's batch ranges only the kinds with jobs in its states before 18 too",
         before_18=True),
    Edit("bulk-cancel-locks-through-state-index", "sql/functions/60_admin.sql",
         "               and (p_state is null or j.state::text = p_state::text)\n",
         "               and (p_state is null or j.state = p_state)\n",
         (BULK + "::test_a_bulk_cancel_over_many_kinds_reads_each_kinds_range_once",),
         "a bulk cancel locks its batch by key, not through the index of the state's jobs (before 18)",
         before_18=True),
    Edit("bulk-pick-misses-running", "sql/functions/60_admin.sql",
         "    if 'running' = any (v_states) then\n", "    if false then\n",
         (CANCEL_READS,), "a bulk cancel takes the running jobs too"),
    Edit("bulk-pick-ranges-unordered", "sql/functions/60_admin.sql",
         "                      || ' order by j.id)', ' union all ')", "                      || ')', ' union all ')",
         (f"{BULK}::test_bulk_batches_go_on_where_the_last_ended",
          f"{BULK}::test_a_bulk_cancel_over_many_kinds_reads_each_kinds_range_once"),
         "a bulk action's ranges are merged as they are read, each in id order"),
    Edit("bulk-pick-ignores-ids", "sql/functions/60_admin.sql",
         "    if p_ids is not null then\n        return array(", "    if false then\n        return array(",
         (BULK_BY_KEY,), "a bulk action given ids takes only those jobs"),
]
