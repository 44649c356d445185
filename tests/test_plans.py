"""The queue's per-job statements are planned once per connection, not at every call.

PostgreSQL plans a prepared statement (and each statement of a function) for
its parameters' values five times, then weighs one generic plan against those;
where the generic plan's estimate is the dearer (an array or a row count it
cannot see), it plans every later call anew, which costs more than running the
statement. pg_stat_statements (the test server preloads it) counts both, the
functions' nested statements included. (The admin's bulk actions are left out:
each batch's pick is planned for its filter on purpose, see 60_admin.sql.)

Before PostgreSQL 18 a SQL-language function's statements are planned at every
call (README, "PostgreSQL versions"): there jobfeed runs each such function it
does not want inlined as PL/pgSQL, whose plans a session keeps, and these tests
hold on every server (CI runs them on an older one too)."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
from typing import AsyncIterator

from jobfeed.worker import db
from jobfeed.worker.queue import Queue

CALLS = 30
DB_OID = "(select oid from pg_database where datname = current_database())"
THIS_DATABASE = f"dbid = {DB_OID}"


@contextlib.asynccontextmanager
async def counted(dsn: str, statements: int = 10, only: tuple[str, ...] = ()) -> AsyncIterator[Queue]:
    """A queue on one connection whose statements' plans are counted; on exit,
    none of those run CALLS times or more was planned at more than half of its
    calls (a kept plan: at most six, five custom and the generic one, per
    connection and prepared statement)."""
    conn = await db.connect(dsn)
    try:
        await conn.execute("create extension if not exists pg_stat_statements")
        await conn.execute("set pg_stat_statements.track = 'all'")
        await conn.execute("set pg_stat_statements.track_planning = on")
        await conn.execute(f"select pg_stat_statements_reset(0, {DB_OID}, 0)")
        yield Queue(conn)
        # only: the statements holding one of these texts
        mine = "(cardinality($2::text[]) = 0 or query like any ($2))"
        patterns = [f"%{text}%" for text in only]
        replanned = await conn.fetch(f"select calls, plans, query from pg_stat_statements where {THIS_DATABASE}"
                                     f" and calls >= $1 and plans * 2 > calls and {mine} order by plans desc",
                                     CALLS, patterns)
        assert not replanned, "\n".join(f"{r['plans']} plans in {r['calls']} calls: {r['query']}" for r in replanned)
        # it counted: the statements ran, and were planned
        planned = await conn.fetchval(f"select count(*) from pg_stat_statements where {THIS_DATABASE}"
                                      f" and calls >= $1 and plans >= 1 and {mine}", CALLS, patterns)
        assert planned >= statements
    finally:
        await conn.close()


async def test_a_submit_next_due_and_the_feeds_reread_keep_their_plans_on_every_server(dsn):
    """The SQL functions called most on their own: a single submit
    (submit_quick), the worker's look for the next due job after a claim
    (next_due_v2) and the feed's re-read of views (get_jobs), each its own
    statement."""
    async with counted(dsn, statements=3, only=("with ins as (", "select min(t) from (",
                                                "with rows as materialized (")) as queue:
        await queue.register_kind("hot", max_attempts=5, lease=60.0, backoff=(1.0,))
        for i in range(CALLS):
            submitted = await queue.submit("hot", f"one-{i}", {"i": i})
            await queue.next_due_after_claim(["hot"], None)
            await queue.get_jobs_json([submitted.id])


async def test_submits_claims_and_outcomes_keep_their_plans(dsn):
    # a caller's own submits, counted apart from the API's flushes below (which call the
    # same helpers, under their own generic plan)
    async with counted(dsn) as queue:
        await queue.register_kind("hot", max_attempts=5, lease=60.0, backoff=(1.0,))
        for i in range(CALLS):
            await queue.submit("hot", f"one-{i}", {"i": i})
            await queue.submit_many("hot", [(f"few-{i}-{k}", {"k": k}) for k in range(3)])
    async with counted(dsn) as queue:
        for i in range(CALLS):
            # the API's group commit: new targets, then the same ones again
            items = [(f"api-{i}-{k}", {"k": k}) for k in range(4)]
            for _ in range(2):
                answers = await queue.submit_many_requests_json("hot", items, requesters=[None] * 4,
                                                                notify_urls=[None] * 4, max_payload=65536)
            await queue.submit_request_json("hot", f"lone-{i}", {"i": i})  # a flush of one
            await queue.positions([answers[0][0]])
            await queue.get_job_json(answers[0][0])  # a queued job's read counts its own position
            jobs, _ = await queue.claim_timed(["hot"], 6, "w")
            await queue.extend_many([(j.id, j.generation) for j in jobs])
            await queue.progress(jobs[0].id, jobs[0].generation, 1, 2, "half")
            await queue.fail_transient(jobs[0].id, jobs[0].generation, "flaky", "try again", 0)
            await queue.complete_many_json([(j.id, j.generation, json.dumps(None)) for j in jobs[1:]])
            await queue.next_due_after_claim(["hot"], None)
            await queue.get_jobs_json([j.id for j in jobs])
            await queue.delete_finished(0, 2)


async def test_flow_control_and_admin_paths_keep_their_plans(dsn):
    async with counted(dsn) as queue:
        await queue.register_kind("capped", max_attempts=1, lease=60.0, backoff=(1.0,), max_running=3,
                                  max_running_per_key=1)
        await queue.register_kind("plain", max_attempts=1, lease=60.0, backoff=(1.0,))
        for i in range(CALLS):
            await queue.submit("capped", f"c-{i}", {}, concurrency_key=f"key-{i % 2}")
            kept = await queue.submit_request_json("plain", f"p-{i}", {})
            gone = await queue.submit_request_json("plain", f"q-{i}", {})
            jobs, _ = await queue.claim_timed(["capped", "plain"], 4, "w")
            for job in jobs:
                if job.kind == "capped":
                    await queue.release(job.id, job.generation, "busy")
                elif job.id == kept[0]:
                    await queue.fail_permanent(job.id, job.generation, "broken", "no")
            await queue.leave(gone[3])
            await queue.retry(kept[0])
            await queue.cancel(kept[0])
            await queue.admin_list_jobs(kind="plain", limit=5)


async def test_workflows_schedules_sweeps_and_dashboard_reads_keep_their_plans(dsn):
    async with counted(dsn) as queue:
        await queue.register_kind("flow", max_attempts=3, lease=60.0, backoff=(1.0,))
        await queue.register_schedule("flow", None, "UTC", 60.0)
        slot = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
        for i in range(CALLS):
            parent = (await queue.submit("flow", f"parent-{i}", {})).id
            fan_in = (await queue.submit("flow", f"fan-in-{i}", {})).id
            waiting, *_ = await queue.submit_waiting_json("flow", f"after-{i}", {}, after=[parent])
            signalled, *_ = await queue.submit_waiting_json("flow", f"signal-{i}", {}, await_signals=["go"])
            await queue.signal(signalled, "go", {"i": i})
            jobs, _ = await queue.claim_timed(["flow"], 10, "w")
            for job in jobs:
                if job.id in (parent, fan_in):
                    kid = await queue.child_id(job.id, job.generation, "flow", f"kid-{job.id}", {})
                    children = [{"id": str(kid), "kind": "flow", "target": f"kid-{job.id}", "payload": {}}]
                    if job.id == parent:
                        await queue.complete_spawning(parent, job.generation, None, children)
                    else:  # waits for its child and for the parent
                        await queue.wait_for(fan_in, job.generation, children, [kid, parent])
                else:
                    await queue.complete_many_json([(job.id, job.generation, json.dumps(i))])
            page = await queue.submit_request_json("flow", f"page-{i}", {})  # a page closed, then reloaded
            await queue.leave_later_json(page[3], 30)
            await queue.stay_json(page[3])
            await queue.enqueue_slot("flow", slot + dt.timedelta(minutes=i))
            await queue.sweep_expired()
            await queue.leave_due(10)
            await queue.stats(max_age=0)
            await queue.sample_depth()
            await queue.charts()
            await queue.list_workers()
            await queue.admin_get_jobs_json([waiting, signalled])
