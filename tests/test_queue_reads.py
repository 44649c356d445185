"""Reads that must stay cheap however many jobs there are: the admin list
filtered by kind or state uses an index (the plans, read with auto_explain
inside the function); a session's calls, planned on a young table, still find
their jobs by key once it grew; and stats are counted at most once per few
seconds. The admin's bulk actions: tests/test_queue_bulk.py."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from plan_reads import finished, heavy_lines, most_rows_one_node_read, planned_small_then_grown, rows_returned
from queue_sql import T0, explained, register
from jobfeed.worker import db
from jobfeed.worker.limits import MAX_PAYLOAD_BYTES
from jobfeed.worker.sql import query


async def _history_and_queue(pool, finished_kind: str, queued_kind: str) -> None:
    """20,000 completed jobs of one kind and 5 queued of another (or the same), analyzed."""
    await pool.execute("insert into jobfeed.jobs (kind, target, state, finished_at) "
                       "select $1, 'h' || g, 'completed', now() from generate_series(1, 20000) g", finished_kind)
    await pool.execute("insert into jobfeed.jobs (kind, target) select $1, 'q' || g from generate_series(1, 5) g",
                       queued_kind)
    await pool.execute("analyze jobfeed.jobs")


async def test_admin_list_filters_use_the_kind_state_index(pool, dsn):
    await register(pool, "big")
    await register(pool, "small")
    await _history_and_queue(pool, "big", "small")
    conn = await db.connect(dsn)
    try:
        await conn.fetch("select * from jobfeed.admin_list_jobs($1::jobfeed.job_state, $2, 3)", None, None)
        for state, kind, expect in (("queued", None, 5), (None, "small", 5), ("queued", "small", 5),
                                    ("completed", "big", 3)):
            rows, plans = await explained(conn, "select * from jobfeed.admin_list_jobs($1::jobfeed.job_state, $2, 3)",
                                       state, kind)
            assert len(rows) == min(expect, 3)
            assert "jobs_kind_state_id" in plans, plans
            # not a walk of the whole table, in id order or any other
            assert "Seq Scan on jobs " not in plans and "Backward using jobs_pkey" not in plans, plans
        # Running jobs are not in that index (a claim does not write it): read
        # through the lease index, newest first all the same.
        await pool.execute("update jobfeed.jobs set state = 'running', lease_until = now() + interval '1 hour' "
                           "where kind = 'small' and target in ('q2', 'q4')")
        for state, kind in (("running", None), ("running", "small"), (None, "small")):
            rows, plans = await explained(conn, "select * from jobfeed.admin_list_jobs($1::jobfeed.job_state, $2, 3)",
                                          state, kind)
            newest = await pool.fetch("select id::text from jobfeed.jobs where kind = 'small' and state::text "
                                      "like $1 order by id desc limit 3", state or "%")
            assert [json.loads(r[0])["id"] for r in rows] == [r["id"] for r in newest]
            assert len(newest) == (2 if state else 3)
            assert "jobs_running_lease" in plans, plans
            assert "Seq Scan on jobs " not in plans and "Backward using jobs_pkey" not in plans, plans
    finally:
        await conn.close()


async def test_a_batch_of_new_targets_reads_only_its_own_targets_however_many_jobs_wait(pool, dsn):
    # 20,000 unfinished jobs of the kind and no statistics (a busy table between
    # autovacuum's visits): each batch of 1,000 new targets must probe the
    # dedupe index per item, not read every job of the kind to see whether one
    # of its targets is held (a cost growing with the queue, batch after batch).
    await register(pool, "big")
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'big', 'old' || g from generate_series(1, 20000) g")
    conn = await db.connect(dsn)
    try:
        call = "select * from jobfeed.submit_many_v2('big', $1::text[], null::jsonb[], null, 65536, null, null, null)"
        for batch in range(8):  # past the five custom plans PL/pgSQL makes before it may keep a generic one
            targets = [f"new{batch}-{i}" for i in range(1000)]
            rows, plans = await explained(conn, call, targets, analyze=True)
            assert len(rows) == 1000 and all(r["created"] for r in rows)
            read = rows_returned(plans)
            assert read and max(read) <= 2000, (batch, plans[:4000])
        assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'big'") == 28000
    finally:
        await conn.close()


async def test_a_batch_completion_reads_each_job_once_whatever_plan_was_cached(pool, dsn):
    # A worker's connection completes jobs one at a time while the table is
    # nearly empty, so PL/pgSQL keeps the plans it made then; a burst of 1,000
    # completions later must still find each job by its key, not compare every
    # running job with every item (a nested loop over a table thought tiny).
    await register(pool, "k")
    running = ("insert into jobfeed.jobs (kind, target, state, generation, attempts, worker_id, claimed_at, "
               "lease_until) select 'k', $1 || g, 'running', 1, 1, 'w', now(), now() + interval '5 minutes' "
               "from generate_series(1, $2::int) g returning id")
    conn = await db.connect(dsn)
    try:
        complete = "select cardinality(jobfeed.complete_many($1::uuid[], $2::int[], $3::jsonb[]))"
        for i in range(10):
            [one] = [r["id"] for r in await conn.fetch(running, f"one{i}-", 1)]
            assert await conn.fetchval(complete, [one], [1], [None]) == 1
        ids = [r["id"] for r in await conn.fetch(running, "many-", 1000)]
        rows, plans = await explained(conn, complete, ids, [1] * 1000, [None] * 1000, analyze=True)
        assert rows[0][0] == 1000
        read = rows_returned(plans)
        assert read and max(read) <= 2000, plans[:6000]
    finally:
        await conn.close()


@pytest.mark.parametrize("release", ["this", "before"])
async def test_a_worker_finds_its_jobs_by_key_after_the_table_grew_under_its_cached_plans(pool, dsn, release):
    # A worker starts on a nearly empty table and PL/pgSQL keeps the plans its
    # first claims made; before autovacuum next analyzes the table, thousands
    # of jobs arrive and finish. Each claim, timing read, heartbeat and
    # completion of one job must still find the job by its key, not read the
    # whole table (which made every claim cost more than the one before): the
    # worker's calls, and those of the release before's workers during a
    # rolling deploy, each in a session of its own (a plan one call kept is
    # shared by every caller in its session).
    await register(pool, "k")
    ids: list = []
    claim = ((query("claim"), lambda: (["k"], 1, "w1", None)) if release == "this" else
             # the release before's claim, then its read of the jobs' timings
             ("select * from jobfeed.claim_v2($1, $2, $3, $4)", lambda: (["k"], 1, "w1", None)))
    calls = {"claim": claim,
             "extend_many": (query("extend_many"), lambda: (ids, [1], None)),
             "complete_many": (query("complete_many"), lambda: (ids, [1], [None]))}
    if release == "before":
        calls["job_timings"] = ("select * from jobfeed.job_timings($1)", lambda: (ids,))

    def took(name: str, rows) -> None:
        if name == "claim":
            ids[:] = [r["id"] for r in rows]
            assert len(ids) == 1

    async def one_job(target: str) -> None:
        await pool.execute("insert into jobfeed.jobs (kind, target) values ('k', $1)", target)

    await planned_small_then_grown(dsn, calls, took, one_job, lambda: finished(pool))
    assert await pool.fetchval("select state::text from jobfeed.jobs where target = 'late'") == "completed"


async def test_retries_reads_and_sweeps_find_jobs_by_key_after_the_table_grew_under_kept_plans(pool, dsn):
    # As above, for the other calls a long-lived session makes by job id: a
    # retry's attempt log (every failure, release and cancel writes it so), the
    # feed's re-read of views, the sweeper's look for overdue signals, the hold
    # a submit with dependencies takes on them. Planned on a tiny table, each
    # read the whole table (or every waiting job) at every call as it grew.
    await register(pool, "k")
    job: dict = {}
    seen: list = []
    calls = {"claim": (query("claim"), lambda: (["k"], 1, "w1", None)),
             "fail_transient": (query("fail_transient"), lambda: (job["id"], job["generation"], "flaky", "", None)),
             # the feed re-reads its watched jobs in batches
             "get_jobs": (query("get_jobs"), lambda: (seen,)),
             "sweep_expired": (query("sweep_expired"), lambda: ()),
             # what a submit with after= (and a retry) holds its dependencies with
             "hold_dependencies": ("select jobfeed.hold_dependencies($1)", lambda: ([job["id"]],))}

    def took(name: str, rows) -> None:
        if name == "claim":
            assert len(rows) == 1
            job.update(id=rows[0]["id"], generation=rows[0]["generation"])
            seen.append(job["id"])

    async def one_job(target: str) -> None:
        await pool.execute("insert into jobfeed.jobs (kind, target) values ('k', $1)", target)

    async def grow() -> None:
        await finished(pool)
        await pool.execute("insert into jobfeed.jobs (kind, target, state) "
                           "select 'k', 'waits' || g, 'waiting' from generate_series(1, 2000) g")

    await planned_small_then_grown(dsn, calls, took, one_job, grow)
    assert await pool.fetchval("select count(*) from jobfeed.attempts a join jobfeed.jobs j on j.id = a.job_id "
                               "where j.target = 'late' and a.outcome = 'transient'") == 1


async def test_writes_to_one_job_find_it_by_key_with_thousands_running_under_kept_plans(pool, dsn):
    # As above, for what a worker writes about one job it holds (its progress,
    # a checkpoint, children, an output, a failure, a release), and an admin's
    # retry of one that failed. Planned on a young table with a job or two
    # running, each read every running job's entry in the partial index of
    # running jobs once thousands ran (the retry: every job).
    await register(pool, "k")
    held: list = []  # (id, generation) of each job the round's claim took
    file: list = []  # the output begun
    later = dt.timedelta(hours=1)  # released jobs stay out of the next round's claim
    calls = {"claim": (query("claim"), lambda: (["k"], 7, "w1", None)),
             "progress": (query("progress"), lambda: (*held[0], 1.0, 2.0, None)),
             "checkpoint": (query("checkpoint"), lambda: (*held[1], '{"step": 1}')),
             "child_id": (query("child_id"), lambda: (*held[2], "k", "child", "{}", 65536)),
             "child_id again": (query("child_id"), lambda: (*held[2], "k", "child-too", "{}", 65536)),
             "output_begin": (query("output_begin"), lambda: (*held[3], "out.txt", "text/plain", 1024)),
             "output_finish": (query("output_finish"), lambda: (*held[3], file[0], 0)),
             "fail_transient": (query("fail_transient"), lambda: (*held[4], "flaky", "", None)),
             "fail_permanent": (query("fail_permanent"), lambda: (*held[5], "bad", "")),
             "release": (query("release"), lambda: (*held[6], "stop", later, "")),
             "retry": (query("retry"), lambda: (held[5][0],))}

    def took(name: str, rows) -> None:
        if name == "claim":
            held[:] = [(r["id"], r["generation"]) for r in rows]
            assert len(held) == 7
            return
        value = rows[0][0]
        assert value is not None and value is not False, name  # each found its job (retry: a view)
        if name == "output_begin":
            file[:] = [value]

    async def seven_jobs(tag: str) -> None:
        await pool.execute("insert into jobfeed.jobs (kind, target) "
                           "select 'k', $1 || '-' || g from generate_series(1, 7) g", tag)

    async def thousands_running() -> None:
        await pool.execute("insert into jobfeed.jobs (kind, target, state, generation, attempts, worker_id, "
                           "claimed_at, lease_until) select 'k', 'run' || g, 'running', 1, 1, 'w2', now(), "
                           "now() + interval '5 minutes' from generate_series(1, 5000) g")

    await planned_small_then_grown(dsn, calls, took, seven_jobs, thousands_running)
    states = await pool.fetch("select state::text, count(*) from jobfeed.jobs where id = any ($1::uuid[]) "
                              "group by 1 order by 1", [i for i, _ in held])
    assert [tuple(r) for r in states] == [("queued", 3), ("running", 4)]  # failed, then retried


async def test_spawned_children_are_announced_as_written_under_kept_plans(pool, dsn):
    # A completion that writes children (complete_spawning; wait_for the same)
    # announced their kinds by reading the new jobs back by id: under a plan
    # kept from a small table, a scan of every job at each such completion.
    await register(pool, "k")
    held: list = []  # the running parent's id and its child's, planned

    def children() -> str:
        return json.dumps([{"id": str(held[1]), "kind": "k", "target": f"child-of-{held[0]}", "payload": {},
                            "priority": None, "concurrency_key": None}])

    calls = {"complete_spawning": (query("complete_spawning"), lambda: (held[0], 1, "{}", children()))}

    def took(name: str, rows) -> None:
        assert rows[0][0] is True, name

    async def running_parent(target: str) -> None:
        held[:] = [await pool.fetchval(
            "insert into jobfeed.jobs (kind, target, state, generation, attempts, worker_id, claimed_at, lease_until) "
            "values ('k', $1, 'running', 1, 1, 'w', now(), now() + interval '5 minutes') returning id", target),
            uuid.uuid4()]

    await planned_small_then_grown(dsn, calls, took, running_parent, lambda: finished(pool))
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", held[1]) == "queued"


async def test_a_signal_looks_at_its_jobs_missing_signals_by_key_under_kept_plans(pool, dsn):
    # A signal that arrives settles its job, which looks for the job's other
    # missing signals (so do a dependency settling and a retry). Under a plan
    # kept from a small table that look took the index of overdue signals and
    # read every job's missing signals.
    await register(pool, "k")
    job: list = []
    calls = {"signal": (query("signal"), lambda: (job[0], "a", "{}", MAX_PAYLOAD_BYTES))}

    def took(name: str, rows) -> None:
        assert rows[0]["first"] is True, name

    async def waiting(target: str) -> None:
        """A job waiting for signals a and b, each with a deadline."""
        job[:] = [await pool.fetchval("insert into jobfeed.jobs (kind, target, state) values ('k', $1, 'waiting') "
                                      "returning id", target)]
        await pool.execute("insert into jobfeed.job_signals (job_id, name, deadline) "
                           "select $1, n, now() + interval '1 hour' from unnest(array['a', 'b']) n", job[0])

    async def thousands_waiting() -> None:
        await pool.execute("insert into jobfeed.jobs (kind, target, state) "
                           "select 'k', 'waits' || g, 'waiting' from generate_series(1, 2000) g")
        await pool.execute("insert into jobfeed.job_signals (job_id, name, deadline) "
                           "select j.id, 'a', now() + interval '1 hour' from jobfeed.jobs j where j.target like 'waits%'")

    await planned_small_then_grown(dsn, calls, took, waiting, thousands_waiting)
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job[0]) == "waiting"


async def test_admin_list_pages_by_filter_newest_first(queue, pool):
    await register(pool, "a")
    await register(pool, "b")
    for i in range(7):
        await queue.submit("a" if i % 2 else "b", f"t{i}")
    everything = [j["id"] for j in await queue.admin_list_jobs(limit=50)]
    a_ids = [i for i in everything if (await queue.admin_get_job(i))["kind"] == "a"]
    first = await queue.admin_list_jobs(kind="a", limit=2)
    rest = await queue.admin_list_jobs(kind="a", limit=50, before=first[-1]["id"])
    assert [j["id"] for j in first + rest] == a_ids
    queued = await queue.admin_list_jobs(state="queued", limit=50)
    assert [j["id"] for j in queued] == everything


async def test_stats_are_counted_at_most_once_per_max_age(pool):
    await register(pool, "k")
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k', 't' || g from generate_series(1, 3) g")

    async def stats(now):
        return json.loads(await pool.fetchval("select jobfeed.stats_v2(15, '5 seconds', $1)::text", now))

    first = await stats(T0)
    assert first["counts"] == {"k": {"queued": 3}} and first["as_of"].startswith("2030-01-01T00:00:00")
    await pool.execute("insert into jobfeed.jobs (kind, target) values ('k', 'new')")
    snapshot = await stats(T0 + dt.timedelta(seconds=4))
    assert snapshot["counts"] == {"k": {"queued": 3}}  # the snapshot
    # it says its age: counted at T0, answered 4 s later (before: now was as_of)
    assert snapshot["as_of"].startswith("2030-01-01T00:00:00") and snapshot["now"].startswith("2030-01-01T00:00:04")
    later = await stats(T0 + dt.timedelta(seconds=6))
    assert later["counts"] == {"k": {"queued": 4}} and later["as_of"].startswith("2030-01-01T00:00:06")


async def _stats_at(pool, now):
    return json.loads(await pool.fetchval("select jobfeed.stats_v2(15, '5 seconds', $1)::text", now))


async def test_final_counts_are_recounted_once_older_than_thirty_times_their_cost(pool):
    """The counts of final states read the whole history kept: kept in the
    snapshot while younger than 30 times what their count took (planted here:
    as if it took a second), while the unfinished ones are recounted each time."""
    await register(pool, "k")
    finished = ("insert into jobfeed.jobs (kind, target, state, finished_at) "
                "select 'k', $1 || g, 'completed', now() from generate_series(1, $2::int) g")
    await pool.execute(finished, "a", 3)
    await pool.execute("insert into jobfeed.jobs (kind, target) values ('k', 'q1')")
    first = await _stats_at(pool, T0)
    assert first["counts"] == {"k": {"queued": 1, "completed": 3}}
    assert first["finished_as_of"] == first["as_of"]

    # a count that took no time: the next recount is the whole table again
    await pool.execute(finished, "b", 1)
    again = await _stats_at(pool, T0 + dt.timedelta(seconds=6))
    assert again["counts"] == {"k": {"queued": 1, "completed": 4}}

    await pool.execute("update jobfeed.stats_snapshot set finished_seconds = 1")
    await pool.execute(finished, "c", 2)
    await pool.execute("insert into jobfeed.jobs (kind, target) values ('k', 'q2')")
    kept = await _stats_at(pool, T0 + dt.timedelta(seconds=30))
    assert kept["counts"] == {"k": {"queued": 2, "completed": 4}}  # queued recounted, completed kept
    assert kept["as_of"].startswith("2030-01-01T00:00:30") and kept["finished_as_of"].startswith("2030-01-01T00:00:06")
    recounted = await _stats_at(pool, T0 + dt.timedelta(seconds=37))
    assert recounted["counts"] == {"k": {"queued": 2, "completed": 6}}
    assert recounted["finished_as_of"] == recounted["as_of"]


async def test_unfinished_counts_read_only_unfinished_jobs_over_a_long_history(pool, dsn):
    await register(pool, "k")
    await _history_and_queue(pool, "k", "k")
    conn = await db.connect(dsn)
    try:
        rows, plans = await explained(conn, "select jobfeed.state_counts(false)::text", analyze=True)
        assert json.loads(rows[0][0]) == {"k": {"queued": 5}}
        assert most_rows_one_node_read(plans) <= 5, heavy_lines(plans)
    finally:
        await conn.close()


async def test_a_paused_kind_does_not_age_the_oldest_due_job(pool):
    """An admin's pause holds its kind's jobs on purpose: an alert on the
    oldest due job's age must not fire for it (before: it counted them)."""
    await register(pool, "k")
    await register(pool, "held")
    await pool.execute("insert into jobfeed.jobs (kind, target, run_after) values "
                       "('k', 'new', $1), ('held', 'old', $2)", T0 - dt.timedelta(seconds=10),
                       T0 - dt.timedelta(seconds=600))
    assert (await _stats_at(pool, T0))["oldest_due_seconds"] == 600
    await pool.execute("update jobfeed.kinds set paused = true where kind = 'held'")
    assert (await _stats_at(pool, T0 + dt.timedelta(seconds=6)))["oldest_due_seconds"] == 16
    await pool.execute("update jobfeed.kinds set paused = false where kind = 'held'")
    assert (await _stats_at(pool, T0 + dt.timedelta(seconds=12)))["oldest_due_seconds"] == 612


async def test_the_views_are_one_expression_with_no_call_of_jobfeeds_per_job(pool):
    """public_view and admin_view, read for every job of a page, a feed's re-read
    or a submit's answer, are inlined with the helpers they use: the plan of a
    read of many views calls no function of jobfeed's per row (the status's
    helper was not inlined, a call of its own for each view)."""
    for view in ("public_view", "admin_view"):
        rows = await pool.fetch(f"explain verbose select jobfeed.{view}(j) from jobfeed.jobs j")
        plan = "\n".join(r[0] for r in rows)
        assert "'processing'" in plan and "'scheduled_for'" in plan, plan
        assert "jobfeed." not in plan.replace("jobfeed.jobs", "").replace("jobfeed.job_state", ""), plan


async def test_no_statement_of_jobfeeds_is_compiled_by_jit(pool, dsn):
    """JIT compilation costs tens to hundreds of milliseconds a statement. On
    PostgreSQL 15-17 a plan made under a function's enable_seqscan = off carries
    the disabled node's cost penalty, far above jit_above_cost, and a server
    built with LLVM compiled every claim (60-340 ms each). Every function with
    settings of its own turns JIT off (sql/functions/95_no_jit.sql), and where
    the server can compile, a claim and a submit under a session that asks JIT
    for every statement compile nothing of jobfeed's."""
    assert await pool.fetch("select p.oid::regprocedure::text from pg_proc p "
                            "where p.pronamespace = 'jobfeed'::regnamespace and p.proconfig is not null "
                            "and not 'jit=off' = any (p.proconfig)") == []
    # entry points are among them (each has its search_path): the roles call only those
    assert await pool.fetchval("select count(*) from pg_proc p where p.pronamespace = 'jobfeed'::regnamespace "
                               "and p.prosecdef and p.proconfig is null") == 0
    await register(pool, "k")
    await pool.execute("insert into jobfeed.jobs (kind, target) select 'k', 't' || g from generate_series(1, 50) g")
    if not await pool.fetchval("select pg_jit_available()"):
        return  # (the embedded server is built without LLVM; CI's run on Debian's server has it)
    conn = await db.connect(dsn)
    try:
        await conn.execute("set jit = on; set jit_above_cost = 0; set jit_inline_above_cost = 0; "
                           "set jit_optimize_above_cost = 0")
        for sql in ("select count(*) from jobfeed.claim_v3(array['k'], 10, 'w')",
                    "select count(*) from jobfeed.claim_v2(array['k'], 10, 'w')",
                    "select count(*) from jobfeed.submit_quick('k', 'new', '{}')"):
            rows, plans = await explained(conn, sql, analyze=True)
            assert rows[0][0] > 0, sql
            assert "jobfeed.jobs" in plans and "JIT:" not in plans, (sql, plans)
    finally:
        await conn.close()
