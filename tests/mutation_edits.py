"""The mutation check's list: each rule-breaking edit, where it applies, the
tests that must catch it and why it matters. tests/mutation.py runs them; add
an edit here whenever a bug is fixed (the edit that brings the bug back)."""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class Edit:
    """old -> new in file; old and new may be tuples of the same length when a
    bug takes more than one change (a rule guarded twice), and file then a tuple
    too when the changes fall in different files."""
    name: str
    file: str | tuple[str, ...]
    old: str | tuple[str, ...]
    new: str | tuple[str, ...]
    tests: tuple[str, ...]
    why: str

    def pairs(self) -> list[tuple[str, str, str]]:
        """(file, old, new) for each change."""
        olds = (self.old,) if isinstance(self.old, str) else self.old
        news = (self.new,) if isinstance(self.new, str) else self.new
        files = (self.file,) * len(olds) if isinstance(self.file, str) else self.file
        assert len(olds) == len(news) == len(files), self.name
        return list(zip(files, olds, news))

    @property
    def files(self) -> list[str]:
        return sorted({f for f, _, _ in self.pairs()})

    def stale(self, root: Path) -> str | None:
        """Why the edit no longer applies to the code under root, or None."""
        for file, old, _ in self.pairs():
            count = (root / file).read_text().count(old)
            if count != 1:
                return f"in {file}, {old.splitlines()[0].strip()!r}... occurs {count} times (needs exactly 1)"
        return None

    def apply(self, root: Path) -> dict[Path, str]:
        """The mutated text of each file the edit touches."""
        texts: dict[Path, str] = {}
        for file, old, new in self.pairs():
            path = root / file
            texts[path] = texts.get(path, path.read_text()).replace(old, new, 1)
        return texts


Q_PUBLIC = "tests/test_queue_public.py"
Q_OUT = "tests/test_queue_outcomes.py"
Q_FENCE = "tests/test_queue_fencing.py"
Q_RACE = "tests/test_queue_races.py"
Q_BATCH = "tests/test_queue_batch.py"
NO_WAIT = "tests/test_claim_never_waits.py"
LIMIT = "tests/test_claim_limits.py"
ADMIN_STATES = "tests/test_admin_states.py"
HOLDERS = "tests/test_submit_many_holders.py"
SWEEP = "tests/test_sweeper.py"
FEED = "tests/test_sse_feed.py"
RECOVERY = "tests/test_feed_recovery.py"
SSE = "tests/test_sse_job.py"
SSE_SLOW = "tests/test_sse_slow.py"
ADMIN = "tests/test_api_admin.py"
SECURITY = "tests/test_security.py"
API_JOBS = "tests/test_api_jobs.py"
LIMITS = "tests/test_api_limits.py"
RUNNER = "tests/test_worker_runner.py"
DEDUPE = "tests/test_requests_dedupe.py"
REQUEST_BATCH = "tests/test_requests_batch.py"
RERUN = "tests/test_requests_rerun.py"
POSITION = "tests/test_requests_position.py"
WEBHOOKS = "tests/test_webhooks.py"
WAITING = "tests/test_requests_waiting.py"
HEARTBEAT = "tests/test_runner_heartbeat.py"
PROCESS = "tests/test_worker_process.py"
FLOW_LIMITS = "tests/test_flow_limits.py"
FLOW_ADMIN = "tests/test_flow_admin.py::test_pause_takes_submissions_claims_nothing_and_survives_registration"
PRIORITY = "tests/test_scheduling.py::test_higher_priority_first_then_earlier_run_after"
RUN_AT = "tests/test_scheduling.py::test_run_at_waits_and_shows_scheduled_for_until_the_first_start"
PERIODIC = "tests/test_periodic.py"
WAKE = "tests/test_flow_wake.py"
UPLOADS = "tests/test_files_uploads.py"
OUTPUTS = "tests/test_files_outputs.py"
CHILDREN = "tests/test_workflows_children.py"
DEPS = "tests/test_workflows_deps.py"
MIGRATIONS = "tests/test_migrations_upgrade.py::test_the_upgrade_marks_the_jobs_already_waited_for"
TIMINGS = "tests/test_queue_claims.py::test_the_workers_claim_says_how_long_each_job_waited_and_who_submitted_it"
QUICK = "tests/test_submit_quick.py"
READS = "tests/test_queue_reads.py"
CLAIMS = "tests/test_queue_claims.py"
# The batch writes' plan settings (complete_many and extend_many share them),
# without the sequential scans' line, and the lines after them, which tell the
# two functions apart by their first variable.
NO_SCANS = "set enable_seqscan = off "
BATCH_PLAN = ("set enable_bitmapscan = off set enable_hashjoin = off set enable_mergejoin = off\n"
              "set plan_cache_mode = force_generic_plan as $$\ndeclare\n    v_now timestamptz := jobfeed.clock(p_now);\n")
COMPLETE_MANY_HEAD = BATCH_PLAN + "    v_ids uuid[];\n"
EXTEND_MANY_HEAD = BATCH_PLAN + "    v_kept uuid[];\n"

EDITS: list[Edit] = [
    # ------------------------------------------------------------ dedupe
    Edit("dedupe-index-not-unique", "sql/migrations/0009_requests2.sql",  # 0009 rebuilt it last (dedupe_scope)
         "create unique index jobs_unfinished_target", "create index jobs_unfinished_target",
         (Q_RACE, Q_PUBLIC), "at most one unfinished job per (kind, target), enforced by the database"),
    Edit("submit-look-sees-finished", "sql/functions/30_submit.sql",
         "where j.kind = p_kind and j.target = p_target and j.dedupe_scope = v_scope\n"
         "           and j.state not in ('completed', 'failed', 'canceled');",
         "where j.kind = p_kind and j.target = p_target and j.dedupe_scope = v_scope\n"
         "           and j.state not in ('failed', 'canceled');",
         (Q_PUBLIC, Q_RACE), "a submission shares only an unfinished job"),
    Edit("submit-duplicate-says-created", "sql/functions/30_submit.sql",
         "return query select v_job.id, false, jobfeed.public_view(v_job);",
         "return query select v_job.id, true, jobfeed.public_view(v_job);",
         (Q_PUBLIC, API_JOBS), "a duplicate is answered as shared (200, deduplicated), not created"),
    Edit("submit-no-retry-after-conflict", "sql/functions/30_submit.sql",
         "        -- Another submitter took the target between our look and our insert: look again.\n    end loop;",
         "        return;\n    end loop;",
         (Q_RACE,), "a submit racing the holder finishing still gets a live job"),
    Edit("submit-many-held-ignores-kind", "sql/functions/30_submit.sql",
         "        v_held := array(select (select j.id from jobfeed.jobs j\n"
         "                                 where j.kind = p_kind and j.target = t.target",
         "        v_held := array(select (select j.id from jobfeed.jobs j\n"
         "                                 where j.target = t.target",
         (HOLDERS, Q_BATCH), "gap: submit_many shares only a job of its own kind"),
    Edit("submit-many-look-up-ignores-kind", "sql/functions/30_submit.sql",
         "                           coalesce(i.id, (select j.id from jobfeed.jobs j\n"
         "                                            where j.kind = p_kind and j.target = t.target",
         "                           coalesce(i.id, (select j.id from jobfeed.jobs j\n"
         "                                            where j.target = t.target",
         (HOLDERS, Q_BATCH), "gap: submit_many's general path shares only a job of its own kind"),
    Edit("submit-many-null-id", "sql/functions/30_submit.sql",
         "        if array_position(v_ids, null) is not null then",
         "        if false then",
         (HOLDERS, Q_BATCH), "gap: a holder finishing between insert and look-up never yields a null id"),
    Edit("notify-changed-one-payload", "sql/functions/10_helpers.sql",
         "      group by (u.n - 1) / chunk;", "      group by true;",
         (Q_BATCH,), "many changed jobs are announced in payloads under NOTIFY's size limit"),
    Edit("submit-many-repeat-creates-twice", "sql/functions/30_submit.sql",
         "i.id is not null and t.n = min(t.n) over (partition by t.target) as created",
         "i.id is not null as created",
         (Q_BATCH,), "a target repeated in a batch is created once, then shared"),
    # submit_quick: Queue.submit's one-statement path for a new target
    Edit("submit-quick-new-says-shared", "sql/functions/31_submit_quick.sql",
         "select i.id, true, i.view from ins i, note",
         "select i.id, false, i.view from ins i, note",
         (QUICK,), "a new job is answered as created"),
    Edit("submit-quick-skips-checks", "sql/functions/31_submit_quick.sql",
         "           and jobfeed.submission_problem(p_target, p_payload, p_max_payload) is null\n",
         "",
         (QUICK,), "a submission with a problem is refused and changes nothing, on the quick path too"),
    Edit("submit-quick-no-wake", "sql/functions/31_submit_quick.sql",
         "select jobfeed.notify_changed_one(i.id, i.version), jobfeed.notify_due(p_kind, 1) from ins i",
         "select jobfeed.notify_changed_one(i.id, i.version) from ins i",
         (QUICK,), "a new job wakes the workers of its kind (jobfeed_due)"),
    Edit("submit-quick-plans-per-call", "sql/functions/31_submit_quick.sql",
         "set search_path = jobfeed, pg_temp set plan_cache_mode = force_generic_plan as $$",
         "set search_path = jobfeed, pg_temp as $$",
         (QUICK + "::test_a_connection_plans_it_once",), "a connection plans submit_quick once, not at each early call"),
    # ------------------------------------------------------------ claim
    Edit("claim-waits-on-queued", "sql/functions/40_claim.sql",
         "                        limit p_limit - cardinality(v_reclaimed)\n"
         "                        for update skip locked))",
         "                        limit p_limit - cardinality(v_reclaimed)\n"
         "                        for update))",
         (NO_WAIT,), "gap: claim is FOR UPDATE SKIP LOCKED: a claimer never waits"),
    Edit("claim-waits-on-expired", "sql/functions/40_claim.sql",
         "             limit p_limit\n             for update skip locked);",
         "             limit p_limit\n             for update);",
         (NO_WAIT,), "gap: reclaiming expired leases never waits either"),
    Edit("fail-expired-waits", "sql/functions/10_helpers.sql",
         "           and (p_kinds is null or j.kind = any (p_kinds))\n         for update skip locked",
         "           and (p_kinds is null or j.kind = any (p_kinds))\n         for update",
         (NO_WAIT,), "failing exhausted expired jobs (inside claim) never waits"),
    Edit("claim-not-due", "sql/functions/40_claim.sql",
         "where q.kind = p_kind and q.state = 'queued' and q.run_after <= p_now\n"
         "                        -- higher priority first",
         "where q.kind = p_kind and q.state = 'queued'\n"
         "                        -- higher priority first",
         (Q_PUBLIC, Q_OUT), "claim picks due queued jobs only (backoff, run_after)"),
    Edit("claim-more-than-asked", "sql/functions/40_claim.sql",
         "limit p_limit - cardinality(v_reclaimed)", "limit p_limit",
         (LIMIT, Q_PUBLIC, Q_FENCE), "never more than asked, reclaimed jobs included"),
    Edit("claim-no-reclaim", "sql/functions/40_claim.sql",
         "where e.kind = p_kind and e.state = 'running' and e.lease_until < p_now\n",
         "where e.kind = p_kind and e.state = 'running' and e.lease_until < p_now - interval '1 day'\n",
         (Q_FENCE, Q_OUT, Q_RACE), "running jobs whose lease expired are claimable"),
    Edit("claim-always-flushed", "sql/functions/40_claim.sql",
         "        select set_config('synchronous_commit', 'off', true)\n",
         "        select set_config('synchronous_commit', current_setting('synchronous_commit'), true)\n",
         (CLAIMS,), "the worker's claim does not wait for the WAL flush"),
    Edit("claim-unflushed-runs-twice", "sql/functions/40_claim.sql",
         "not exists (select from c where c.max_attempts <= 1)", "true",
         (CLAIMS,), "a claim of a job that may run only once waits for the flush"),
    Edit("clock-not-inlined", "sql/functions/10_helpers.sql",
         "        when jobfeed.may_set_clock() then p_now\n",
         "        when (select jobfeed.may_set_clock()) then p_now\n",
         (SECURITY,), "clock() is inlined (no function call per statement)"),
    Edit("claim-keeps-generation", "sql/functions/40_claim.sql",
         "generation = j.generation + 1,", "generation = greatest(j.generation, 1),",
         (Q_FENCE, Q_RACE), "every claim bumps the generation (the fence)"),
    Edit("claim-keeps-attempts", "sql/functions/40_claim.sql",
         "attempts = j.attempts + 1,", "attempts = j.attempts,",
         (Q_OUT, Q_FENCE), "every claim counts an attempt"),
    Edit("claim-no-lease", "sql/functions/40_claim.sql",
         "lease_until = p_now + v_lease,", "lease_until = p_now + interval '1 day',",
         (Q_FENCE, Q_OUT, Q_PUBLIC), "a claim sets the kind's lease"),
    Edit("claim-skips-fail-expired", "sql/functions/40_claim.sql",
         "        perform jobfeed.fail_expired(v_kinds, v_now);", "        null;",
         (Q_OUT, Q_FENCE), "an expired job with no attempts left becomes failed (lease_expired)"),
    Edit("reclaim-exhausted", "sql/functions/40_claim.sql",
         # guarded twice: the claim fails such jobs first, and the reclaim skips them
         ("        perform jobfeed.fail_expired(v_kinds, v_now);", "and e.attempts < e.max_attempts"),
         ("        null;", "and e.attempts <= e.max_attempts"),
         (Q_OUT, Q_FENCE), "an expired job with no attempts left is not claimable forever"),
    Edit("expired-exhausted-stays-running", "sql/functions/10_helpers.sql",
         "where j.state = 'running' and j.lease_until < p_now and j.attempts >= j.max_attempts",
         "where j.state = 'running' and j.lease_until < p_now and j.attempts > j.max_attempts",
         (Q_OUT, Q_FENCE, SWEEP), "lease expired with attempts exhausted: failed (lease_expired)"),
    # ------------------------------------------------------------ scheduling and flow control
    Edit("priority-ignored", "sql/functions/40_claim.sql",
         "                        order by q.priority desc, q.run_after, q.id\n",
         "                        order by q.run_after, q.id\n",
         (PRIORITY,), "among due jobs of a kind, higher priority is claimed first, then the earlier run_after"),
    Edit("scheduled-for-reveals-retry", "sql/functions/20_views.sql",
         "'scheduled_for', case when j.generation = 0 and j.state in ('queued', 'waiting')",
         "'scheduled_for', case when j.state in ('queued', 'waiting')",
         (RUN_AT,), "scheduled_for shows until the first start only: a retry's delay stays private"),
    Edit("max-running-per-worker", "sql/functions/41_claim_limited.sql",
         # counted in two places: before the first pass and after each
         ("        v_room := p_max_running - (select count(*) from jobfeed.jobs r\n"
          "                                    where r.kind = p_kind and r.state = 'running')::int;",
          "            v_room := p_max_running - (select count(*) from jobfeed.jobs r\n"
          "                                        where r.kind = p_kind and r.state = 'running')::int;"),
         ("        v_room := p_max_running - (select count(*) from jobfeed.jobs r\n"
          "                                    where r.kind = p_kind and r.state = 'running' and r.worker_id = p_worker)::int;",
          "            v_room := p_max_running - (select count(*) from jobfeed.jobs r\n"
          "                                        where r.kind = p_kind and r.state = 'running' and r.worker_id = p_worker)::int;"),
         (FLOW_LIMITS,), "max_running caps the kind across every worker, not per worker"),
    Edit("max-running-per-key-off-by-one", "sql/functions/41_claim_limited.sql",
         # guarded twice: full keys skipped by the scan, then a key's room in the batch
         ("where b.n >= p_max_per_key))",
          "or c.rn + coalesce(c.running, 0) <= p_max_per_key), '{}'),"),
         ("where b.n > p_max_per_key))",
          "or c.rn + coalesce(c.running, 0) <= p_max_per_key + 1), '{}'),"),
         (FLOW_LIMITS,), "max_running_per_key: never more running jobs of one key than the cap"),
    Edit("capped-claim-stops-short", "sql/functions/41_claim_limited.sql",
         "              and (cardinality(v_locked) >= v_want or v_scanned < v_scan);",
         "              and true;",
         (FLOW_LIMITS,), "a capped claim fills its slots with keys that have room, however deep in the queue"),
    Edit("rate-starts-not-counted", "sql/functions/41_claim_limited.sql",
         "    if p_rate_count is not null and v_total > 0 then",
         "    if false then",
         (FLOW_LIMITS,), "rate: at most N starts per period across all workers"),
    Edit("pause-ignored", "sql/functions/40_claim.sql",
         "    if v_paused then\n        return;",
         "    if false then\n        return;",
         (FLOW_ADMIN,), "nothing of a paused kind is claimed"),
    Edit("periodic-slot-not-recorded-first", "sql/functions/65_schedules.sql",
         "    on conflict do nothing;\n    if not found then\n        return null;\n    end if;\n",
         "    on conflict do nothing;\n",
         (PERIODIC,), "one job per periodic slot, whatever dedupe says (the slot table decides)"),
    Edit("freed-slot-not-notified", "sql/functions/41_claim_limited.sql",
         "      where k.max_running is not null or k.max_running_per_key is not null;",
         "      where false;",
         (WAKE,), "a capped kind's freed slot wakes a waiting worker at once, not at its poll"),
    Edit("blocked-key-counted-due", "sql/functions/40_claim.sql",
         "                                 and j.run_after > coalesce(case when k.max_running_per_key is not null\n"
         "                                                                 then p_claimed_at end, '-infinity')) q",
         "                                 ) q",
         (WAKE,), "a worker whose due jobs all wait behind a full key sleeps, never claims in a loop"),
    # ------------------------------------------------------------ outcomes
    Edit("complete-unfenced", "sql/functions/50_outcomes.sql",
         "where j.id = t.id and j.generation = t.generation and j.state::text = 'running'\n"
         "        returning j.id, j.generation, j.version, j.attempts",
         "where j.id = t.id and j.state::text = 'running'\n"
         "        returning j.id, j.generation, j.version, j.attempts",
         (Q_FENCE, Q_RACE), "complete is fenced by generation"),
    Edit("extend-unfenced", "sql/functions/50_outcomes.sql",
         "where j.id = t.id and j.generation = t.generation and j.state::text = 'running'\n           and exists",
         "where j.id = t.id and j.state::text = 'running'\n           and exists",
         (Q_FENCE,), "extend is fenced by generation"),
    Edit("extend-keeps-canceled", "sql/functions/50_outcomes.sql",
         "and j.generation = t.generation and j.state::text = 'running'\n           and exists",
         "and j.generation = t.generation\n           and exists",
         (Q_FENCE, RUNNER), "a canceled job's lease is lost at the next heartbeat"),
    Edit("transient-unfenced", "sql/functions/50_outcomes.sql",
         "     where j.id = p_id and j.generation = p_generation and j.state = 'running'\n       for update of j;",
         "     where j.id = p_id and j.state = 'running'\n       for update of j;",
         (Q_FENCE, Q_OUT), "fail_transient is fenced by generation"),
    Edit("transient-never-fails", "sql/functions/50_outcomes.sql",
         "    if v_attempts >= v_max then", "    if v_attempts > v_max then",
         (Q_OUT,), "fail_transient at max attempts fails the job"),
    Edit("transient-backoff-off-by-one", "sql/functions/50_outcomes.sql",
         "v_backoff[least(v_attempts, cardinality(v_backoff))]",
         "v_backoff[least(v_attempts + 1, cardinality(v_backoff))]",
         (Q_OUT,), "backoff by the kind's schedule: 1, 5, 15, 60 minutes"),
    Edit("transient-error-public", "sql/functions/20_views.sql",
         "'error', case when j.state = 'failed' then",
         "'error', case when j.last_error_code is not null then",
         (Q_PUBLIC, Q_OUT, SSE), "errors of attempts that will be retried are never public"),
    Edit("permanent-unfenced", "sql/functions/50_outcomes.sql",
         "           last_error_code = p_code, last_error_message = p_message, version = j.version + 1\n"
         "     where j.id = p_id and j.generation = p_generation and j.state = 'running'\n"
         "    returning j.version, j.kind into v_ver, v_kind;",
         "           last_error_code = p_code, last_error_message = p_message, version = j.version + 1\n"
         "     where j.id = p_id and j.state = 'running'\n"
         "    returning j.version, j.kind into v_ver, v_kind;",
         (Q_FENCE, Q_OUT), "fail_permanent is fenced by generation"),
    Edit("release-counts-attempt", "sql/functions/50_outcomes.sql",
         "attempts = greatest(j.attempts - 1, 0)", "attempts = j.attempts",
         (Q_OUT, PROCESS), "a release does not count the attempt"),
    Edit("release-unfenced", "sql/functions/50_outcomes.sql",
         "    perform from jobfeed.jobs j\n     where j.id = p_id and j.generation = p_generation and j.state = 'running'",
         "    perform from jobfeed.jobs j\n     where j.id = p_id and j.state = 'running'",
         (Q_FENCE, Q_OUT), "release is fenced by generation"),
    Edit("progress-goes-backwards", "sql/functions/50_outcomes.sql",
         "or jobfeed.progress_rank(v_new) < jobfeed.progress_rank(v_old) then",
         "then",
         (Q_PUBLIC, Q_OUT, SSE), "public progress never goes backwards"),
    Edit("complete-not-announced", "sql/functions/50_outcomes.sql",
         "    perform jobfeed.notify_changed(v_ids, v_vers);\n    perform jobfeed.notify_freed(v_kinds);\n",
         "    perform jobfeed.notify_freed(v_kinds);\n",
         (Q_PUBLIC, SSE), "every change of a job's public view is announced"),
    Edit("status-flickers-queued", "sql/functions/10_helpers.sql",
         "when 'queued' then case when p_generation > 0 then 'processing' else 'queued' end",
         "when 'queued' then 'queued'",
         (Q_PUBLIC, Q_OUT, SSE), "a job once processing never shows queued again"),
    # ------------------------------------------------------------ admin
    Edit("retry-keeps-attempts", "sql/functions/60_admin.sql",
         "    begin\n        update jobfeed.jobs j\n           set state = 'queued', attempts = 0, run_after = v_now,",
         "    begin\n        update jobfeed.jobs j\n           set state = 'queued', run_after = v_now,",
         (ADMIN_STATES, ADMIN, Q_OUT), "admin retry puts attempts back to 0"),
    Edit("retry-any-state", "sql/functions/60_admin.sql",
         "    if v_state not in ('failed', 'canceled') then",
         "    if v_state not in ('failed', 'canceled', 'completed') then",
         (ADMIN_STATES, ADMIN), "only failed/canceled jobs can be retried (409 otherwise)"),
    Edit("cancel-finished", "sql/functions/60_admin.sql",
         "    if v_state not in ('waiting', 'queued', 'running') then",
         "    if v_state not in ('waiting', 'queued', 'running', 'completed') then",
         (ADMIN_STATES, ADMIN), "a finished job cannot be canceled (409)"),
    # ------------------------------------------------------------ sweeper
    Edit("sweep-unfinished", "sql/functions/70_sweep.sql",
         # guarded twice: in the pick and again in the DELETE
         ("         where j.state in ('completed', 'failed', 'canceled')\n           and j.finished_at",
          "where j.id = doomed.id and j.state in ('completed', 'failed', 'canceled')"),
         ("         where j.state is not null\n           and coalesce(j.finished_at, j.created_at)",
          "where j.id = doomed.id"),
         (SWEEP,), "cleanup never deletes unfinished jobs"),
    Edit("sweep-deletes-named-child", "sql/functions/70_sweep.sql",
         "           and not exists (select from jobfeed.jobs p\n"
         "                            where p.id = j.parent_id and p.state not in ('completed', 'failed', 'canceled'))\n",
         "",
         (CHILDREN,), "the sweeper keeps a finished child while its parent is unfinished"),
    Edit("sweep-deletes-waited-for", "sql/functions/70_sweep.sql",
         "where d.dep_id = j.id and w.state not in ('completed', 'failed', 'canceled'))",
         "where d.dep_id = j.id and w.state not in ('completed', 'failed', 'canceled') and d.wait_pos is null)",
         (CHILDREN,), "the sweeper keeps a finished job a waiting parent named in ctx.wait_for"),
    Edit("sweep-ignores-retention", "sql/functions/70_sweep.sql",
         "and j.finished_at < jobfeed.clock(p_now) - p_retention",
         "and j.finished_at < jobfeed.clock(p_now)",
         (SWEEP,), "finished jobs are kept for the retention period"),
    # ------------------------------------------------------------ children (ctx.submit, ctx.wait_for)
    Edit("children-unfenced", "sql/functions/46_children.sql",
         "        return false;\n    end if;\n    perform jobfeed.spawn_children(p_id, p_children, v_now);\n"
         "    return cardinality(",
         "        null;\n    end if;\n    perform jobfeed.spawn_children(p_id, p_children, v_now);\n"
         "    return cardinality(",
         (CHILDREN,), "a stale attempt's children are never written"),
    Edit("children-ids-per-attempt", "sql/functions/46_children.sql",
         "md5(v_seed::text || chr(31) || p_kind", "md5(p_generation::text || v_seed::text || chr(31) || p_kind",
         (CHILDREN,), "every attempt of a parent names the same children: a retry never makes a second set"),
    Edit("wait-for-not-waking", "sql/functions/45_workflows.sql",
         "v_open := v_share.done < v_share.total", "v_open := v_share.total > 0",
         (CHILDREN,), "a parent waiting for jobs becomes due once all of them are final"),
    Edit("wait-for-no-share-lock", "sql/functions/46_children.sql",
         "    perform jobfeed.hold_dependencies(v_wait);\n", "",
         (CHILDREN,), "the last child finishing while its parent's wait_for commits never strands the parent"),
    Edit("settle-trigger-for-every-job", "sql/migrations/0013_dependents.sql",
         "    when (new.has_dependents and new.state in", "    when (new.state in",
         (DEPS,), "completing a job nothing waits for never calls the settling trigger (the drain's hot path)"),
    Edit("submit-waiting-no-hold", "sql/functions/45_workflows.sql",
         "    v_found := jobfeed.hold_dependencies(v_after);",
         "    v_found := array(select j.id from jobfeed.jobs j where j.id = any (v_after) order by j.id);",
         (DEPS,), "a dependency finishing while its dependent is submitted never strands the dependent"),
    Edit("hold-dependencies-shares-only", "sql/functions/45_workflows.sql",
         "            update jobfeed.jobs j set has_dependents = true where j.id = v_job.id and not j.has_dependents;",
         "            perform from jobfeed.jobs j where j.id = v_job.id for share;",
         (DEPS + "::test_race_two_submitters_inside_their_submissions_name_the_same_new_job",),
         "submitters naming the same new dependencies at once never deadlock (marked in id order)"),
    Edit("dependencies-never-marked", "sql/migrations/0013_dependents.sql",
         "    update jobfeed.jobs j set has_dependents = true where j.id = new.dep_id and not j.has_dependents;\n",
         "", (MIGRATIONS,), "any writer of job_deps leaves the job it names marked, so its end settles the waiter"),
    Edit("upgrade-marks-nothing", "sql/migrations/0013_dependents.sql",
         " where j.id in (select d.dep_id from jobfeed.job_deps d) and not j.has_dependents;",
         " where false;", (MIGRATIONS,), "jobs waited for before the upgrade still settle their waiters"),
    Edit("history-default-autovacuum", "sql/migrations/0014_vacuum.sql",
         "autovacuum_vacuum_scale_factor = 0.002, autovacuum_vacuum_threshold = 5000,\n                              ",
         "", ("tests/test_history_vacuum.py",),
         "jobs claimed since the last vacuum are cleared from the claim's path while few among a long history"),
    Edit("history-vacuum-skips-indexes", "sql/migrations/0014_vacuum.sql",
         ",\n                              vacuum_index_cleanup = on", "", ("tests/test_history_vacuum.py",),
         "a vacuum of a long history with few dead rows still clears them from the queue's indexes"),
    Edit("final-counts-every-time", "sql/functions/20_views.sql",
         "    if v_snap.finished is null or v_snap.finished_as_of > v_now\n",
         "    if true or v_snap.finished is null or v_snap.finished_as_of > v_now\n",
         (READS + "::test_final_counts_are_recounted_once_older_than_thirty_times_their_cost",),
         "the final states' counts, which read the whole history, are not recounted on every stats refresh"),
    Edit("unfinished-counts-scan-history", "sql/functions/20_views.sql",
         "returns jsonb language sql stable set search_path = jobfeed, pg_temp set enable_seqscan = off as $$",
         "returns jsonb language sql stable set search_path = jobfeed, pg_temp as $$",
         (READS + "::test_unfinished_counts_read_only_unfinished_jobs_over_a_long_history",),
         "counting the unfinished jobs reads them alone, not the history"),
    Edit("slots-newest-deleted", "sql/functions/70_sweep.sql",
         "           and exists (select from jobfeed.schedule_slots n where n.kind = t.kind and n.slot > t.slot)\n", "",
         (SWEEP + "::test_old_periodic_slots_go_but_each_kinds_newest_stays",),
         "a schedule slower than the retention keeps its last slot taken"),
    Edit("slots-never-deleted", "worker/sweeper.py",
         "        slots = await self.queue.delete_old_slots(self.retention)\n", "        slots = 0\n",
         (SWEEP + "::test_old_periodic_slots_go_but_each_kinds_newest_stays",),
         "periodic slots past the retention are deleted, not kept forever"),
    Edit("gc-untuned-worker", "worker/processes.py", "        settle_gc()\n", "",
         ("tests/test_worker_process.py::test_a_worker_process_settles_its_collector_once_started",),
         "a worker process collects its youngest generation rarely and never walks what it built at start"),
    Edit("gc-untuned-api", "api/app.py", "            if host_pool is None:  # serving alone",
         "            if False:  # serving alone",
         ("tests/test_cli.py::test_the_api_process_settles_its_collector_once_serving",),
         "an API process serving alone tunes its collector as a worker does"),
    Edit("gc-tunes-host", "api/app.py", "            if host_pool is None:  # serving alone",
         "            if True:  # serving alone",
         ("tests/test_embedding.py::test_an_app_on_a_host_pool_leaves_the_hosts_collector_alone",),
         "an app mounted in a host leaves the host's collector alone"),
    Edit("claims-on-the-pool", "worker/runner.py",
         "                        claimer = await self._claims.queue()\n                        claimed, timings",
         "                        claimer = self.queue\n                        claimed, timings",
         (f"{RUNNER}::test_claims_do_not_wait_for_the_pool",),
         "a worker whose pool is all taken still claims: the claim loop has a connection of its own"),
    Edit("claim-connection-never-replaced", "worker/claimer.py",
         "if self._conn is None or self._queue is None or self._conn.is_closed():",
         "if self._conn is None or self._queue is None:",
         (f"{RUNNER}::test_a_claim_connection_that_dies_is_replaced",),
         "a claim connection that the server ended is replaced at the next claim, so jobs still run"),
    Edit("timeout-not-transient", "worker/runner.py",
         'raise Transient("timeout", ', 'raise Permanent("timeout", ',
         (CHILDREN,), "a run past its timeout is a transient failure (code timeout), retried"),
    # ------------------------------------------------------------ feed and streams
    Edit("feed-admin-no-resync", "api/feed.py",
         "        for admin in self._admins:\n            admin.resync()\n", "",
         (RECOVERY, FEED), "gap: dashboards resync after the listener reconnects"),
    Edit("feed-no-resync", "api/feed.py",
         "        self._resync = True\n        for admin in self._admins:", "        for admin in self._admins:",
         (RECOVERY, FEED, SSE), "a listener that reconnects re-reads every watched job"),
    Edit("feed-drops-failed-ids", "api/feed.py",
         "                self._dirty |= ids\n", "",
         (RECOVERY, FEED), "gap: a failed re-read is retried with the same ids"),
    Edit("feed-drops-failed-admin-ids", "api/feed.py",
         "                self._admin_dirty |= admin_ids\n", "",
         (RECOVERY, FEED), "a failed re-read is retried for dashboards too"),
    Edit("feed-repeats-views", ("api/subscriptions.py", "api/feed.py"),
         # guarded twice: the feed skips versions it offered, and so does each subscription
         ("if not self._closed and view.newer_than(version, extra):",
          "                if known is not None and not view.newer_than(*known):\n                    continue\n"),
         ("if not self._closed and view.version >= version:", ""),
         (RECOVERY, FEED, SSE), "never a repeat of an identical view (a resync re-reads every watched job)"),
    Edit("feed-no-coalesce", "api/subscriptions.py",
         "        view, self._pending = self._pending, None\n        self.sent, self.sent_extra",
         "        view = self._pending\n        self.sent, self.sent_extra",
         (FEED, SSE), "a slow subscriber holds only the newest view, sent once"),
    Edit("feed-always-waits-the-window", "api/feed.py",
         "max(self.reread_at + self.batch - loop.time(), 0.0)",
         "self.batch",
         (FEED,), "a change after a quiet spell reaches its watchers without waiting the batch window"),
    Edit("feed-window-never-gathers", "api/feed.py",
         "max(self.reread_at + self.batch - loop.time(), 0.0)",
         "0.0",
         (FEED,), "under a stream of changes, at most one re-read per batch window, taking what gathered"),
    Edit("stream-seed-ignores-last-event-id", "api/streams.py",
         "    if last_event_id(request) == view.version:",
         "    if last_event_id(request) == -1:",
         (SSE,), "Last-Event-ID equal to the current version skips the first event"),
    Edit("stream-not-ended-at-terminal", "api/jobstream.py",
         "            self._closing = True\n            self._sub.close_soon()",
         "            pass",
         (SSE,), "after a terminal status the server ends the stream"),
    Edit("stream-slow-client-queues", "api/jobstream.py",
         "                self._next = (body, more) if body else (self._next[0], more)",
         "                self._next = (self._next[0] + body, more)",
         (SSE_SLOW,), "a client that does not read holds one pending view, not a queue of them"),
    Edit("stream-kept-after-disconnect", "api/jobstream.py",
         "                    if (await receive())[\"type\"] == \"http.disconnect\":\n                        break",
         "                    if (await receive())[\"type\"] == \"http.disconnect\":\n"
         "                        await asyncio.Event().wait()",
         (SSE_SLOW,), "a client that goes away leaves no subscription behind"),
    # ------------------------------------------------------------ auth and limits
    Edit("admin-open-without-token", "api/auth.py",
         "    if token is None:\n        raise ApiError(401, \"unauthorized\",\n"
         "                       \"admin access is disabled",
         "    if token is None:\n        return\n        raise ApiError(401, \"unauthorized\",\n"
         "                       \"admin access is disabled",
         (ADMIN, SECURITY), "with no admin token configured, admin routes stay closed"),
    Edit("admin-bearer-any", "api/auth.py",
         "    if given is not None:\n        if token_matches(given, token):",
         "    if given is not None:\n        if True:",
         (ADMIN, SECURITY), "admin routes need the admin token"),
    Edit("admin-session-never-expires", "api/auth.py",
         "if expires is None or expires < (now or time.time()) or len(id_text) != 36:",
         "if expires is None or len(id_text) != 36:",
         (ADMIN, SECURITY), "a session cookie expires"),
    Edit("admin-cookie-readable", "api/admin.py",
         "max_age=int(lifetime), path=_cookie_path(request), httponly=True, samesite=\"strict\",",
         "max_age=int(lifetime), path=_cookie_path(request), httponly=False, samesite=\"lax\",",
         (ADMIN, SECURITY), "the session cookie is HttpOnly and SameSite=Strict"),
    Edit("api-token-ignored", "api/auth.py",
         "    if given is None or not _same(given, token):",
         "    if given is None:",
         (SECURITY, API_JOBS), "with JOBFEED_API_TOKEN set, POST /api/jobs needs it"),
    Edit("body-counted-after-read", "api/body.py",
         "        size += len(chunk)\n        if size > limit:\n            raise _too_large(limit)\n"
         "        chunks.append(chunk)\n",
         "        size += len(chunk)\n        chunks.append(chunk)\n    if size > limit:\n"
         "        raise _too_large(limit)\n",
         (LIMITS,), "a chunked body is refused while it streams, never read whole"),
    # ------------------------------------------------------------ runner
    Edit("heartbeat-once-per-lease", "worker/runner.py",
         "return max(self.ctx.lease / 3, 0.05)", "return max(self.ctx.lease / 1, 0.05)",
         (HEARTBEAT, RUNNER), "gap: leases are renewed ~3 times per lease"),
    Edit("heartbeat-longest-lease", "worker/runner.py",
         "next_at = min((r.renew_at for _, r in held", "next_at = max((r.renew_at for _, r in held",
         (HEARTBEAT,), "the heartbeat keeps pace with the shortest lease"),
    Edit("heartbeat-renews-quiet-handlers", "worker/runner.py",
         "if r.ctx.heartbeat and r.stop_reason is None and not r.recording]",
         "if r.stop_reason is None and not r.recording]",
         (HEARTBEAT, PROCESS), "a handler that turned its heartbeat off is not renewed"),
    Edit("lost-lease-not-cancelled", "worker/runner.py",
         "                        entry.ctx.lost.set()\n                        entry.stop(\"lost\")\n",
         "                        entry.ctx.lost.set()\n",
         (RUNNER,), "a lost lease cancels the handler and discards its outcome"),
    Edit("unknown-exception-permanent", "worker/runner.py",
         "outcome = (\"error\", redact.unexpected(exc))",
         "outcome = (\"error\", Permanent(\"internal_error\", str(exc)[:2000]))",
         (RUNNER,), "any other exception counts as transient"),
    Edit("concurrency-overrun", "worker/runner.py",
         "free = self.concurrency - len(self._running) - max(unwritten - self.concurrency, 0)",
         "free = self.concurrency + 1 - len(self._running) - max(unwritten - self.concurrency, 0)",
         (RUNNER,), "never more handlers at once than --concurrency"),
    Edit("shutdown-fails-instead-of-release", "worker/runner.py",
         "outcome = (\"error\", Release(entry.stop_reason, f\"worker {entry.stop_reason}\", retry_after=0))",
         "outcome = (\"error\", Transient(entry.stop_reason, f\"worker {entry.stop_reason}\"))",
         (PROCESS,), "on shutdown, what is left is released (due at once, attempt not counted)"),
    Edit("budget-no-max-jobs", "worker/runner.py",
         "            free = min(free, self.max_jobs - self.claimed_count)\n", "            pass\n",
         (PROCESS,), "budget mode handles at most --max-jobs"),
    Edit("processes-outlive-parent", "worker/supervisor.py",
         "ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)", "pass",
         ("tests/test_worker_processes.py",), "a worker process never runs on after its parent died"),
    Edit("processes-failure-leaves-others", "worker/supervisor.py",
         "                result = _exit_code(code)\n                stop()",
         "                result = _exit_code(code)",
         ("tests/test_worker_processes.py",), "a failing worker process stops its siblings"),
    # ------------------------------------------------------------ requests
    Edit("requester-dedupe-ignores-identity", "sql/functions/10_helpers.sql",
         "case when p_dedupe = 'requester' then nullif(p_requester, '') else '' end",
         "case when p_dedupe = 'requester' then '' else '' end",
         (DEDUPE,), 'dedupe="requester": strangers never share a job'),
    Edit("rerun-runs-twice", "sql/functions/50_outcomes.sql",
         "               rerun_payload = null\n          from (select u.id, u.generation, u.result",
         "               rerun_payload = j.rerun_payload\n          from (select u.id, u.generation, u.result",
         (RERUN,), 'on_duplicate="rerun" runs exactly once more, not again and again'),
    Edit("rerun-flashes-completed", "sql/functions/50_outcomes.sql",
         "               version = j.version + (j.rerun_payload is null)::int,",
         "               version = j.version + 1,",
         (RERUN,), "the public view stays processing through a rerun: no version bump"),
    Edit("replace-counts-the-attempt", "sql/functions/35_requests.sql",
         "set state = 'queued', generation = j.generation + 1, attempts = greatest(j.attempts - 1, 0),",
         "set state = 'queued', generation = j.generation + 1, attempts = j.attempts,",
         (RERUN,), "a replaced attempt is not counted against max_attempts"),
    Edit("replace-does-not-fence", "sql/functions/35_requests.sql",
         "    elsif p_policy = 'rerun' then", "    elsif p_policy in ('rerun', 'replace') then",
         (RERUN,), 'on_duplicate="replace" fences the running attempt out at once'),
    Edit("batch-handover-lost", "sql/functions/30_submit.sql",
         "        exit handover when cardinality(v_lost) = 0;", "        exit handover;",
         (RERUN + "::test_a_batch_duplicate_of_a_job_finishing_meanwhile_still_runs_its_payload",),
         "a batch duplicate of a job that finished before the hand-over is submitted again"),
    Edit("request-batch-locks-in-list-order", "sql/functions/35_requests.sql",
         "        perform from jobfeed.jobs j\n"
         "         where j.id in (select v_ids[k] from unnest(v_pending) k where not v_created[k])\n"
         "         order by j.id\n           for update;",
         "        perform from unnest(v_pending) with ordinality p(k, o) join jobfeed.jobs j on j.id = v_ids[p.k]\n"
         "         where not v_created[p.k] order by p.o for update of j;",
         (REQUEST_BATCH + "::test_batches_lock_the_jobs_they_join_in_one_order",),
         "batches of requests lock the jobs they join in id order: never a deadlock"),
    Edit("request-batch-joins-a-canceled-job", "sql/functions/35_requests.sql",
         "        v_pending := array(select k from unnest(v_pending) k where not v_counted ? v_ids[k]::text);",
         "        v_pending := '{}';",
         (REQUEST_BATCH + "::test_a_job_abandoned_before_the_batch_counts_its_request_is_not_joined",),
         "a batch whose job is abandoned before it counts its request submits again"),
    Edit("request-batch-plans-may-scan", "sql/functions/35_requests.sql",
         "set plan_cache_mode = force_generic_plan set enable_seqscan = off set enable_bitmapscan = off\n"
         "set enable_hashjoin = off set enable_mergejoin = off as $$",
         "set plan_cache_mode = force_generic_plan as $$",
         (REQUEST_BATCH + "::test_plans_made_on_an_empty_table_stay_index_probes_as_it_grows",),
         "a generic plan made on an empty table still probes indexes once the table has grown"),
    Edit("stalled-flush-holds-everyone", "api/batching.py",
         "STALL = 0.05  #", "STALL = 1e9  #",
         ("tests/test_api_batching.py::test_a_flush_waiting_for_a_row_lock_does_not_hold_up_other_submissions",),
         "a flush stuck on a row lock lets the next submission go beside it"),
    Edit("completion-plans-may-scan", "sql/functions/50_outcomes.sql",
         NO_SCANS + COMPLETE_MANY_HEAD, COMPLETE_MANY_HEAD.split("\n", 1)[1],
         ("tests/test_queue_outcomes.py::test_completion_plans_made_on_an_empty_table_stay_index_probes_as_it_grows",),
         "a completion's generic plan made on an empty table still finds its jobs by primary key"),
    Edit("completion-locks-in-given-order", "sql/functions/50_outcomes.sql",
         "as u(id, generation, result)\n                 order by u.id) as t\n",
         "as u(id, generation, result)\n                ) as t\n",
         ("tests/test_queue_deadlocks.py::test_a_batch_write_takes_its_rows_in_id_order_whatever_order_it_is_given",),
         "a completion batch locks its rows in id order, as the heartbeat does: never a deadlock"),
    Edit("heartbeat-locks-in-given-order", "sql/functions/50_outcomes.sql",
         "as u(id, generation)\n                 order by u.id) as t\n",
         "as u(id, generation)\n                ) as t\n",
         ("tests/test_queue_deadlocks.py::test_a_batch_write_takes_its_rows_in_id_order_whatever_order_it_is_given",),
         "a heartbeat batch locks its rows in id order, as the completion does: never a deadlock"),
    Edit("completion-read-twice", "sql/functions/20_views.sql",
         "     where j.state = 'completed'\n       and not exists",
         "     where j.state = 'completed'\n       and exists",
         ("tests/test_queue_outcomes.py::test_a_completion_an_earlier_version_logged_is_read_once",
          "tests/test_queue_outcomes.py::test_completion_logs_the_attempt_it_ends"),
         "a completed job's last attempt is read from its row once, logged before or not"),
    Edit("list-cannot-use-partial-index", "sql/functions/20_views.sql",
         "where j.kind = kk.kind and j.state = ss.state and j.state <> 'running'",
         "where j.kind = kk.kind and j.state = ss.state",
         ("tests/test_queue_reads.py::test_admin_list_filters_use_the_kind_state_index",),
         "a filtered admin list reads jobs_kind_state_id, which only a query naming its predicate may use"),
    Edit("rerun-completion-unlogged", "sql/functions/50_outcomes.sql",
         "          from upd where upd.rerun\n", "          from upd where false\n",
         ("tests/test_requests_rerun.py",),
         "a completion that starts a rerun is logged: the job's row moves on to the next run"),
    Edit("position-ignores-priority", "sql/functions/20_views.sql",
         "        select q.id, (row_number() over (order by q.priority desc, q.run_after, q.id) - 1)::int as \"position\"",
         "        select q.id, (row_number() over (order by q.run_after, q.id) - 1)::int as \"position\"",
         (POSITION,), "position counts the jobs the claim takes first: higher priority first"),
    Edit("position-of-started-jobs", "sql/functions/20_views.sql",
         "where j.id = any (p_ids) and j.state = 'queued' and j.generation = 0 and j.run_after <= p_now",
         "where j.id = any (p_ids) and j.state = 'queued' and j.run_after <= p_now",
         (POSITION,), "position is null once a job has started (a retry waiting is not in line for the public)"),
    Edit("reused-job-not-notified", "sql/functions/35_requests.sql",
         ("            perform jobfeed.queue_deliveries(array[v_request]);",
          "    perform jobfeed.queue_deliveries(array(select v_requests[k] from generate_series(1, v_count) k"),
         ("            null;",
          "    perform jobfeed.queue_deliveries(array(select v_requests[k] from generate_series(1, 0) k"),
         (WEBHOOKS,), "a submission answered with a reused final job gets its webhook too"),
    Edit("waiting-ignores-run-at", "sql/functions/45_workflows.sql",
         "set state = 'queued', run_after = greatest(p_now, j.run_after) where j.id = p_id;",
         "set state = 'queued', run_after = p_now where j.id = p_id;",
         (WAITING,), "a job waiting on dependencies that also has a run_at is due at the later of the two"),
    # ------------------------------------------------------------ files in and out
    Edit("upload-limit-off-by-a-chunk", "api/uploads.py",
         "                    if received > limit:\n", "                    if received > limit + 65536:\n",
         (UPLOADS + "::test_over_max_upload_is_413_and_stores_nothing",),
         "JOBFEED_MAX_UPLOAD caps the whole body, counted while it streams"),
    Edit("upload-buffers-whole-files", "worker/files.py",
         "        while len(self._buf) >= self.size:\n", "        while len(self._buf) >= self.size * 1000:\n",
         (UPLOADS + "::test_a_multipart_submission_stores_its_files_in_chunks_with_the_job",
          OUTPUTS + "::test_a_20_mib_upload_and_download_pass_through_the_api_process"),
         "files stream into the database a chunk at a time, never whole in memory"),
    Edit("duplicate-stores-files", "worker/files.py",
         "        elif ids:  # joined a job that has its own files\n",
         "        elif not ids:  # joined a job that has its own files\n",
         (UPLOADS + "::test_a_duplicate_upload_joins_the_job_and_stores_none_of_its_files",),
         "a duplicate submission joins the job and stores none of its files"),
    Edit("output-not-fenced", "sql/functions/47_files.sql",
         "    perform from jobfeed.jobs j\n     where j.id = p_job and j.generation = p_generation and j.state = 'running'",
         "    perform from jobfeed.jobs j\n     where j.id = p_job and j.state = 'running'",
         (OUTPUTS + "::test_outputs_are_fenced_by_generation_and_replaced_by_a_later_attempt",),
         "an attempt that lost the job must not publish outputs"),
    Edit("output-not-replaced", "sql/functions/47_files.sql",
         "     where f.job_id = p_job and f.direction = 'out' and f.name = v_name and f.size is not null;",
         "     where false;",
         (OUTPUTS + "::test_outputs_are_fenced_by_generation_and_replaced_by_a_later_attempt",),
         "saving an output again replaces it"),
    Edit("range-end-exclusive", "api/outputs.py",
         "    end = size if not last else int(last) + 1\n", "    end = size if not last else int(last)\n",
         (OUTPUTS + "::test_outputs_download_whole_and_in_ranges",), "bytes=a-b includes byte b"),
    Edit("upload-slots-unbounded", "api/uploads.py",
         "asyncio.Semaphore(max(1, size // 2))", "asyncio.Semaphore(1000)",
         (UPLOADS + "::test_slow_uploads_never_take_every_pool_connection",),
         "slow uploads must not hold every pool connection"),
    Edit("outputs-skip-access", "api/outputs.py",
         "    await access.require_view(svc, request, job_id)\n", "",
         (OUTPUTS + "::test_outputs_follow_the_job_views_access_rules",),
         "outputs have the job view's access rules"),
    Edit("claim-scans-young-table", "sql/functions/40_claim.sql",
         "language plpgsql set enable_seqscan = off as $$", "language plpgsql as $$",
         (READS + "::test_a_worker_finds_its_jobs_by_key_after_the_table_grew_under_its_cached_plans",), "a claim finds the picked jobs by key, whatever plan a young table left"),
    Edit("completion-scans-young-table", "sql/functions/50_outcomes.sql",
         NO_SCANS + COMPLETE_MANY_HEAD, COMPLETE_MANY_HEAD,
         (READS + "::test_a_worker_finds_its_jobs_by_key_after_the_table_grew_under_its_cached_plans",), "a completion finds its jobs by key, whatever plan a young table left"),
    Edit("heartbeat-lease-from-nothing", "sql/functions/50_outcomes.sql",
         "           and exists (select from jobfeed.kinds k where k.kind = j.kind)  -- no lease to renew by\n", "",
         (Q_FENCE + "::test_a_heartbeat_with_no_lease_to_renew_by_reports_the_job_lost",),
         "a heartbeat never leaves a running job with no lease (which nothing would reclaim)"),
    Edit("heartbeat-scans-young-table", "sql/functions/50_outcomes.sql",
         NO_SCANS + EXTEND_MANY_HEAD, EXTEND_MANY_HEAD,
         (READS + "::test_a_worker_finds_its_jobs_by_key_after_the_table_grew_under_its_cached_plans",),
         "a heartbeat finds its jobs by key, whatever plan a young table left"),
    Edit("none-result-not-null", "worker/queue_calls.py",
         'return "null" if value is None else json.dumps(value)', 'return "{}" if value is None else json.dumps(value)',
         (RUNNER, Q_OUT), "a handler that returns None completes with a null result"),
    Edit("slot-freed-wakes-always", "worker/runner.py",
         "        if self._full or self._deadline is not None or self.max_jobs is not None:\n            self._wake.set()",
         "        self._wake.set()",
         (WAKE + "::test_a_worker_with_free_slots_claims_once_per_submit_not_again_after_each_job",),
         "a worker with free slots does not claim again after every job"),
    Edit("slot-freed-never-wakes", "worker/runner.py",
         "        if self._full or self._deadline is not None or self.max_jobs is not None:\n            self._wake.set()",
         "        if self._deadline is not None or self.max_jobs is not None:\n            self._wake.set()",
         (WAKE + "::test_a_full_worker_claims_when_a_job_ends",),
         "a full worker claims again when a job ends, not at the next poll"),
    Edit("claim-v3-skips-expired", "sql/functions/40_claim.sql",
         "         where cardinality(p_kinds) = 1 and p_kinds[1] is not null and p_limit > 0\n           and not exists",
         "         where cardinality(p_kinds) = 1 and p_kinds[1] is not null and p_limit > 0\n           and true or exists",
         (CLAIMS + "::test_the_workers_claim_of_one_kind_reclaims_expired_leases_first",),
         "the worker's claim of one kind reclaims its expired leases first"),
    Edit("claim-v3-drops-signals", "sql/functions/40_claim.sql",
         "         where exists (select from jobfeed.job_signals x where", "         where false and exists (select from jobfeed.job_signals x where",
         ("tests/test_workflows_signals.py",), "a claimed job carries the signals it awaited"),
    Edit("claim-v3-drops-children", "sql/functions/40_claim.sql",
         "         where exists (select from jobfeed.job_deps x\n", "         where false and exists (select from jobfeed.job_deps x\n",
         (CHILDREN,), "a claimed job carries its children's outcomes"),
    # The claim's timings (wait, age, traceparent) on each of its paths.
    Edit("claim-timings-lost", "sql/functions/40_claim.sql",
         "v_lease, u.run_after, u.created_at, u.traceparent", "v_lease, null::timestamptz, null::timestamptz, null::text",
         (TIMINGS,), "a claim of one kind answers each job's wait, age and traceparent"),
    Edit("claim-limited-timings-lost", "sql/functions/41_claim_limited.sql",
         "p_lease, u.run_after, u.created_at, u.traceparent", "p_lease, null::timestamptz, null::timestamptz, null::text",
         (TIMINGS,), "a claim of a kind with limits answers them too"),
    Edit("claim-kinds-timings-lost", "sql/functions/40_claim.sql",
         "v.lease, t.run_after, t.created_at, t.traceparent, v.ordinality",
         "v.lease, null::timestamptz, null::timestamptz, null::text, v.ordinality",
         (TIMINGS,), "a claim of several kinds answers them too"),
]
