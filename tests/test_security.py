"""Least privilege: each service role may call exactly its functions and nothing
else; nobody touches the tables directly; every callable function runs as its
owner with a pinned search_path. Proven by logging in as each role."""

from __future__ import annotations

import asyncio
import os
import subprocess
import uuid
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from conftest import JOBFEED
from jobfeed.worker import migrate

ROLES = ("jobfeed_api", "jobfeed_worker", "jobfeed_sweeper")

# One harmless call per service function. Where the caller is allowed, each
# either succeeds or is refused by the queue's own rules (SQLSTATE class JF).
CALLS = {
    "register_kind": "select jobfeed.register_kind('k')",
    "list_kinds": "select * from jobfeed.list_kinds()",
    "submit": "select * from jobfeed.submit('k', gen_random_uuid()::text)",
    "submit_many": "select * from jobfeed.submit_many('k', array[gen_random_uuid()::text])",
    "submit_many_views": "select * from jobfeed.submit_many_views('k', array[gen_random_uuid()::text], null)",
    "submit_request": "select * from jobfeed.submit_request('k', gen_random_uuid()::text)",
    "submit_many_requests": "select * from jobfeed.submit_many_requests('k', array[gen_random_uuid()::text], null)",
    "leave": "select jobfeed.leave(gen_random_uuid())",
    "may_view": "select jobfeed.may_view(gen_random_uuid(), 'x', null)",
    "set_kind_request_policy": "select jobfeed.set_kind_request_policy('k', 'keep')",
    "register_kind_v2": "select jobfeed.register_kind_v2('k')",
    "submit_v2": "select * from jobfeed.submit_v2('k', gen_random_uuid()::text)",
    "submit_quick": "select * from jobfeed.submit_quick('k', gen_random_uuid()::text)",
    "submit_v3": "select * from jobfeed.submit_v3('k', gen_random_uuid()::text)",
    "set_kind_request_policy_v2": "select jobfeed.set_kind_request_policy_v2('k', 'keep')",
    "submit_many_v2": "select * from jobfeed.submit_many_v2('k', array[gen_random_uuid()::text])",
    "submit_many_views_v2": "select * from jobfeed.submit_many_views_v2('k', array[gen_random_uuid()::text], null)",
    "set_kind_paused": "select jobfeed.set_kind_paused('nothing', true)",
    "bulk_retry": "select * from jobfeed.bulk_retry(null, 'nothing', null, null)",
    "bulk_cancel": "select * from jobfeed.bulk_cancel(null, 'nothing', null, null)",
    "bulk_problem": "select jobfeed.bulk_problem(null, 'k', null, null)",
    "bulk_pick": "select jobfeed.bulk_pick('{queued}', null, 'k', null, null, null, 10)",
    "limits_lock": "select jobfeed.limits_lock('k')",
    "register_schedule": "select jobfeed.register_schedule('nothing', null, 'UTC', '1 hour')",
    "drop_schedule": "select jobfeed.drop_schedule('nothing')",
    "enqueue_slot": "select jobfeed.enqueue_slot('nothing', now())",
    "list_schedules": "select * from jobfeed.list_schedules()",
    "claim_limited_v2": "select * from jobfeed.claim_limited_v2('k', 1, 'w', '1 minute', now(), false, 1, null, null, null)",
    "get_job": "select jobfeed.get_job(gen_random_uuid())",
    "get_jobs": "select * from jobfeed.get_jobs(array[gen_random_uuid()])",
    "positions": "select * from jobfeed.positions(array[gen_random_uuid()])",
    "admin_get_job": "select jobfeed.admin_get_job(gen_random_uuid())",
    "admin_get_jobs": "select * from jobfeed.admin_get_jobs(array[gen_random_uuid()])",
    "admin_list_jobs": "select * from jobfeed.admin_list_jobs()",
    "stats": "select jobfeed.stats()",
    "stats_v2": "select jobfeed.stats_v2()",
    "retry": "select jobfeed.retry(gen_random_uuid())",
    "cancel": "select jobfeed.cancel(gen_random_uuid())",
    "claim": "select * from jobfeed.claim(array['nothing'], 1, 'w')",
    "claim_v2": "select * from jobfeed.claim_v2(array['nothing'], 1, 'w')",
    "claim_v3": "select * from jobfeed.claim_v3(array['nothing'], 1, 'w')",
    "next_due": "select jobfeed.next_due(array['k'])",
    "next_due_v2": "select jobfeed.next_due_v2(array['k'], now())",
    "extend_many": "select jobfeed.extend_many('{}', '{}')",
    "extend": "select jobfeed.extend(gen_random_uuid(), 1)",
    "progress": "select jobfeed.progress(gen_random_uuid(), 1, 1)",
    "checkpoint": "select jobfeed.checkpoint(gen_random_uuid(), 1, '{}')",
    "complete_many": "select jobfeed.complete_many('{}', '{}', '{}')",
    "complete": "select jobfeed.complete(gen_random_uuid(), 1)",
    "fail_transient": "select jobfeed.fail_transient(gen_random_uuid(), 1, 'x')",
    "fail_permanent": "select jobfeed.fail_permanent(gen_random_uuid(), 1, 'x')",
    "release": "select jobfeed.release(gen_random_uuid(), 1, 'x')",
    "submit_waiting": "select * from jobfeed.submit_waiting('k', gen_random_uuid()::text, '{}', '{}', '{a}')",
    "submit_waiting_v2": "select * from jobfeed.submit_waiting_v2('k', gen_random_uuid()::text, '{}', '{}', '{a}')",
    "signal": "select * from jobfeed.signal(gen_random_uuid(), 'a', '{}')",
    "signal_v2": "select * from jobfeed.signal_v2(gen_random_uuid(), 'a', '{}', 10)",
    "signals_of": "select * from jobfeed.signals_of(array[gen_random_uuid()])",
    "file_stage": "select jobfeed.file_stage('f', 'text/plain', 1024)",
    "file_attach": "select jobfeed.file_attach(gen_random_uuid(), '{}', '{}')",
    "file_discard": "select jobfeed.file_discard('{}')",
    "output_begin": "select jobfeed.output_begin(gen_random_uuid(), 1, 'f', 'text/plain', 1024)",
    "output_finish": "select jobfeed.output_finish(gen_random_uuid(), 1, 0, 0)",
    "output_discard": "select jobfeed.output_discard(gen_random_uuid(), 0)",
    "file_put": "select jobfeed.file_put(0, 0, 'x')",
    "files_of": "select * from jobfeed.files_of(gen_random_uuid(), 'in')",
    "file_read": "select jobfeed.file_read(0, 0)",
    "child_id": "select jobfeed.child_id(gen_random_uuid(), 1, 'k', 't', '{}')",
    "complete_spawning": "select jobfeed.complete_spawning(gen_random_uuid(), 1, null, '[]')",
    "wait_for": "select jobfeed.wait_for(gen_random_uuid(), 1, '[]', '{}')",
    "children_of": "select * from jobfeed.children_of(array[gen_random_uuid()])",
    "job_timings": "select * from jobfeed.job_timings(array[gen_random_uuid()])",
    "worker_beat": "select jobfeed.worker_beat('w', 'h', array['k'], 1, 0, '1 minute')",
    "worker_stopped": "select jobfeed.worker_stopped('w')",
    "list_workers": "select jobfeed.list_workers()",
    "charts": "select jobfeed.charts()",
    "set_traceparent": "select jobfeed.set_traceparent(gen_random_uuid(), 'x')",
    "sample_depth": "select jobfeed.sample_depth()",
    "sweep_expired": "select jobfeed.sweep_expired()",
    "next_signal_deadline": "select jobfeed.next_signal_deadline()",
    "next_deadline": "select jobfeed.next_deadline()",
    "leave_due": "select jobfeed.leave_due(1)",
    "leave_later": "select * from jobfeed.leave_later(gen_random_uuid(), '1 minute')",
    "stay": "select jobfeed.stay(gen_random_uuid())",
    "delete_finished": "select jobfeed.delete_finished('7 days')",
    "delete_finished_v2": "select * from jobfeed.delete_finished_v2('7 days', 10, now())",
    "delete_old_slots": "select jobfeed.delete_old_slots('7 days')",
    # internal helpers: nobody outside the queue's functions
    "public_status": "select jobfeed.public_status('queued', 0)",
    "raise_error": "select jobfeed.raise_error('JF422', 'x', 'x')",
    "notify_changed": "select jobfeed.notify_changed(array[gen_random_uuid()], array[1::bigint])",
    "progress_rank": "select jobfeed.progress_rank('{}')",
    "progress_behind": "select jobfeed.progress_behind('{}', '{}')",
    "state_counts": "select jobfeed.state_counts(false)",
    "stats_of": "select jobfeed.stats_of('{}', '{}', 15, now())",
    "submission_problem": "select jobfeed.submission_problem('t', '{}', 1)",
    "key_problem": "select jobfeed.key_problem('k')",
    "became_final": "select jobfeed.became_final('running', 'completed')",
    "keep_plans_before_18": "select jobfeed.keep_plans_before_18('jobfeed.public_status')",
    "clock": "select jobfeed.clock(now())",
    "may_set_clock": "select jobfeed.may_set_clock()",
    "uuid_v7": "select jobfeed.uuid_v7()",
    "id_seed": "select jobfeed.id_seed()",
    "uuid_v7_in_batch": "select jobfeed.uuid_v7_in_batch('0', 'x', 1)",
    "uuid_v7_batch": "select jobfeed.uuid_v7_batch(1)",
    "finish_attempts": "select jobfeed.finish_attempts('{}', '{}', 'x', null, null, now())",
    "end_expired_attempts": "select jobfeed.end_expired_attempts('{}', now())",
    "fail_expired": "select jobfeed.fail_expired(null, now())",
    "public_view": "select jobfeed.public_view(null::jobfeed.jobs)",
    "admin_view": "select jobfeed.admin_view(null::jobfeed.jobs)",
    "ended_attempts": "select * from jobfeed.ended_attempts(null::jobfeed.jobs)",
    "open_admin_session": "select jobfeed.open_admin_session('1 minute')",
    "admin_session_valid": "select jobfeed.admin_session_valid(gen_random_uuid())",
    "close_admin_session": "select jobfeed.close_admin_session(gen_random_uuid())",
    "lock_held": "select jobfeed.lock_held('{}', '{}')",
    "settle_waiting": "select jobfeed.settle_waiting(gen_random_uuid(), now())",
    "requeue": "select jobfeed.requeue(gen_random_uuid(), now())",
    "settle_dependents": "select jobfeed.settle_dependents()",
    "hold_dependencies": "select jobfeed.hold_dependencies('{}')",
    "mark_dependency": "select jobfeed.mark_dependency()",  # a trigger's: callable by nobody
    "spawn_children": "select jobfeed.spawn_children(gen_random_uuid(), '[]', now())",
    "fail_signal_timeouts": "select jobfeed.fail_signal_timeouts(now())",
    "notify_due": "select jobfeed.notify_due('k', 1)",
    "notify_changed_one": "select jobfeed.notify_changed_one(gen_random_uuid(), 1)",
    "notify_freed": "select jobfeed.notify_freed(array['k'])",
    "notify_pairs": "select jobfeed.notify_pairs('jobfeed_fenced', array[gen_random_uuid()], array[1::bigint])",
    "notify_fenced": "select jobfeed.notify_fenced(array[gen_random_uuid()], array[1])",
    "sample_depth_from": "select jobfeed.sample_depth_from('{}', now())",
    "claim_kinds": "select * from jobfeed.claim_kinds(array['nothing'], 1, 'w')",
    "claim_kind_v2": "select * from jobfeed.claim_kind_v2('nothing', 1, 'w', null, now(), false)",
    "notify_requesters": "select jobfeed.notify_requesters(array[gen_random_uuid()], array[1::bigint])",
    "check_requester_cap": "select jobfeed.check_requester_cap('x', 1, 1)",
    "reusable": "select jobfeed.reusable('k', 't', null, now())",
    "dedupe_scope": "select jobfeed.dedupe_scope('global', null)",
    "worker_lost": "select jobfeed.worker_lost(w, null) from jobfeed.workers w",
    "still_needed": "select jobfeed.still_needed(j) from jobfeed.jobs j",
    "batch_first_target_held": "select jobfeed.batch_first_target_held('k', array['t'])",
    "batch_problem": "select jobfeed.batch_problem(array['t'], null, 100, null)",
    "queue_positions": "select * from jobfeed.queue_positions(array[gen_random_uuid()], now())",
    "queue_positions_walk": "select * from jobfeed.queue_positions_walk(array[gen_random_uuid()], now())",
    "with_position": "select jobfeed.with_position('{}', gen_random_uuid())",
    "queue_position": "select jobfeed.queue_position(gen_random_uuid(), now())",
    "reclaimable": "select * from jobfeed.reclaimable('k', now())",
    "take_duplicate": "select jobfeed.take_duplicate(gen_random_uuid(), 'rerun', '{}', now())",
    "start_rerun": "select jobfeed.start_rerun(gen_random_uuid(), 1, 'completed', null, null, now())",
    "check_duplicate": "select jobfeed.check_duplicate('k', gen_random_uuid(), '{}')",
    "queue_webhooks": "select jobfeed.queue_webhooks()",  # a trigger's: callable by nobody
    "queue_deliveries": "select jobfeed.queue_deliveries(array[gen_random_uuid()])",
}

ALLOWED = {
    "jobfeed_api": {"register_kind", "list_kinds", "submit", "submit_many", "submit_many_views", "get_job", "get_jobs", "admin_get_job",
                    "admin_get_jobs", "admin_list_jobs", "stats", "stats_v2", "retry", "cancel", "list_workers", "charts", "set_traceparent",
                    "open_admin_session", "admin_session_valid", "close_admin_session",
                    "register_kind_v2", "submit_v2", "submit_v3", "submit_quick", "submit_many_v2", "submit_many_views_v2",
                    "set_kind_paused", "bulk_retry", "bulk_cancel", "list_schedules",
                    "submit_request", "submit_many_requests", "leave", "leave_later", "stay", "may_view", "positions",
                    "submit_waiting", "submit_waiting_v2", "signal", "signal_v2", "file_stage", "file_attach", "file_discard",
                    "file_put", "files_of", "file_read"},
    "jobfeed_worker": {"register_kind", "register_kind_v2", "list_kinds", "claim", "claim_v2", "claim_v3", "next_due",
                       "next_due_v2", "extend_many", "extend", "register_schedule", "drop_schedule", "enqueue_slot", "list_schedules",
                       "progress", "checkpoint", "complete_many", "complete", "fail_transient",
                       "fail_permanent", "release", "job_timings", "worker_beat", "worker_stopped",
                       "set_traceparent", "set_kind_request_policy", "set_kind_request_policy_v2", "submit_waiting",
                       "submit_waiting_v2", "signal", "signal_v2", "signals_of", "output_begin", "output_finish", "output_discard", "file_put",
                       "files_of", "file_read", "child_id", "complete_spawning", "wait_for", "children_of"},
    "jobfeed_sweeper": {"sweep_expired", "next_signal_deadline", "next_deadline", "leave_due", "delete_finished",
                        "delete_finished_v2", "delete_old_slots", "sample_depth"},
}

TABLES = ("jobs", "kinds", "attempts", "requests", "schema_migrations", "schema_functions", "admin_sessions",
          "stats_snapshot", "workers", "depth_samples", "job_deps", "job_signals", "job_files", "file_chunks")


def as_user(url: str, user: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit((parts.scheme, f"{user}@{host}", parts.path, parts.query, parts.fragment))


@pytest.fixture
async def login(dsn, pool):
    """login(role) -> a connection of a fresh LOGIN user that holds only that role."""
    users, conns = [], []

    async def make(role: str) -> asyncpg.Connection:
        user = f"sec_{uuid.uuid4().hex[:12]}"
        await pool.execute(f"create role {user} login in role {role}")
        users.append(user)
        conn = await asyncpg.connect(as_user(dsn, user))
        conns.append(conn)
        assert await conn.fetchval("select current_user") == user
        return conn

    await pool.execute("select jobfeed.register_kind('k')")
    yield make
    for c in conns:
        await c.close()
    for u in users:  # roles are cluster-wide: leave none behind
        await pool.execute(f"drop role {u}")


async def test_service_roles_exist_and_cannot_log_in(pool):
    rows = await pool.fetch("select rolname, rolcanlogin, rolsuper from pg_roles where rolname = any($1)",
                            list(ROLES))
    assert {r["rolname"]: (r["rolcanlogin"], r["rolsuper"]) for r in rows} == \
        {r: (False, False) for r in ROLES}


@pytest.mark.parametrize("role", ROLES)
async def test_each_role_calls_exactly_its_functions(login, role):
    conn = await login(role)
    for name, sql in CALLS.items():
        if name in ALLOWED[role]:
            try:
                await conn.execute(sql)
            except asyncpg.PostgresError as exc:
                # refused by the queue's rules, not by privileges
                assert exc.sqlstate.startswith("JF"), f"{role} could not call {name}: {exc}"
        else:
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(sql)
                pytest.fail(f"{role} was allowed to call {name}")


@pytest.mark.parametrize("role", ROLES)
async def test_no_role_touches_tables_directly(login, role):
    conn = await login(role)
    for table in TABLES:
        for sql in (f"select * from jobfeed.{table} limit 1",
                    f"delete from jobfeed.{table}",
                    f"update jobfeed.{table} set created_at = created_at" if table == "jobs"
                    else f"truncate jobfeed.{table}",
                    f"insert into jobfeed.{table} default values"):
            with pytest.raises(asyncpg.InsufficientPrivilegeError):
                await conn.execute(sql)
                pytest.fail(f"{role} ran: {sql}")
    with pytest.raises(asyncpg.InsufficientPrivilegeError):
        await conn.execute("create function jobfeed.x() returns int language sql as 'select 1'")


async def test_worker_and_api_round_trip_through_functions_only(login, pool):
    """The roles are enough to run a job end to end, with no table access."""
    api, worker = await login("jobfeed_api"), await login("jobfeed_worker")
    jid = (await api.fetchrow("select * from jobfeed.submit('k', 'roundtrip')"))["id"]
    [r] = await worker.fetch("select * from jobfeed.claim(array['k'], 1, 'w')")
    assert r["id"] == jid
    assert await worker.fetchval("select jobfeed.progress($1, $2, 1, 2)", jid, r["generation"]) is True
    assert await worker.fetchval("select jobfeed.complete($1, $2, '1')", jid, r["generation"]) is True
    assert '"completed"' in await api.fetchval("select jobfeed.get_job($1)::text", jid)
    sweeper = await login("jobfeed_sweeper")
    assert await sweeper.fetchval("select jobfeed.delete_finished('0', 10, now() + interval '1 second')") == 1


async def test_the_worker_role_writes_children_and_waits_through_functions_only(login, pool):
    worker = await login("jobfeed_worker")
    jid = (await worker.fetchrow("select * from jobfeed.submit_waiting('k', 'parent', '{}', '{}', '{}')"))["id"]
    [r] = await worker.fetch("select * from jobfeed.claim(array['k'], 1, 'w')")
    child = await worker.fetchval("select jobfeed.child_id($1, $2, 'k', 'child', '{}')", jid, r["generation"])
    planned = f'[{{"id": "{child}", "kind": "k", "target": "child", "payload": {{}}}}]'
    assert await worker.fetchval("select jobfeed.wait_for($1, $2, $3::jsonb, $4::uuid[])",
                                 jid, r["generation"], planned, [child]) is True
    [c] = await worker.fetch("select * from jobfeed.claim(array['k'], 1, 'w')")
    assert c["id"] == child
    assert await worker.fetchval("select jobfeed.complete($1, $2, '7')", child, c["generation"]) is True
    [again] = await worker.fetch("select * from jobfeed.claim(array['k'], 1, 'w')")
    assert again["id"] == jid
    assert '"result": 7' in await worker.fetchval("select children::text from jobfeed.children_of($1)", [jid])


async def test_service_roles_cannot_move_the_clock(login, pool):
    """p_now is for the schema's owner (tests, an operator at psql): a worker
    passing a future time must not reclaim a lease that has not expired, and the
    api cannot backdate a job."""
    api, worker = await login("jobfeed_api"), await login("jobfeed_worker")
    jid = (await api.fetchrow("select * from jobfeed.submit('k', 'clock', '{}', null, 65536, "
                              "now() - interval '3 days')"))["id"]
    assert await pool.fetchval("select created_at > now() - interval '1 minute' from jobfeed.jobs "
                               "where id = $1", jid)
    [first] = await worker.fetch("select * from jobfeed.claim(array['k'], 1, 'w1')")
    stolen = await worker.fetch("select * from jobfeed.claim(array['k'], 1, 'w2', null, "
                                "now() + interval '1 day')")
    assert stolen == []
    # the owner may plant time: the same call as the owner does reclaim
    [again] = await pool.fetch("select * from jobfeed.claim(array['k'], 1, 'w2', null, now() + interval '1 day')")
    assert again["id"] == first["id"] and again["generation"] == first["generation"] + 1


async def test_the_clock_is_inlined_where_a_function_asks_it(pool):
    """Most calls pass no time: the planner folds clock(null) into now() instead
    of calling a function per statement (the owner check stays in may_set_clock)."""
    plan = "\n".join(r[0] for r in await pool.fetch("explain (verbose, costs off) select jobfeed.clock($1)", None))
    assert "clock" not in plan and "now()" in plan


async def test_public_has_no_execute_on_any_function(pool):
    rows = await pool.fetch("""
        select p.oid::regprocedure::text as fn
          from pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
         where p.pronamespace = 'jobfeed'::regnamespace and a.grantee = 0""")
    assert [r["fn"] for r in rows] == []
    # The check above must see the functions at all.
    assert await pool.fetchval("select count(*) from pg_proc where pronamespace = 'jobfeed'::regnamespace") >= 30


async def test_callable_functions_are_security_definer_with_pinned_search_path(pool):
    rows = await pool.fetch("""
        select p.oid::regprocedure::text as fn, p.prosecdef, p.proconfig
          from pg_proc p
         where p.pronamespace = 'jobfeed'::regnamespace
           and exists (select from unnest($1::text[]) r where has_function_privilege(r, p.oid, 'execute'))""",
                            list(ROLES))
    assert len(rows) == len(set().union(*ALLOWED.values()))
    for r in rows:
        assert r["prosecdef"], f"{r['fn']} is not SECURITY DEFINER"
        paths = [c for c in (r["proconfig"] or []) if c.startswith("search_path=")]
        assert len(paths) == 1, f"{r['fn']} has no pinned search_path"
        # pg_temp named last, or it is searched first and can shadow our objects
        assert [s.strip() for s in paths[0].split("=", 1)[1].split(",")] == ["jobfeed", "pg_temp"], r["fn"]


async def test_function_privileges_match_the_matrix(pool):
    """The catalog agrees with ALLOWED for every role and function, including any
    function added later (it must then be named here)."""
    rows = await pool.fetch("""
        select p.proname, r as role, has_function_privilege(r, p.oid, 'execute') as can
          from pg_proc p, unnest($1::text[]) r
         where p.pronamespace = 'jobfeed'::regnamespace""", list(ROLES))
    names = {r["proname"] for r in rows}
    assert names == set(CALLS), "a function is missing from CALLS (or gone): decide who may call it"
    for r in rows:
        assert r["can"] == (r["proname"] in ALLOWED[r["role"]]), (r["role"], r["proname"])


async def test_files_round_trip_through_functions_only(login, pool):
    """Uploads (API), inputs and outputs (worker) and their deletion (sweeper) need no table access."""
    api, worker = await login("jobfeed_api"), await login("jobfeed_worker")
    async with api.transaction():
        fid = await api.fetchval("select jobfeed.file_stage('in.bin', 'application/x-test', 4)")
        assert await api.fetchval("select jobfeed.file_put($1, 0, 'abcd')", fid) is True
        jid = (await api.fetchrow("select * from jobfeed.submit('k', 'files')"))["id"]
        await api.execute("select jobfeed.file_attach($1, $2, $3)", jid, [fid], [4])
    [r] = await worker.fetch("select * from jobfeed.claim(array['k'], 1, 'w')")
    [f] = await worker.fetch("select * from jobfeed.files_of($1, 'in')", jid)
    assert await worker.fetchval("select jobfeed.file_read($1, 0)", f["id"]) == b"abcd"
    out = await worker.fetchval("select jobfeed.output_begin($1, $2, 'o', 'text/plain', 4)", jid, r["generation"])
    assert await worker.fetchval("select jobfeed.file_put($1, 0, 'xy')", out) is True
    assert await worker.fetchval("select jobfeed.output_finish($1, $2, $3, 2)", jid, r["generation"], out) is True
    [o] = await api.fetch("select * from jobfeed.files_of($1, 'out')", jid)
    assert await api.fetchval("select jobfeed.file_read($1, 0, 2, 1)", o["id"]) == b"y"
    assert await worker.fetchval("select jobfeed.complete($1, $2, '1')", jid, r["generation"]) is True
    sweeper = await login("jobfeed_sweeper")
    assert await sweeper.fetchval("select jobfeed.delete_finished('0', 10, now() + interval '1 second')") == 1
    assert await pool.fetchval("select count(*) from jobfeed.file_chunks") == 0


async def test_a_command_run_as_the_wrong_role_says_so_in_one_line(dsn, pool):
    user = f"sec_{uuid.uuid4().hex[:12]}"
    await pool.execute(f"create role {user} login in role jobfeed_sweeper")
    try:
        env = dict(os.environ, DATABASE_URL=as_user(dsn, user))
        done = await asyncio.to_thread(subprocess.run, JOBFEED + ["show", str(uuid.uuid4())], env=env,
                                       capture_output=True, text=True, timeout=60)
    finally:
        await pool.execute(f"drop role {user}")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "permission denied" in done.stderr and "may not do this" in done.stderr


SERVICE_ROLES = ("jobfeed_api", "jobfeed_worker", "jobfeed_sweeper")


async def test_the_rights_check_at_start_takes_a_member_of_the_role_or_the_owner(dsn, pool, login):
    for held in SERVICE_ROLES:
        conn = await login(held)
        for needed in SERVICE_ROLES:
            if needed == held:
                await migrate.require_schema(conn, needed)
            else:
                with pytest.raises(migrate.SchemaError, match=f"may not call .* functions {needed} may"):
                    await migrate.require_schema(conn, needed)
    for needed in SERVICE_ROLES:  # the test's own login: the owner of everything
        await migrate.require_schema(pool, needed)


@pytest.mark.parametrize("command, held", [(["api", "--port", "0"], "jobfeed_sweeper"),
                                           (["sweeper", "--sweep-interval", "1s"], "jobfeed_worker"),
                                           (["worker"], "jobfeed_api")])
async def test_a_service_started_under_another_role_stops_at_start_in_one_line(dsn, pool, command, held):
    """Before: the API as the sweeper's role started, said it was ready and
    answered 500 to every submission; the sweeper as the worker's role logged
    'permission denied' every round, for ever."""
    user = f"sec_{uuid.uuid4().hex[:12]}"
    await pool.execute(f"create role {user} login in role {held}")
    try:
        env = dict(os.environ, DATABASE_URL=as_user(dsn, user), JOBFEED_TASKS="jobfeed.demo")
        done = await asyncio.to_thread(subprocess.run, JOBFEED + command, env=env,
                                       capture_output=True, text=True, timeout=60)
    finally:
        await pool.execute(f"drop role {user}")
    needed = "jobfeed_" + command[0]
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert f"connect as a member of {needed}" in done.stderr and user in done.stderr
