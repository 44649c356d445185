"""Dependencies: a job submitted with `after` waits ('waiting') until every job
it names has completed, and fails with dependency_failed when one does not."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from jobfeed.api.app import create_app
from jobfeed.worker import db
from jobfeed.worker.queue import Queue, QueueError
from queue_sql import park_at, public
from interleave import one_inside_the_other
from servers import ADMIN_TOKEN, asgi_client, make_settings
from waiting import eventually


async def state(pool, job_id) -> str:
    return await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job_id)


async def run(queue, job_id, outcome="complete"):
    """Claim job_id (the only due job of its kind) and end it."""
    (claimed,) = await queue.claim(["k"], 1, "w")
    assert claimed.id == job_id
    if outcome == "complete":
        assert await queue.complete(claimed.id, claimed.generation, {"ok": 1})
    else:
        assert await queue.fail_permanent(claimed.id, claimed.generation, "broken", "it broke")


async def test_waits_until_every_dependency_completed(queue, pool, k):
    a, _ = await queue.submit("k", "a")
    b, _ = await queue.submit("k", "b")
    d, created = await queue.submit("k", "d", {"x": 1}, after=[a, str(b)])
    assert created
    assert await state(pool, d) == "waiting"
    assert (await public(pool, d))["status"] == "queued"
    await run(queue, a)  # claims a: d is not due, so never claimed
    assert await state(pool, d) == "waiting"
    await run(queue, b)
    assert await state(pool, d) == "queued"
    (claimed,) = await queue.claim(["k"], 1, "w")
    assert claimed.id == d and claimed.payload == {"x": 1}


@pytest.mark.parametrize("outcome", ["fail", "cancel"])
async def test_a_dependency_not_completing_fails_the_job_and_its_dependents(queue, pool, k, outcome):
    a, _ = await queue.submit("k", "a")
    b, _ = await queue.submit("k", "b")
    d, _ = await queue.submit("k", "d", after=[a, b])
    e, _ = await queue.submit("k", "e", after=[d])
    if outcome == "fail":
        await run(queue, a, "fail")
    else:
        await queue.cancel(a)
    for job_id in (d, e):
        view = await public(pool, job_id)
        assert view["status"] == "failed" and view["error"]["code"] == "dependency_failed", view
    assert str(a) in (await public(pool, d))["error"]["message"]
    assert str(d) in (await public(pool, e))["error"]["message"]
    assert await state(pool, b) == "queued"  # the other dependency is not touched


async def test_dependencies_already_final_settle_at_submit(queue, pool, k):
    a, _ = await queue.submit("k", "a")
    await run(queue, a)
    d, _ = await queue.submit("k", "d", after=[a])
    assert await state(pool, d) == "queued"
    f, _ = await queue.submit("k", "f")
    await run(queue, d)
    await run(queue, f, "fail")
    g, _ = await queue.submit("k", "g", after=[a, f])
    assert (await public(pool, g))["error"]["code"] == "dependency_failed"


async def test_unknown_dependency_is_refused_and_writes_nothing(queue, pool, k):
    a, _ = await queue.submit("k", "a")
    with pytest.raises(QueueError) as err:
        await queue.submit("k", "d", after=[a, uuid.uuid4()])
    assert (err.value.code, err.value.status) == ("unknown_dependency", 422)
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1
    assert await pool.fetchval("select count(*) from jobfeed.job_deps") == 0


async def test_a_waiting_job_holds_its_target_and_can_be_canceled(queue, pool, k):
    a, _ = await queue.submit("k", "a")
    d, _ = await queue.submit("k", "d", after=[a])
    again, created = await queue.submit("k", "d")
    assert (again, created) == (d, False)
    view = await queue.cancel(d)
    assert view["state"] == "canceled"
    await run(queue, a)
    assert await state(pool, d) == "canceled"


async def test_race_dependency_finishing_while_the_dependent_is_submitted(dsn, pool, k):
    """Completion and submission on two connections at once, many times: the
    dependent must never be left waiting on a completed job."""
    c1, c2 = await db.connect(dsn), await db.connect(dsn)
    try:
        q1, q2 = Queue(c1), Queue(c2)
        for i in range(40):
            a, _ = await q1.submit("k", f"a{i}")
            (claimed,) = await q1.claim(["k"], 1, "w")
            done, (d, _) = await asyncio.gather(q1.complete(claimed.id, claimed.generation, None),
                                                q2.submit("k", f"d{i}", after=[a]))
            assert done
            assert await state(pool, d) == "queued", i
            (claimed,) = await q1.claim(["k"], 1, "w")
            assert claimed.id == d
            await q1.complete(claimed.id, claimed.generation, None)
    finally:
        await c1.close()
        await c2.close()


SUBMIT_AFTER = "select id from jobfeed.submit_waiting('k', $1, '{}', $2::uuid[], '{}')"


@pytest.mark.parametrize("marked", [False, True], ids=["new", "waited-for-already"])
@pytest.mark.parametrize("first", ["completion", "submission"])
async def test_race_each_side_commits_while_the_other_is_under_way(dsn, pool, queue, k, first, marked):
    """The two interleavings made to happen: one side's transaction is open
    while the other runs. Without the submitter's lock on its dependencies,
    either leaves the job waiting on a completed one for ever. Also for a
    dependency another job waits for already (marked has_dependents)."""
    a, _ = await queue.submit("k", "a")
    if marked:
        await queue.submit("k", "other", after=[a])
    (claimed,) = await queue.claim(["k"], 1, "w")
    complete = ("select jobfeed.complete($1, $2, null)", a, claimed.generation)
    submit = (SUBMIT_AFTER, "d", [a])
    if first == "completion":
        done, _ = await one_inside_the_other(dsn, pool, complete, submit)
    else:
        _, done = await one_inside_the_other(dsn, pool, submit, complete)
    assert done
    d = await pool.fetchval("select id from jobfeed.jobs where target = 'd'")
    assert await state(pool, d) == "queued"


async def test_race_two_dependencies_finishing_at_once(dsn, pool, k):
    c1, c2 = await db.connect(dsn), await db.connect(dsn)
    try:
        q1, q2 = Queue(c1), Queue(c2)
        for i in range(40):
            a, _ = await q1.submit("k", f"a{i}")
            b, _ = await q1.submit("k", f"b{i}")
            d, _ = await q1.submit("k", f"d{i}", after=[a, b])
            ja, jb = await q1.claim(["k"], 2, "w")
            assert await asyncio.gather(q1.complete(ja.id, ja.generation, None),
                                        q2.complete(jb.id, jb.generation, None)) == [True, True]
            assert await state(pool, d) == "queued", i
            (claimed,) = await q1.claim(["k"], 1, "w")
            await q1.complete(claimed.id, claimed.generation, None)
    finally:
        await c1.close()
        await c2.close()


async def test_only_a_job_something_waits_for_calls_the_settling_trigger(pool, queue, k):
    """Running a job nobody waits for must not call settle_dependents (the
    drain's hot path); running one that is waited for calls it at each change
    of state (its claim, its completion: the function passes over all but the
    last), and settles the waiter."""
    plain, _ = await queue.submit("k", "plain")
    dep, _ = await queue.submit("k", "dep")
    waiter, _ = await queue.submit("k", "waiter", after=[dep])
    marks = dict(await pool.fetch("select id, has_dependents from jobfeed.jobs"))
    assert marks == {plain: False, dep: True, waiter: False}
    async with pool.acquire() as conn:
        calls = "select coalesce(pg_stat_get_xact_function_calls($1::regproc), 0)"
        async with conn.transaction():
            await conn.execute("set local track_functions = 'pl'")
            await run(Queue(conn), plain)
            assert await conn.fetchval(calls, "jobfeed.settle_dependents") == 0
            await run(Queue(conn), dep)
            assert await conn.fetchval(calls, "jobfeed.settle_dependents") == 2
            assert await conn.fetchval(calls, "jobfeed.settle_waiting") == 1  # at the completion only
    assert await state(pool, waiter) == "queued"


async def test_race_many_submitters_naming_the_same_new_dependencies(dsn, pool, queue, k):
    """Twelve submitters at once, each naming the same three jobs nobody waited
    for yet, in its own order: each marks and holds them in id order, so none
    deadlocks, and every one of them is settled when the three complete."""
    deps = [(await queue.submit("k", f"dep{i}"))[0] for i in range(3)]
    conns = [await db.connect(dsn) for _ in range(12)]
    try:
        orders = [deps[i % 3:] + deps[:i % 3] for i in range(12)]
        waiters = await asyncio.gather(*(c.fetchval(SUBMIT_AFTER, f"w{i}", orders[i][::1 - 2 * (i % 2)])
                                         for i, c in enumerate(conns)))
    finally:
        for c in conns:
            await c.close()
    assert {await state(pool, w) for w in waiters} == {"waiting"}
    for _ in deps:
        (claimed,) = await queue.claim(["k"], 1, "w")
        assert claimed.id in deps
        assert await queue.complete(claimed.id, claimed.generation, None)
    assert {await state(pool, w) for w in waiters} == {"queued"}


async def test_race_two_submitters_inside_their_submissions_name_the_same_new_job(dsn, pool, queue, k):
    """Forced: two submitters are inside their submissions at once, naming a
    job nobody waited for yet. A trigger parks each right before it writes its
    job_deps row, on an advisory lock the test holds. Had both only share-locked
    the job, marking it from job_deps' trigger would deadlock them; the first
    marks it under its own lock, so the second waits for the first instead."""
    dep, _ = await queue.submit("k", "dep")
    await park_at(pool, "park before insert on jobfeed.job_deps for each row", 4243)
    gate = await db.connect(dsn)
    submitters = [await db.connect(dsn) for _ in range(2)]
    try:
        await gate.execute("select pg_advisory_lock(4243)")
        for conn in submitters:
            await conn.execute("set test.park = 'on'")
        runs = [asyncio.create_task(c.fetchval(SUBMIT_AFTER, f"w{i}", [dep])) for i, c in enumerate(submitters)]
        pids = [c.get_server_pid() for c in submitters]

        async def both_waiting():
            return await pool.fetchval("select count(*) = 2 from pg_stat_activity "
                                       "where pid = any($1) and wait_event_type = 'Lock'", pids)
        await eventually(both_waiting, what="both submitters waiting (at the park or for the first's mark)")
        await gate.execute("select pg_advisory_unlock(4243)")
        waiters = await asyncio.wait_for(asyncio.gather(*runs), 15)
    finally:
        for conn in (*submitters, gate):
            await conn.close()
    assert [await state(pool, w) for w in waiters] == ["waiting", "waiting"]
    await run(queue, dep)
    assert [await state(pool, w) for w in waiters] == ["queued", "queued"]


async def test_http_after(dsn, queue, pool, k):
    a, _ = await queue.submit("k", "a")
    async with asgi_client(create_app(make_settings(dsn))) as client:
        ok = await client.post("/api/jobs", json={"kind": "k", "target": "d", "after": [str(a)]})
        assert ok.status_code == 201 and ok.json()["status"] == "queued"
        assert await state(pool, uuid.UUID(ok.json()["id"])) == "waiting"
        for bad, code in (({"after": "x"}, "invalid_request"), ({"after": [1]}, "unknown_dependency"),
                          ({"after": ["nope"]}, "unknown_dependency"),
                          ({"after": [str(uuid.uuid4())]}, "unknown_dependency")):
            r = await client.post("/api/jobs", json={"kind": "k", "target": "e", **bad})
            assert (r.status_code, r.json()["error"]["code"]) == (422, code), r.text
        admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        listed = await client.get("/api/admin/jobs?state=waiting", headers=admin)
        assert [j["id"] for j in listed.json()["jobs"]] == [ok.json()["id"]]
        assert listed.json()["jobs"][0]["state"] == "waiting"
        stats = await client.get("/api/admin/stats?max_age=0", headers=admin)
        assert stats.json()["counts"]["k"]["waiting"] == 1, stats.text
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 2


async def test_the_sweeper_keeps_a_dependency_an_unfinished_job_names(queue, pool, k):
    a, _ = await queue.submit("k", "a")
    b, _ = await queue.submit("k", "b")
    d, _ = await queue.submit("k", "d", after=[a, b])
    await run(queue, a)
    await pool.execute("update jobfeed.jobs set finished_at = now() - interval '30 days' where id = $1", a)
    assert await queue.delete_finished(7 * 86400) == 0
    await run(queue, b)
    await run(queue, d)
    await pool.execute("update jobfeed.jobs set finished_at = now() - interval '30 days'")
    assert await queue.delete_finished(7 * 86400) == 3
    assert await pool.fetchval("select count(*) from jobfeed.job_deps") == 0


async def test_cli_after(dsn, pool):
    from test_cli import jobfeed

    first = jobfeed(dsn, "submit", "demo", "a")
    assert first.returncode == 0, first.stderr
    a = first.stdout.strip()
    second = jobfeed(dsn, "submit", "demo", "d", "--after", a, "--json")
    assert second.returncode == 0, second.stderr
    assert await state(pool, uuid.UUID(json.loads(second.stdout)["id"])) == "waiting"
    bad = jobfeed(dsn, "submit", "demo", "e", "--after", str(uuid.uuid4()))
    assert bad.returncode != 0 and "unknown_dependency" in bad.stderr
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 2


@pytest.mark.parametrize("how", ["one", "bulk"])
async def test_a_retried_job_waits_again_for_what_it_waited_for(queue, pool, k, how):
    """An admin retry of a job canceled while waiting ran it at once: before its
    dependency completed, and without its signal."""
    async def retry(job_id):
        if how == "one":
            await queue.retry(job_id)
        else:
            assert await queue.bulk("retry", ids=[job_id]) == 1

    a, _ = await queue.submit("k", "a")
    d, _ = await queue.submit("k", "d", after=[a])
    s, _ = await queue.submit("k", "s", await_signals=["go"])
    for job_id in (d, s):
        await queue.cancel(job_id)
        await retry(job_id)
        assert await state(pool, job_id) == "waiting"
    assert (await queue.get_job(d))["status"] == "queued"  # publicly as before
    await run(queue, a)
    assert await state(pool, d) == "queued"
    await run(queue, d)
    await queue.signal(s, "go", {"n": 1})
    assert await state(pool, s) == "queued"
    await run(queue, s)

    # with nothing left to wait for, or when the wait is what failed it, it runs at once
    b, _ = await queue.submit("k", "b")
    f, _ = await queue.submit("k", "f", after=[b])
    await queue.cancel(f)
    await run(queue, b)
    await retry(f)
    assert await state(pool, f) == "queued"
    c, _ = await queue.submit("k", "c")
    e, _ = await queue.submit("k", "e", after=[c])
    await queue.cancel(c)
    assert (await queue.admin_get_job(e))["last_error"]["code"] == "dependency_failed"
    await retry(e)
    assert await state(pool, e) == "queued"


@pytest.mark.parametrize("first", ["completion", "retry"])
async def test_race_dependency_finishing_while_the_dependent_is_retried(dsn, pool, queue, k, first):
    """An admin retry of a job canceled while waiting, and its dependency's
    completion, each while the other's transaction is open: without the
    retry's lock on the dependency, the completion settles nothing (the job is
    canceled), the retry sees the dependency unfinished, and the job waits on
    a completed one for ever. Neither side deadlocks: both lock the dependency
    before the dependent."""
    a, _ = await queue.submit("k", "a")
    d, _ = await queue.submit("k", "d", after=[a])
    await queue.cancel(d)
    (claimed,) = await queue.claim(["k"], 1, "w")
    complete = ("select jobfeed.complete($1, $2, null)", a, claimed.generation)
    retry = ("select jobfeed.retry($1)", d)
    if first == "completion":
        done, _ = await one_inside_the_other(dsn, pool, complete, retry)
    else:
        _, done = await one_inside_the_other(dsn, pool, retry, complete)
    assert done
    assert await state(pool, d) == "queued"


# Where the sweep is parked while the dependent is submitted: at its first
# delete (a trigger), or while it picks its batch, at the first job it looks
# at (jobfeed.still_needed wrapped: its real body is called, after the park).
PARK_AT_DELETE = "park_sweep before delete on jobfeed.jobs for each row"  # park_at's trigger
UNPARK_AT_DELETE = "drop trigger park_sweep on jobfeed.jobs; drop function public.park_{lock}()"
PARK_IN_PICK = """
    alter function jobfeed.still_needed(jobfeed.jobs) rename to still_needed_real;
    -- stable, as the real one: its look uses the calling statement's snapshot
    create function jobfeed.still_needed(j jobfeed.jobs) returns boolean language plpgsql stable as $$
    begin
        if current_setting('test.park', true) = 'on' and j.target = 'first' then
            perform set_config('test.park', 'done', false);
            perform pg_advisory_lock({lock});
            perform pg_advisory_unlock({lock});
        end if;
        return jobfeed.still_needed_real(j);
    end $$"""
UNPARK_IN_PICK = ("drop function jobfeed.still_needed(jobfeed.jobs); "
                  "alter function jobfeed.still_needed_real(jobfeed.jobs) rename to still_needed")


@pytest.mark.parametrize("park, unpark", [(PARK_AT_DELETE, UNPARK_AT_DELETE), (PARK_IN_PICK, UNPARK_IN_PICK)],
                         ids=["at-its-first-delete", "while-it-picks"])
async def test_a_dependent_committed_while_a_sweep_runs_keeps_its_dependency(dsn, pool, queue, k, park, unpark):
    """The sweep's one statement looked for a finished job's dependents with its
    snapshot, then locked the job: a dependent committed in between (its
    submitter's FOR SHARE lock already gone) went unseen, and the job it named
    was deleted under it (a black-box pass found 20 of 288 so). The sweep is
    parked while the dependent is submitted: the job is either kept for it or,
    locked by the sweep first, refused to it (unknown_dependency)."""
    from interleave import blocked_or_done

    first, _ = await queue.submit("k", "first")
    named, _ = await queue.submit("k", "named")
    await run(queue, first)
    await run(queue, named)
    await pool.execute("update jobfeed.jobs set finished_at = now() - interval '30 days' "
                       "- case when id = $1 then interval '1 hour' else interval '0' end", first)
    lock = 7311
    if park == PARK_AT_DELETE:
        await park_at(pool, park, lock)
    else:
        await pool.execute(park.format(lock=lock))
    holder, sweeper, submitter = await db.connect(dsn), await db.connect(dsn), await db.connect(dsn)
    try:
        await holder.execute("select pg_advisory_lock($1)", lock)
        await sweeper.execute("set test.park = 'on'")
        sweep = asyncio.create_task(sweeper.fetchrow("select * from jobfeed.delete_finished_v2('7 days', 10)"))
        await blocked_or_done(pool, sweeper.get_server_pid(), sweep)
        assert not sweep.done()  # parked
        submit = asyncio.create_task(Queue(submitter).submit("k", "dependent", after=[named]))
        await blocked_or_done(pool, submitter.get_server_pid(), submit)
        await holder.execute("select pg_advisory_unlock($1)", lock)
        swept = await asyncio.wait_for(sweep, 10)
        try:
            dependent = (await asyncio.wait_for(submit, 10)).id
        except QueueError as exc:
            assert exc.code == "unknown_dependency"
            dependent = None
        kept = await pool.fetchval("select count(*) from jobfeed.jobs where id = $1", named)
        assert (dependent is not None) == (kept == 1), (swept, dependent, kept)
        if dependent is not None:
            assert await state(pool, dependent) == "queued"
    finally:
        await pool.execute(unpark.format(lock=lock))
        for conn in (holder, sweeper, submitter):
            await conn.close()
