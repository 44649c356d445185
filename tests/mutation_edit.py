"""What one edit of the mutation check is (tests/mutation_edits.py lists
them), and the names of the test files the edits point at."""

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
    # caught only on a server before 18 (18's planner never makes the plan the edit
    # allows): its tests run on the oldest of Debian's installed servers, as CI's run
    before_18: bool = False

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
FENCED = "tests/test_runner_fenced.py"
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
BULK = "tests/test_queue_bulk.py"
CLAIMS = "tests/test_queue_claims.py"
WAITS = "tests/test_waits.py"
PRODUCER = "tests/test_producer_checks.py"
IDENTITY = "tests/test_embedding.py::test_an_identity_is_a_short_string_or_nobody"
# The batch writes' plan settings (complete_many and extend_many share them),
# without the sequential scans' line, and the lines after them, which tell the
# two functions apart by their first variable.
NO_SCANS = "set enable_seqscan = off "
BATCH_PLAN = ("set enable_bitmapscan = off set enable_hashjoin = off set enable_mergejoin = off\n"
              "set plan_cache_mode = force_generic_plan as $$\ndeclare\n    v_now timestamptz := jobfeed.clock(p_now);\n")
COMPLETE_MANY_HEAD = BATCH_PLAN + "    v_ids uuid[];\n"
EXTEND_MANY_HEAD = BATCH_PLAN + "    v_kept uuid[];\n"
