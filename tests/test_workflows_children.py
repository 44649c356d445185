"""Children: a handler's ctx.submit writes its children only with its fenced
outcome (complete_spawning, wait_for), with ids stable across attempts; a
parent returning ctx.wait_for waits ('waiting') until every job it named is
final, shows the share done as its progress, and runs again with them in
job.children."""

from __future__ import annotations

import asyncio
import re
import time
import uuid

import pytest

from jobfeed.worker import db
from jobfeed.worker.queue import Queue, QueueError
from jobfeed.worker.tasks import Context, LeaseLost, Permanent, Registry, TaskSpec, Transient
from conftest import JOBFEED, worker_env
from interleave import one_inside_the_other
from queue_sql import ATTEMPTS, public
from servers import ROOT, Process
from waiting import eventually, wait_state


async def state(pool, job_id) -> str | None:
    return await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job_id)


async def claim(queue, job_id):
    """Claim job_id, made due now if it waits for a backoff."""
    await queue.pool.execute("update jobfeed.jobs set run_after = now() where id = $1 and state = 'queued'", job_id)
    (claimed,) = await queue.claim(["k"], 1, "w")
    assert claimed.id == job_id
    return claimed


def child(child_id, target, payload=None):
    return {"id": str(child_id), "kind": "k", "target": target, "payload": payload or {}}


async def children_of(pool, parent) -> list:
    return await pool.fetch("select id, target, parent_id from jobfeed.jobs where parent_id = $1 order by target",
                            parent)


async def test_children_appear_only_with_the_outcome_and_a_retry_names_the_same(queue, pool, k):
    p, _ = await queue.submit("k", "parent")
    first = await claim(queue, p)
    a = await queue.child_id(p, first.generation, "k", "a", {"n": 1})
    b = await queue.child_id(p, first.generation, "k", "b", None)
    assert a != b and await state(pool, a) is None  # known, not written
    assert await queue.fail_transient(p, first.generation, "flaky", "again")
    assert await children_of(pool, p) == []  # a failed attempt writes none
    second = await claim(queue, p)
    assert [await queue.child_id(p, second.generation, "k", t, None) for t in ("a", "b")] == [a, b]
    assert await queue.complete_spawning(p, second.generation, {"ok": 1},
                                         [child(a, "a", {"n": 1}), child(b, "b")])
    rows = await children_of(pool, p)
    assert [(r["id"], r["target"], r["parent_id"]) for r in rows] == [(a, "a", p), (b, "b", p)]
    assert (await public(pool, a))["status"] == "queued"  # ordinary jobs, in the public API
    assert (await queue.admin_get_job(a))["parent_id"] == str(p)
    # the admin's view of the parent lists them, by id, with their states
    parent_view = await queue.admin_get_job(p)
    assert parent_view["children"] == [{"id": str(c), "kind": "k", "target": t, "state": "queued"}
                                       for c, t in sorted([(a, "a"), (b, "b")])]
    assert parent_view["children_count"] == 2
    assert (await queue.admin_get_job(a))["children"] == [] and (await queue.admin_get_job(a))["children_count"] == 0
    assert await pool.fetchval("select payload from jobfeed.jobs where id = $1", a) == '{"n": 1}'
    assert (await public(pool, p))["status"] == "completed"
    # ids are time-ordered like every job's (uuid v7 layout) and not guessable from the parent
    assert a.version == 7 and str(a)[:14] == str(b)[:14]


async def test_a_stale_attempts_children_never_appear(queue, pool, k):
    p, _ = await queue.submit("k", "parent")
    stale = await claim(queue, p)
    a = await queue.child_id(p, stale.generation, "k", "a", None)
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 second' where id = $1", p)
    (fresh,) = await queue.claim(["k"], 1, "w2")
    assert fresh.generation == stale.generation + 1
    assert await queue.child_id(p, stale.generation, "k", "a", None) is None  # the lease is lost
    assert not await queue.complete_spawning(p, stale.generation, None, [child(a, "a")])
    assert not await queue.wait_for(p, stale.generation, [child(a, "a")], [a])
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1
    assert await pool.fetchval("select count(*) from jobfeed.job_deps") == 0
    assert await state(pool, p) == "running"


async def test_a_child_whose_target_is_held_joins_the_holder(queue, pool, k):
    holder, _ = await queue.submit("k", "shared")
    p, _ = await queue.submit("k", "parent")
    (got,) = [c for c in await queue.claim(["k"], 2, "w") if c.id == p]
    assert await queue.child_id(p, got.generation, "k", "shared", None) == holder
    with pytest.raises(QueueError) as err:  # a job is never its own child
        await queue.child_id(p, got.generation, "k", "parent", None)
    assert "own child" in err.value.message
    # taken between ctx.submit and the outcome: the child joins the job that took it
    planned = await queue.child_id(p, got.generation, "k", "late", None)
    late, _ = await queue.submit("k", "late")
    assert planned != late
    assert await queue.wait_for(p, got.generation, [child(holder, "shared"), child(planned, "late")],
                                [holder, planned])
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 3  # no child of its own
    assert await pool.fetchval("select parent_id from jobfeed.jobs where id = $1", holder) is None
    deps = await pool.fetch("select dep_id from jobfeed.job_deps where job_id = $1 order by wait_pos", p)
    assert [d["dep_id"] for d in deps] == [holder, late]


async def test_wait_for_waits_shows_the_share_done_and_runs_again_with_the_children(queue, pool, k):
    other, _ = await queue.submit("k", "other")  # any job may be waited for, not only children
    p, _ = await queue.submit("k", "parent")
    (got,) = [c for c in await queue.claim(["k"], 2, "w") if c.id == p]
    a = await queue.child_id(p, got.generation, "k", "a", None)
    b = await queue.child_id(p, got.generation, "k", "b", None)
    assert await queue.wait_for(p, got.generation, [child(a, "a"), child(b, "b")], [a, other, b])
    row = await pool.fetchrow("select state::text, attempts, lease_until from jobfeed.jobs where id = $1", p)
    assert tuple(row) == ("waiting", 0, None)  # the lease released, the attempt not counted
    view = await public(pool, p)
    assert view["status"] == "processing" and view["progress"] == {"done": 0, "total": 3, "message": None}
    assert [a["outcome"] for a in (await queue.admin_get_job(p))["attempts_log"]] == ["waiting"]
    versions = [view["version"]]

    ja, jb = sorted(await queue.claim(["k"], 2, "w"), key=lambda j: j.target)
    assert {ja.target, jb.target} == {"a", "b"}  # p is not due
    assert await queue.complete(ja.id, ja.generation, {"part": "a"})
    view = await public(pool, p)
    assert view["progress"]["done"] == 1 and view["version"] > versions[-1]
    versions.append(view["version"])
    assert await queue.fail_permanent(jb.id, jb.generation, "bad_part", "part b is broken")
    assert (await public(pool, p))["progress"]["done"] == 2 and await state(pool, p) == "waiting"
    await queue.cancel(other)  # final too: the wait is over, whatever the outcome
    view = await public(pool, p)
    assert await state(pool, p) == "queued" and view["status"] == "processing"
    assert view["progress"] == {"done": 3, "total": 3, "message": None}

    again = await claim(queue, p)
    assert again.attempt == 1 and again.generation == got.generation + 1
    assert [(c["id"], c["status"], c["result"], c["error"]) for c in again.children] == [
        (str(a), "completed", {"part": "a"}, None),
        (str(other), "canceled", None, None),
        (str(b), "failed", None, {"code": "bad_part", "message": "part b is broken"})]
    assert again.children[0]["kind"] == "k" and again.children[0]["target"] == "a"
    assert await queue.complete(p, again.generation, {"merged": 2})


async def test_progress_of_a_waiting_parent_never_goes_backwards(queue, pool, k):
    p, _ = await queue.submit("k", "parent")
    got = await claim(queue, p)
    assert await queue.progress(p, got.generation, 3, 4, "split")
    a = await queue.child_id(p, got.generation, "k", "a", None)
    b = await queue.child_id(p, got.generation, "k", "b", None)
    assert await queue.wait_for(p, got.generation, [child(a, "a"), child(b, "b")], [a, b])
    assert (await public(pool, p))["progress"]["message"] == "split"  # 0/2 ranks below 3/4
    for job in await queue.claim(["k"], 2, "w"):
        assert await queue.complete(job.id, job.generation, None)
    assert (await public(pool, p))["progress"] == {"done": 2, "total": 2, "message": None}


async def test_a_job_named_twice_in_wait_for_is_one_child_in_its_first_place(queue, pool, k):
    p, _ = await queue.submit("k", "parent")
    got = await claim(queue, p)
    a = await queue.child_id(p, got.generation, "k", "a", None)
    b = await queue.child_id(p, got.generation, "k", "b", None)
    assert await queue.wait_for(p, got.generation, [child(a, "a"), child(b, "b")], [b, a, b])
    assert (await public(pool, p))["progress"] == {"done": 0, "total": 2, "message": None}
    for job in await queue.claim(["k"], 2, "w"):
        assert await queue.complete(job.id, job.generation, job.target)
    again = await claim(queue, p)
    assert [(c["id"], c["result"]) for c in again.children] == [(str(b), "b"), (str(a), "a")]


async def test_wait_for_nothing_or_jobs_already_final_is_due_at_once(queue, pool, k):
    done, _ = await queue.submit("k", "done")
    got = await claim(queue, done)
    await queue.complete(done, got.generation, 1)
    p, _ = await queue.submit("k", "parent")
    got = await claim(queue, p)
    assert await queue.wait_for(p, got.generation, [], [done])
    assert await state(pool, p) == "queued"
    again = await claim(queue, p)
    assert [c["status"] for c in again.children] == ["completed"]
    assert await queue.wait_for(p, again.generation, [], [])
    assert await state(pool, p) == "queued"
    assert (await claim(queue, p)).children is None  # the second wait replaced the first's rows
    assert await pool.fetchval("select count(*) from jobfeed.job_deps where job_id = $1", p) == 0


async def test_wait_for_an_unknown_job_fails_the_parent_and_writes_no_child(queue, pool, k):
    p, _ = await queue.submit("k", "parent")
    got = await claim(queue, p)
    a = await queue.child_id(p, got.generation, "k", "a", None)
    assert await queue.wait_for(p, got.generation, [child(a, "a")], [a, uuid.uuid4()])
    view = await public(pool, p)
    assert view["status"] == "failed" and view["error"]["code"] == "unknown_dependency"
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1
    me, _ = await queue.submit("k", "itself")
    got = await claim(queue, me)
    assert await queue.wait_for(me, got.generation, [], [me])
    assert (await public(pool, me))["error"] == {"code": "invalid_wait", "message": "a job cannot wait for itself"}
    q, _ = await queue.submit("k", "too-many")
    got = await claim(queue, q)
    assert await queue.wait_for(q, got.generation, [], [p] * 1001)
    assert (await public(pool, q))["error"]["code"] == "invalid_wait"
    with pytest.raises(Permanent):
        Context(queue, got, 1.0).wait_for(["not-an-id"])


@pytest.mark.parametrize("marked", [False, True], ids=["new", "waited-for-already"])
@pytest.mark.parametrize("first", ["child", "parent"])
async def test_race_the_last_child_finishing_while_the_parent_waits(dsn, pool, queue, k, first, marked):
    """Both interleavings forced: one side's transaction is open while the
    other runs. Either way the parent must end up due, never stranded. Also
    for a child another job waits for already (marked has_dependents: only
    the parent's own hold keeps it from ending unseen)."""
    c_job, _ = await queue.submit("k", "c")
    if marked:
        await queue.submit("k", "other", after=[c_job])
    p, _ = await queue.submit("k", "parent")
    jobs = {j.id: j for j in await queue.claim(["k"], 2, "w")}
    complete = ("select jobfeed.complete($1, $2, null)", c_job, jobs[c_job].generation)
    wait = ("select jobfeed.wait_for($1, $2, '[]', $3::uuid[])", p, jobs[p].generation, [c_job])
    both = await one_inside_the_other(dsn, pool, *((complete, wait) if first == "child" else (wait, complete)))
    assert all(both)
    assert await state(pool, p) == "queued"


async def test_race_children_finishing_while_the_parent_waits_many_times(dsn, pool, k):
    c1, c2, c3 = await db.connect(dsn), await db.connect(dsn), await db.connect(dsn)
    try:
        q1, q2, q3 = Queue(c1), Queue(c2), Queue(c3)
        for i in range(30):
            p, _ = await q1.submit("k", f"p{i}")
            got = await claim(q1, p)
            a = await q1.child_id(p, got.generation, "k", f"a{i}", None)
            b = await q1.child_id(p, got.generation, "k", f"b{i}", None)
            assert await q1.complete_spawning(p, got.generation, None, [child(a, f"a{i}"), child(b, f"b{i}")])
            q, r = await q1.claim(["k"], 2, "w")
            p2, _ = await q1.submit("k", f"p2{i}")
            got = await claim(q1, p2)
            assert await asyncio.gather(q1.wait_for(p2, got.generation, [], [a, b]),
                                        q2.complete(q.id, q.generation, None),
                                        q3.complete(r.id, r.generation, None)) == [True, True, True]
            assert await state(pool, p2) == "queued", i
            await q1.complete(p2, (await claim(q1, p2)).generation, None)
    finally:
        for c in (c1, c2, c3):
            await c.close()


async def test_the_sweeper_keeps_children_of_an_unfinished_parent_and_jobs_waited_for(queue, pool, k):
    holder, _ = await queue.submit("k", "shared")
    p, _ = await queue.submit("k", "parent")
    jobs = {j.id: j for j in await queue.claim(["k"], 2, "w")}
    gen = jobs[p].generation
    a = await queue.child_id(p, gen, "k", "a", None)
    fire = await queue.child_id(p, gen, "k", "fire-and-forget", None)
    # waits for a and for holder (not its child); fire is its child, not waited for
    assert await queue.wait_for(p, gen, [child(a, "a"), child(fire, "fire-and-forget")], [a, holder])
    claimed = {j.target: j for j in await queue.claim(["k"], 2, "w")}
    assert await queue.complete(claimed["a"].id, claimed["a"].generation, None)
    old = "update jobfeed.jobs set finished_at = now() - interval '30 days' where finished_at is not null"
    await pool.execute(old)
    assert await queue.delete_finished(7 * 86400) == 0  # the parent still waits (for holder)
    assert await queue.complete(holder, jobs[holder].generation, None)
    again = await claim(queue, p)
    await pool.execute(old)
    assert await queue.delete_finished(7 * 86400) == 0  # the parent runs: what it names stays
    assert await queue.complete(p, again.generation, None)
    await pool.execute(old)
    # all finished but the fire-and-forget child, which still names its parent
    assert await queue.delete_finished(7 * 86400) == 2 and await state(pool, p) == "completed"
    fire_job = claimed["fire-and-forget"]
    assert await queue.complete(fire_job.id, fire_job.generation, None)
    await pool.execute(old)
    assert await queue.delete_finished(7 * 86400) == 2  # the parent and its child


async def test_the_sweeper_keeps_a_finished_child_nobody_waits_for_while_its_parent_is_unfinished(queue, pool, k):
    """A fire-and-forget child still names its parent: finished and past the
    retention, it stays while the parent is unfinished (the waited-for child
    stays by its dependency, this one by its parent alone)."""
    p, _ = await queue.submit("k", "parent")
    (job,) = await queue.claim(["k"], 1, "w")
    a = await queue.child_id(p, job.generation, "k", "a", None)
    fire = await queue.child_id(p, job.generation, "k", "fire-and-forget", None)
    assert await queue.wait_for(p, job.generation, [child(a, "a"), child(fire, "fire-and-forget")], [a])
    children = await queue.claim(["k"], 2, "w")
    assert {c.id for c in children} == {a, fire}
    for c in children:
        assert await queue.complete(c.id, c.generation, None)
    await pool.execute("update jobfeed.jobs set finished_at = now() - interval '30 days' where finished_at is not null")
    assert await state(pool, p) == "queued"  # due again, a done
    assert await queue.delete_finished(7 * 86400) == 0
    assert await state(pool, fire) == "completed"


# ---------------------------------------------------------------- in the runner

def spec(kind: str, handler, **kw) -> TaskSpec:
    return TaskSpec(kind, handler, max_attempts=3, lease=5.0, backoff=(0.05,), jitter=0.0, **kw)


async def part(job, ctx: Context):
    return {"part": job.payload["i"] * 10}


async def test_fan_out_fan_in_with_a_retried_parent(queue, pool, run):
    """A video-like job: split into parts (children), wait, merge. Its first
    attempt submits the parts and then fails: no part exists until the second
    attempt's wait_for, and exactly one set ever does."""
    seen: list = []

    async def video(job, ctx: Context):
        seen.append(job.children)
        if job.children is not None:
            return {"merged": [c["result"]["part"] for c in job.children]}
        ids = [await ctx.submit("part", f"{job.target}/{i}", {"i": i}) for i in range(4)]
        if job.attempt == 1:
            raise Transient("flaky", "split failed half way")
        return ctx.wait_for(ids)

    await run(spec("video", video), spec("part", part))
    p = (await queue.submit("video", "v1")).id
    await wait_state(pool, p, "completed")
    view = await public(pool, p)
    assert view["result"] == {"merged": [0, 10, 20, 30]}
    assert view["progress"] == {"done": 4, "total": 4, "message": None}
    assert seen[:2] == [None, None] and len(seen) == 3
    assert await pool.fetchval("select count(*) from jobfeed.jobs where parent_id = $1", p) == 4
    assert await pool.fetchval("select count(*) from jobfeed.jobs where kind = 'part'") == 4
    log = [(a["outcome"], (a["error"] or {}).get("code")) for a in (await queue.admin_get_job(p))["attempts_log"]]
    assert log == [("transient", "flaky"), ("waiting", None), ("completed", None)]
    # the children's writes came with the wait_for, after the failed attempt had ended
    first_end = await pool.fetchval(f"select finished_at from {ATTEMPTS} a where job_id = $1 and generation = 1", p)
    assert await pool.fetchval("select min(created_at) from jobfeed.jobs where parent_id = $1", p) > first_end


async def test_a_fan_out_of_nothing_runs_again_at_once_with_no_children(queue, pool, run):
    """Before: wait_for([]) left the job due with no children to show, so its
    pattern (`if job.children is None: ... return ctx.wait_for(parts)`)
    waited again and again, an attempt log entry each, without end."""
    seen: list = []

    async def video(job, ctx: Context):
        seen.append(job.children)
        if job.children is None:
            parts = [await ctx.submit("part", f"{job.target}/{i}", {"i": i}) for i in range(job.payload["n"])]
            return ctx.wait_for(parts)
        return {"merged": [c["result"]["part"] for c in job.children]}

    async def stubborn(job, ctx: Context):
        return ctx.wait_for([])

    await run(spec("video", video), spec("part", part), spec("stubborn", stubborn))
    empty = (await queue.submit("video", "empty", {"n": 0})).id
    await wait_state(pool, empty, "completed")
    assert seen == [None, []] and (await public(pool, empty))["result"] == {"merged": []}
    log = [a["outcome"] for a in (await queue.admin_get_job(empty))["attempts_log"]]
    assert log == ["completed"]  # one attempt, two runs of the handler
    loop = (await queue.submit("stubborn", "x")).id
    await wait_state(pool, loop, "failed")
    assert (await public(pool, loop))["error"]["code"] == "invalid_wait"


async def test_children_of_a_completion_and_a_lost_lease(queue, pool, run):
    async def fire_and_forget(job, ctx: Context):
        await ctx.submit("part", f"{job.target}/only", {"i": 1})
        if job.target == "lost":
            await queue.cancel(job.id)
            await ctx.progress(1, 2)  # LeaseLost: nothing of this attempt is written
        return {"done": True}

    await run(spec("fire", fire_and_forget), spec("part", part))
    done = (await queue.submit("fire", "kept")).id
    lost = (await queue.submit("fire", "lost")).id
    await wait_state(pool, done, "completed")
    await wait_state(pool, lost, "canceled")
    (c,) = await pool.fetch("select id, state::text from jobfeed.jobs where parent_id = $1", done)
    await wait_state(pool, c["id"], "completed")
    assert await pool.fetchval("select count(*) from jobfeed.jobs where target = 'lost/only'") == 0


def test_timeout_is_parsed_and_checked():
    registry = Registry()
    registry.task("slow", timeout="10m")(part)
    registry.task("quick", timeout=0.5)(part)
    assert registry.get("slow").timeout == 600 and registry.get("quick").timeout == 0.5
    for bad in ("soon", 0, -1):
        with pytest.raises(ValueError, match="timeout"):
            registry.task("bad", timeout=bad)(part)


@pytest.mark.parametrize("on_cancel", ["stops", "returns", "raises", "exits", "blocks", "blocks-raises"])
async def test_a_run_past_its_timeout_is_a_transient_failure(queue, pool, run, on_cancel, caplog):
    """Also when the handler catches its cancellation and returns, or raises an
    error of its own: what it does past its timeout is not its outcome."""
    async def sleepy(job, ctx: Context):
        if job.attempt == 1:
            if on_cancel == "blocks":  # the event loop itself, past the timeout: no cancel can reach it
                time.sleep(0.4)
                return {"blocked": True}
            if on_cancel == "blocks-raises":  # its error came past the timeout too
                time.sleep(0.4)
                raise Permanent("too_late", "raised after blocking past the timeout")
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                if on_cancel == "exits":
                    raise SystemExit(4) from None
                if on_cancel == "returns":
                    return {"swallowed": True}
                if on_cancel == "raises":
                    raise Permanent("cleanup_failed", "raised while stopping") from None
                raise
        return {"attempt": job.attempt}

    await run(TaskSpec("sleepy", sleepy, max_attempts=3, lease=5.0, backoff=(60.0,), jitter=0.0, timeout=0.2))
    job_id = (await queue.submit("sleepy", "x")).id
    await eventually(lambda: pool.fetchval("select last_error_code = 'timeout' from jobfeed.jobs where id = $1",
                                           job_id), what="the timeout recorded")
    assert await state(pool, job_id) == "queued"
    view = await public(pool, job_id)
    assert view["status"] == "processing" and view["error"] is None  # retried, as any transient failure
    await pool.execute("update jobfeed.jobs set run_after = now() where id = $1", job_id)
    await wait_state(pool, job_id, "completed")
    assert (await public(pool, job_id))["result"] == {"attempt": 2}
    (first, _) = (await queue.admin_get_job(job_id))["attempts_log"]
    assert (first["outcome"], first["error"]["code"]) == ("transient", "timeout")
    said = [r for r in caplog.records if r.levelname == "WARNING" and "past its timeout" in r.getMessage()]
    assert [r.getMessage() for r in said] == [f"job {job_id} (sleepy): attempt 1 of 3 ran past its timeout of 0.2s "
                                               "and was canceled"]  # before: nothing in the log


async def test_the_readme_video_example_fans_out_and_in(dsn, pool, queue, tmp_path):
    """The README's video example, run by a real worker process: 8 parts, then the merge."""
    readme = (ROOT / "README.md").read_text()
    (code,) = [m.group(1) for m in re.finditer(r"^```python\n(.*?)^```", readme, re.M | re.S)
               if m.group(1).startswith("# myapp/video.py")]
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").touch()
    (tmp_path / "myapp" / "video.py").write_text(code)
    worker = Process(JOBFEED + ["worker"], worker_env(dsn, JOBFEED_TASKS="myapp.video", PYTHONPATH=str(tmp_path)))
    async with worker:
        await worker.start(ready=r"kinds ")
        p = (await queue.submit("video", "holiday.mp4")).id
        await wait_state(pool, p, "completed", timeout=30)
    view = await public(pool, p)
    assert view["result"] == {"labels": [f"scene {n}" for n in range(8)]}
    assert view["progress"] == {"done": 8, "total": 8, "message": None}
    assert await pool.fetchval("select count(*) from jobfeed.jobs where parent_id = $1", p) == 8


async def test_cli_show_names_a_childs_parent(dsn, queue, pool, k):
    from test_cli import jobfeed

    p, _ = await queue.submit("k", "parent")
    got = await claim(queue, p)
    a = await queue.child_id(p, got.generation, "k", "a", None)
    assert await queue.complete_spawning(p, got.generation, None, [child(a, "a")])
    shown = jobfeed(dsn, "show", str(a))
    assert shown.returncode == 0, shown.stderr
    assert f"parent_id: {p}" in shown.stdout
    assert "parent_id" not in jobfeed(dsn, "show", str(p)).stdout


async def test_ctx_submit_refuses_what_submit_refuses_and_a_lost_lease(queue, pool, k):
    p, _ = await queue.submit("k", "parent")
    got = await claim(queue, p)
    ctx = Context(queue, got, 1.0)
    for args, code in ((("nope", "x"), "unknown_kind"), (("k", ""), "invalid_target"),
                       (("k", "x", {"big": "x" * 70000}), "payload_too_large"), (("k", "parent"), "invalid_request"),
                       (("k", "x", None, {"priority": 1.5}), "invalid_priority"),
                       (("k", "x", None, {"concurrency_key": ""}), "invalid_concurrency_key")):
        with pytest.raises(Permanent) as err:
            await ctx.submit(*args[:3], **(args[3] if len(args) > 3 else {}))
        assert err.value.code == code, args
    same = [await ctx.submit("k", "a", {"n": 1}), await ctx.submit("k", "a", {"n": 2})]
    assert same[0] == same[1] and len(ctx.children) == 1  # one child per (kind, target)
    await queue.cancel(p)
    with pytest.raises(LeaseLost):
        await ctx.submit("k", "b")


async def test_the_admin_view_lists_the_first_100_children_and_counts_them_all(queue, pool, k):
    p, _ = await queue.submit("k", "parent")
    got = await claim(queue, p)
    ids = [await queue.child_id(p, got.generation, "k", f"c{i:03}", None) for i in range(105)]
    assert await queue.complete_spawning(p, got.generation, None,
                                         [child(c, f"c{i:03}") for i, c in enumerate(ids)])
    view = await queue.admin_get_job(p)
    assert view["children_count"] == 105
    assert [c["id"] for c in view["children"]] == sorted(str(c) for c in ids)[:100]
