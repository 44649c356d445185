"""Outcomes, backoff, admin actions, claim selection and bad input, each proven
by trying to break it on the real database. Time is a parameter (p_now):
nothing here sleeps to let time pass."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import asyncpg
import pytest

from queue_sql import (ATTEMPTS, M, S, T0, claim, claim_one, fail_transient, job, jobs_pages, log, pages_of, public, register,
                       submit)
from jobfeed.worker.queue import QueueError


# ---------------------------------------------------------------- backoff

async def test_backoff_follows_schedule_by_attempt(pool, k):
    await register(pool, "k", max_attempts=6)
    jid = await submit(pool, "t")
    expected = [M, 5 * M, 15 * M, 60 * M, 60 * M]  # the last step repeats
    t = T0
    for attempt, delay in enumerate(expected, start=1):
        # not claimable a second before it is due
        assert await claim(pool, now=t - S) == []
        r = await claim_one(pool, now=t)
        assert r["attempts"] == attempt
        failed_at = t + 10 * S
        assert await fail_transient(pool, r, now=failed_at) is True
        row = await job(pool, jid)
        assert row["state"] == "queued"
        assert row["run_after"] - failed_at == delay, f"attempt {attempt}"
        t = row["run_after"]
    assert [a["outcome"] for a in await log(pool, jid)] == ["transient"] * 5


async def test_jitter_stays_within_bounds(pool):
    await register(pool, "j", backoff="{100 seconds}", jitter=0.5)
    for i in range(40):
        await submit(pool, f"t{i}", kind="j")
    delays = []
    for r in await claim(pool, 40, kinds=("j",)):
        assert await fail_transient(pool, r) is True
        delays.append(((await job(pool, r["id"]))["run_after"] - T0).total_seconds())
    assert len(delays) == 40
    assert all(50 <= d <= 150 for d in delays), delays
    assert len(set(delays)) > 1, "jitter was not applied"


async def test_longer_retry_after_wins_over_backoff(pool, k):
    a, b = await submit(pool, "a"), await submit(pool, "b")
    ra, rb = await claim(pool, 2)
    assert {ra["id"], rb["id"]} == {a, b}
    assert await fail_transient(pool, ra, retry_after=10 * M) is True
    assert await fail_transient(pool, rb, retry_after=10 * S) is True
    assert (await job(pool, ra["id"]))["run_after"] - T0 == 10 * M
    assert (await job(pool, rb["id"]))["run_after"] - T0 == M  # backoff (1 min) is longer


# ---------------------------------------------------------------- release

async def test_release_is_not_counted_and_respects_retry_after(pool, k):
    await register(pool, "k", max_attempts=2)
    jid = await submit(pool, "t")
    t = T0
    # Far more releases than max_attempts: the job must never fail for them.
    for n in range(1, 6):
        r = await claim_one(pool, now=t)
        assert r["attempts"] == 1 and r["generation"] == n
        ok = await pool.fetchval("select jobfeed.release($1, $2, 'budget', $3, 'time is up', $4)",
                                 r["id"], r["generation"], 30 * S, t)
        assert ok is True
        row = await job(pool, jid)
        assert (row["state"], row["attempts"], row["lease_until"]) == ("queued", 0, None)
        assert row["run_after"] == t + 30 * S
        assert row["last_error_code"] == "budget"
        assert await claim(pool, now=t + 29 * S) == []
        t = t + 30 * S
    assert {a["outcome"] for a in await log(pool, jid)} == {"released"}
    assert (await public(pool, jid))["status"] == "processing"


# ---------------------------------------------------------------- failing for good

async def test_max_attempts_fails_with_last_error(pool, k):
    await register(pool, "k", max_attempts=3, backoff="{1 second}")
    jid = await submit(pool, "t")
    t = T0
    for i in range(3):
        r = await claim_one(pool, now=t)
        assert await fail_transient(pool, r, code=f"e{i + 1}", now=t) is True
        t += M
    row = await job(pool, jid)
    assert (row["state"], row["attempts"], row["last_error_code"]) == ("failed", 3, "e3")
    assert row["finished_at"] == T0 + 2 * M
    view = await public(pool, jid)
    assert view["status"] == "failed"
    assert view["error"] == {"code": "e3", "message": "msg e3"}
    assert await claim(pool, 10, now=t + 60 * M) == []


async def test_permanent_failure_fails_at_once(pool, k):
    jid = await submit(pool, "t")
    r = await claim_one(pool)
    assert await pool.fetchval("select jobfeed.fail_permanent($1, $2, 'gone', 'not found', $3)",
                               jid, r["generation"], T0 + S) is True
    row = await job(pool, jid)
    assert (row["state"], row["attempts"], row["finished_at"]) == ("failed", 1, T0 + S)
    assert (await public(pool, jid))["error"] == {"code": "gone", "message": "not found"}
    assert [a["outcome"] for a in await log(pool, jid)] == ["permanent"]
    assert await claim(pool, 10, now=T0 + 60 * M) == []


@pytest.mark.parametrize("via", ["claim", "sweep"])
async def test_expired_lease_without_attempts_left_fails(pool, k, via):
    await register(pool, "k", max_attempts=1, lease="1 minute")
    jid = await submit(pool, "t")
    await claim_one(pool)
    version = (await job(pool, jid))["version"]
    # Not expired yet: nothing happens.
    assert await pool.fetchval("select jobfeed.sweep_expired($1)", T0 + 30 * S) == 0
    assert await claim(pool, now=T0 + 30 * S) == []
    assert (await job(pool, jid))["state"] == "running"
    later = T0 + 2 * M
    if via == "claim":
        assert await claim(pool, now=later) == []  # failed, not handed out again
    else:
        assert await pool.fetchval("select jobfeed.sweep_expired($1)", later) == 1
    row = await job(pool, jid)
    assert (row["state"], row["last_error_code"], row["finished_at"]) == ("failed", "lease_expired", later)
    assert row["version"] == version + 1
    assert (await public(pool, jid))["error"]["code"] == "lease_expired"
    [a] = await log(pool, jid)
    assert (a["outcome"], a["finished_at"]) == ("lease_expired", later)


async def test_claim_of_other_kinds_leaves_expired_jobs_alone(pool, k):
    await register(pool, "k", max_attempts=1, lease="1 minute")
    await register(pool, "other")
    jid = await submit(pool, "t")
    await claim_one(pool)
    assert await claim(pool, 10, now=T0 + 2 * M, kinds=("other",)) == []
    assert (await job(pool, jid))["state"] == "running"


# ---------------------------------------------------------------- admin: retry and cancel

async def test_retry_resets_attempts_and_keeps_generation_growing(pool, queue, k):
    await register(pool, "k", max_attempts=1)
    jid = await submit(pool, "t")
    r = await claim_one(pool)
    await fail_transient(pool, r)
    assert (await job(pool, jid))["state"] == "failed"
    before = await job(pool, jid)
    await pool.fetchval("select jobfeed.retry($1, $2)", jid, T0 + M)
    row = await job(pool, jid)
    assert (row["state"], row["attempts"], row["generation"]) == ("queued", 0, 1)
    assert row["run_after"] == T0 + M and row["finished_at"] is None
    assert row["version"] == before["version"] + 1
    view = await public(pool, jid)
    assert (view["status"], view["error"]) == ("processing", None)
    r2 = await claim_one(pool, now=T0 + M)
    assert (r2["generation"], r2["attempts"]) == (2, 1)
    # The first run's generation stays fenced out.
    assert await pool.fetchval("select jobfeed.complete($1, 1, '{}')", jid) is False


async def test_retry_of_a_job_canceled_before_its_first_start_keeps_its_time(pool, queue, k):
    """An admin retry undoes the cancel of a job that never started: one asked
    for later is due at that time again (scheduled_for shows it), not now; one
    whose time has passed, or that ran (its backoff is not kept), is due at once."""
    later = await pool.fetchval("select id from jobfeed.submit('k', 'later', '{}', $1, 65536, $2)", T0 + 60 * M, T0)
    passed = await pool.fetchval("select id from jobfeed.submit('k', 'passed', '{}', $1, 65536, $2)", T0 + S, T0)
    backed_off = await submit(pool, "backed-off")
    assert await fail_transient(pool, await claim_one(pool)) is True
    assert (await job(pool, backed_off))["run_after"] == T0 + M
    for jid in (later, passed, backed_off):
        await pool.fetchval("select jobfeed.cancel($1, $2)", jid, T0)
        await pool.fetchval("select jobfeed.retry($1, $2)", jid, T0 + 2 * S)
    assert (await job(pool, later))["run_after"] == T0 + 60 * M
    assert (await job(pool, passed))["run_after"] == T0 + 2 * S
    assert (await job(pool, backed_off))["run_after"] == T0 + 2 * S
    assert dt.datetime.fromisoformat((await public(pool, later))["scheduled_for"]) == T0 + 60 * M
    assert {r["id"] for r in await claim(pool, 5, now=T0 + 2 * S)} == {passed, backed_off}
    assert later in {r["id"] for r in await claim(pool, 5, now=T0 + 60 * M)}


async def test_retry_and_cancel_refuse_wrong_state_and_unknown_id(pool, queue, k):
    jid = await submit(pool, "t")
    with pytest.raises(QueueError) as e:  # queued: not retryable
        await queue.retry(jid)
    assert (e.value.code, e.value.status) == ("invalid_state", 409)
    await claim_one(pool)
    with pytest.raises(QueueError) as e:  # running: not retryable
        await queue.retry(jid)
    assert (e.value.code, e.value.status) == ("invalid_state", 409)
    view = await queue.cancel(jid)
    assert view["state"] == "canceled" and view["status"] == "canceled"
    before = await job(pool, jid)
    with pytest.raises(QueueError) as e:  # already finished
        await queue.cancel(jid)
    assert (e.value.code, e.value.status) == ("invalid_state", 409)
    assert await job(pool, jid) == before
    for call in (queue.retry, queue.cancel):
        with pytest.raises(QueueError) as e:
            await call(uuid.uuid4())
        assert (e.value.code, e.value.status) == ("not_found", 404)
    # canceled -> retry is allowed
    assert (await queue.retry(jid))["state"] == "queued"


async def test_cancel_completed_job_is_refused(pool, queue, k):
    jid = await submit(pool, "t")
    r = await claim_one(pool)
    assert await pool.fetchval("select jobfeed.complete($1, $2, '1')", jid, r["generation"]) is True
    with pytest.raises(QueueError) as e:
        await queue.cancel(jid)
    assert e.value.code == "invalid_state"
    assert (await job(pool, jid))["state"] == "completed"


async def test_retry_refused_while_another_job_holds_the_target(pool, queue, k):
    old = await submit(pool, "t")
    r = await claim_one(pool)
    await pool.fetchval("select jobfeed.fail_permanent($1, $2, 'x')", old, r["generation"])
    new = await submit(pool, "t")
    assert new != old
    before = await pool.fetch("select * from jobfeed.jobs order by id")
    with pytest.raises(QueueError) as e:
        await queue.retry(old)
    assert (e.value.code, e.value.status) == ("target_busy", 409)
    assert await pool.fetch("select * from jobfeed.jobs order by id") == before


# ---------------------------------------------------------------- cleanup

async def test_delete_finished_takes_only_old_finished_jobs_in_batches(pool, k):
    old = T0 - dt.timedelta(days=8)
    await pool.execute("""
        insert into jobfeed.jobs (kind, target, state, created_at, run_after, finished_at)
        select 'k', s::text || g, s, $1::timestamptz, $1::timestamptz + interval '1 year',
               case when s in ('completed', 'failed', 'canceled') then $1::timestamptz end
          from unnest(enum_range(null::jobfeed.job_state)) s, generate_series(1, 3) g""", old)
    recent = await submit(pool, "recent")
    r = await claim_one(pool)
    assert r["id"] == recent
    await pool.fetchval("select jobfeed.complete($1, $2, null, $3)", recent, r["generation"], T0 - M)
    # Batches of 4 until one comes back short: 9 old finished jobs go, nothing else.
    counts = []
    while not counts or counts[-1] == 4:
        counts.append(await pool.fetchval("select jobfeed.delete_finished('7 days', 4, $1)", T0))
    assert counts == [4, 4, 1]
    left = await pool.fetch("select state::text, count(*) from jobfeed.jobs group by 1 order by 1")
    assert [tuple(x) for x in left] == [("completed", 1), ("queued", 3), ("running", 3), ("waiting", 3)]
    assert await pool.fetchval(f"select count(*) from {ATTEMPTS} a") == 1  # the recent job's


# ---------------------------------------------------------------- claim selection

async def test_claim_never_returns_more_than_asked(pool, k):
    await register(pool, "k2")
    for i in range(10):
        await submit(pool, f"t{i}")
        await submit(pool, f"t{i}", kind="k2")
    assert await claim(pool, 0) == []
    assert await claim(pool, -1) == []
    assert len(await claim(pool, 3)) == 3
    assert len(await claim(pool, 12, kinds=("k", "k2"))) == 12  # across kinds, one total limit
    assert len(await claim(pool, 100, kinds=("k", "k2"))) == 5
    assert await pool.fetchval("select count(*) from jobfeed.jobs where state = 'running'") == 20
    # attempts are logged when they end
    assert await pool.fetchval("select count(*) from jobfeed.attempts") == 0


async def test_one_claim_takes_expired_leases_first_then_queued_jobs_within_its_limit(pool):
    await register(pool, "a", lease="1 minute")
    await register(pool, "b", lease="1 minute")
    stale = await submit(pool, "stale", kind="a")
    await claim_one(pool, kinds=("a",), worker="dead")
    later = T0 + 2 * M
    queued_a = await submit(pool, "qa", kind="a", now=later)
    queued_b = await submit(pool, "qb", kind="b", now=later)
    rows = await claim(pool, 2, now=later, kinds=("a", "b"), worker="live")
    # the slots are shared by kind (one each); a's goes to its expired lease first
    assert sorted((r["generation"], r["id"]) for r in rows) == [(1, queued_b), (2, stale)]
    assert (await job(pool, queued_a))["state"] == "queued"  # the limit was used up
    assert [(a["outcome"], a["worker_id"]) for a in await log(pool, stale)] == [("lease_expired", "dead")]
    assert [r["id"] for r in await claim(pool, 5, now=later, kinds=("a", "b"))] == [queued_a]


async def test_claim_leaves_other_kinds_and_future_jobs_alone(pool, k):
    await register(pool, "other")
    other = await submit(pool, "o", kind="other")
    future = await pool.fetchval("select id from jobfeed.submit('k', 'f', '{}', $1, 65536, $2)", T0 + M, T0)
    due = await submit(pool, "d")
    assert [r["id"] for r in await claim(pool, 10)] == [due]
    assert (await job(pool, other))["generation"] == 0
    assert (await job(pool, future))["state"] == "queued"
    assert [r["id"] for r in await claim(pool, 10, now=T0 + M)] == [future]


async def test_next_due_returns_the_soonest(pool, k):
    await register(pool, "other")
    assert await pool.fetchval("select jobfeed.next_due(array['k'])") is None
    await pool.fetchval("select id from jobfeed.submit('k', 'a', '{}', $1, 65536, $2)", T0 + 5 * M, T0)
    await pool.fetchval("select id from jobfeed.submit('k', 'b', '{}', $1, 65536, $2)", T0 + 3 * M, T0)
    await pool.fetchval("select id from jobfeed.submit('other', 'c', '{}', $1, 65536, $2)", T0, T0)
    assert await pool.fetchval("select jobfeed.next_due(array['k'])") == T0 + 3 * M
    await pool.fetchval("select id from jobfeed.submit('k', 'r', '{}', null, 65536, $1)", T0 - M)
    await claim_one(pool, now=T0 - M, lease=90 * S)  # running, lease ends at T0 + 30 s
    assert await pool.fetchval("select jobfeed.next_due(array['k'])") == T0 + 30 * S
    assert await pool.fetchval("select jobfeed.next_due(array['k', 'other'])") == T0


async def test_next_due_finds_the_soonest_across_priorities(pool, k):
    """The claim takes higher priorities first, but a worker sleeps until the
    soonest job of its kinds, whatever its priority."""
    at = {"high": (9, T0 + 7 * M), "mid": (0, T0 + 2 * M), "low": (-4, T0 + 4 * M), "low2": (-4, T0 + M)}
    for target, (priority, run_after) in at.items():
        await pool.fetchval("select id from jobfeed.submit_quick('k', $1, '{}', $2, 65536, $3, $4)",
                            target, run_after, T0, priority)
    assert await pool.fetchval("select jobfeed.next_due(array['k'])") == T0 + M
    await pool.execute("delete from jobfeed.jobs where target = 'low2'")
    assert await pool.fetchval("select jobfeed.next_due(array['k'])") == T0 + 2 * M
    await pool.execute("delete from jobfeed.jobs where target in ('mid', 'low')")
    assert await pool.fetchval("select jobfeed.next_due(array['k'])") == T0 + 7 * M


# ---------------------------------------------------------------- bad input

BAD_SUBMISSIONS = [
    ("nope", "t", {}, "unknown_kind", 422),
    ("k", "", {}, "invalid_target", 422),
    ("k", "é" * 257, {}, "invalid_target", 422),  # 257 characters, 514 bytes
    ("k", "t", [1, 2], "invalid_payload", 422),
    ("k", "t", "text", "invalid_payload", 422),
    ("k", "t", {"x": "y" * 70_000}, "payload_too_large", 413),
]


async def test_bad_submission_is_refused_and_changes_nothing(pool, queue, k):
    await submit(pool, "existing")
    before = await pool.fetch("select * from jobfeed.jobs")
    for kind, target, payload, code, status in BAD_SUBMISSIONS:
        with pytest.raises(QueueError) as e:
            await queue.submit(kind, target, payload)
        assert (e.value.code, e.value.status) == (code, status)
        assert await pool.fetch("select * from jobfeed.jobs") == before, code


# Bad rows as a caller of the SQL functions could send them, past the Python
# checks: (statement, arguments, the code the database answers).
_CHILD = "select jobfeed.complete_spawning($1, $2, '{}', $3::jsonb)"
_QUICK = "select * from jobfeed.submit_quick('k', $1, $2::jsonb, null, 65536, null, null, $3, {view})"
BAD_ROWS = [
    (_QUICK.format(view="false"), ("", "{}", None), "invalid_target"),
    (_QUICK.format(view="false"), ("t", "[1]", None), "invalid_payload"),
    (_QUICK.format(view="false"), ("t", "{}", ""), "invalid_concurrency_key"),
    (_QUICK.format(view="true"), ("t", "{}", "x" * 513), "invalid_concurrency_key"),
    ("select * from jobfeed.submit_v2('k', $1, $2::jsonb, null, 65536, null, null, $3)",
     ("t", "{}", "é" * 257), "invalid_concurrency_key"),
    ("select * from jobfeed.submit_many_v2('k', array[$1, 'u'], array[$2::jsonb, '{}'], null, 65536, null, null, $3)",
     ("t", "{}", ""), "invalid_concurrency_key"),
]
BAD_CHILDREN = [
    ({"target": ""}, "invalid_target"),
    ({"target": "x" * 513}, "invalid_target"),
    ({"payload": [1]}, "invalid_payload"),
    ({"concurrency_key": ""}, "invalid_concurrency_key"),
    ({"concurrency_key": "x" * 513}, "invalid_concurrency_key"),
]


async def test_the_database_refuses_a_job_row_that_breaks_its_rules(pool, k):
    """The rules a job's row keeps (target and key 1 to 512 bytes, payload an
    object) hold for every function that writes one, whatever its caller
    checked first, and a refusal writes nothing."""
    parent = await submit(pool, "parent")
    running = await claim_one(pool)
    before = await pool.fetch("select * from jobfeed.jobs order by id")
    for statement, args, code in BAD_ROWS:
        with pytest.raises(asyncpg.PostgresError) as e:
            await pool.fetch(statement, *args)
        assert (e.value.sqlstate, e.value.hint) == ("JF422", code), (statement, args)
    for fields, code in BAD_CHILDREN:
        child = {"id": str(uuid.uuid4()), "kind": "k", "target": "c", "payload": {}} | fields
        with pytest.raises(asyncpg.PostgresError) as e:
            await pool.fetchval(_CHILD, parent, running["generation"], json.dumps([child]))
        assert (e.value.sqlstate, e.value.hint) == ("JF422", code), fields
    assert await pool.fetch("select * from jobfeed.jobs order by id") == before
    # the same calls within the rules write their rows
    assert (await pool.fetchrow(BAD_ROWS[0][0], "t", "{}", "x" * 512))["created"]
    good = {"id": str(uuid.uuid4()), "kind": "k", "target": "c", "payload": {}, "concurrency_key": "é" * 256}
    assert await pool.fetchval(_CHILD, parent, running["generation"], json.dumps([good])) is True
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 3


async def test_target_limit_is_bytes_inclusive(pool, queue, k):
    assert (await queue.submit("k", "x" * 512)).created
    assert (await queue.submit("k", "é" * 256)).created  # 512 bytes
    with pytest.raises(QueueError):
        await queue.submit("k", "x" * 513)
    with pytest.raises(QueueError) as e:
        await queue.submit("k", "t", {"x": "y" * 100}, max_payload=50)
    assert e.value.code == "payload_too_large"


async def test_completion_logs_the_attempt_it_ends(pool, k):
    jid = await submit(pool, "logged")
    r1 = await claim_one(pool, worker="w1")
    assert await fail_transient(pool, r1, now=T0 + S) is True
    r2 = await claim_one(pool, now=T0 + 2 * M, worker="w2")
    done = T0 + 3 * M
    assert await pool.fetchval("select cardinality(jobfeed.complete_many(array[$1::uuid], array[$2::int], "
                               "array['{\"ok\": 1}'::jsonb], $3))", jid, r2["generation"], done) == 1
    # a second, stale completion of the same attempt changes nothing
    assert await pool.fetchval("select cardinality(jobfeed.complete_many(array[$1::uuid], array[$2::int], "
                               "array['{}'::jsonb], $3))", jid, r2["generation"], done + S) == 0
    rows = [(a["generation"], a["attempt"], a["worker_id"], a["started_at"], a["finished_at"], a["outcome"])
            for a in await log(pool, jid)]
    assert rows == [(1, 1, "w1", T0, T0 + S, "transient"), (2, 2, "w2", T0 + 2 * M, done, "completed")]
    # The completion is read from the job's row, not written twice; admins see the same log.
    assert await pool.fetchval("select array_agg(outcome) from jobfeed.attempts where job_id = $1",
                               jid) == ["transient"]
    view = json.loads(await pool.fetchval("select jobfeed.admin_get_job($1)::text", jid))
    assert [(a["generation"], a["outcome"], a["worker_id"]) for a in view["attempts_log"]] == \
        [(1, "transient", "w1"), (2, "completed", "w2")]


async def test_a_completion_an_earlier_version_logged_is_read_once(pool, k):
    jid = await submit(pool, "old")
    r = await claim_one(pool, worker="w1")
    assert await pool.fetchval("select jobfeed.complete($1, $2, null, $3)", jid, r["generation"], T0 + S)
    # as complete_many wrote it before the job's row stood for its completion
    await pool.execute("insert into jobfeed.attempts (job_id, generation, attempt, worker_id, started_at, "
                       "finished_at, outcome) values ($1, 1, 1, 'w1', $2, $3, 'completed')", jid, T0, T0 + S)
    assert [(a["generation"], a["outcome"], a["finished_at"]) for a in await log(pool, jid)] == \
        [(1, "completed", T0 + S)]


# ---------------------------------------------------------------- plans

async def test_completion_plans_made_on_an_empty_table_stay_index_probes_as_it_grows(pool, dsn):
    """complete_many runs on generic plans, made at a session's first call (here
    with one job in the table) and kept while the table grows unanalyzed. A
    completion must still find its jobs through the primary key, not read every
    running job."""
    from jobfeed.worker import db

    await register(pool, "k", lease="1 hour")
    conn = await db.connect(dsn)
    try:
        await submit(pool, "first")
        first = await claim_one(pool)
        assert await conn.fetchval("select cardinality(jobfeed.complete_many($1, $2, $3))",
                                   [first["id"]], [first["generation"]], [None]) == 1
        await pool.execute("""insert into jobfeed.jobs (kind, target, payload, state, generation, attempts,
                                                        lease_until, claimed_at)
                              select 'k', 'r' || g, '{}', 'running', 1, 1, now() + interval '1 hour', now()
                                from generate_series(1, 60000) g""")
        ids = [r["id"] for r in await pool.fetch("select id from jobfeed.jobs where target in ('r7', 'r30001')")]
        pages = await pages_of(conn, "select jobfeed.complete_many($1, $2, $3)", ids, [1, 1], [None, None])
    finally:
        await conn.close()
    full = await jobs_pages(pool)
    assert await pool.fetchval("select count(*) from jobfeed.jobs where id = any ($1) and state = 'completed'",
                               ids) == 2
    assert pages < full / 4, (pages, full)
