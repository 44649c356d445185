"""Queue position: for a due job never started, how many jobs of its kind the
claim takes first; null otherwise. Read with the view, refreshed on SSE under
the same id with one query per round for every watched queued job."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest

from jobfeed.worker.queue import Queue

from plan_reads import heavy_lines, most_rows_one_node_read, rows_of
from queue_sql import explained, register


@pytest.fixture
async def line(pool):
    await register(pool, "line")
    await register(pool, "other")


async def position(queue: Queue, job_id) -> int | None:
    return (await queue.get_job(job_id))["position"]


async def test_position_counts_the_jobs_claimed_first(pool, queue, line):
    a = (await queue.submit("line", "a")).id
    b = (await queue.submit("line", "b")).id
    c = (await queue.submit("line", "c")).id
    await queue.submit("other", "x")  # another kind's line is not this one's
    assert [await position(queue, j) for j in (a, b, c)] == [0, 1, 2]
    urgent = (await queue.submit("line", "urgent", priority=5)).id
    assert [await position(queue, j) for j in (urgent, a, b, c)] == [0, 1, 2, 3]
    # the claim agrees: the job at position 0 is the one claimed next
    (first,) = await queue.claim(["line"], 1, "w")
    assert first.id == urgent
    assert await position(queue, urgent) is None  # started
    assert [await position(queue, j) for j in (a, b, c)] == [0, 1, 2]
    (second,) = await queue.claim(["line"], 1, "w")
    assert second.id == a and [await position(queue, j) for j in (b, c)] == [0, 1]
    # started and back in line for a retry: null (its public status is processing)
    await queue.fail_transient(second.id, second.generation, "flaky", None, retry_after=0)
    await pool.execute("update jobfeed.jobs set run_after = now() - interval '1 minute' where id = $1", a)
    assert await position(queue, a) is None
    # ... but it is claimed before b and c, so they count it
    assert [await position(queue, j) for j in (b, c)] == [1, 2]


async def test_no_position_unless_due_queued_and_never_started(pool, queue, line):
    later = (await queue.submit("line", "later", run_after=dt.datetime.now(dt.timezone.utc)
                                + dt.timedelta(hours=1))).id
    now = (await queue.submit("line", "now")).id
    assert await position(queue, later) is None  # not due: nothing to wait in line for yet
    assert await position(queue, now) == 0
    waiting = (await queue.submit("line", "w", after=[now])).id
    assert await position(queue, waiting) is None
    await pool.execute("update jobfeed.jobs set run_after = now() - interval '1 second' where id = $1", later)
    assert await position(queue, later) == 0  # due now, and earlier than `now`


async def test_every_answer_about_one_job_carries_its_position(pool, queue, line):
    """The public view gains position wherever one job's view is answered: its
    read, the admin's view, a request leaving, a signal arriving."""
    await queue.submit("line", "first")
    asked = await queue.submit("line", "asked", request=True)
    await queue.submit("line", "asked", request=True)  # a second requester: the first's leaving keeps the job
    signalled = (await queue.submit("line", "signalled", await_signals=["go", "later"])).id
    assert (await queue.admin_get_job(asked.id))["position"] == 1
    assert (await queue.leave(asked.request_id))["position"] == 1
    assert (await queue.leave(asked.request_id))["position"] == 1  # again: the same answer
    first, view = await queue.signal(signalled, "go")
    assert first and view["position"] is None  # still waiting for "later": not in line
    first, view = await queue.signal(signalled, "later")
    assert first and view["position"] == 2


async def test_positions_of_many_watched_jobs_in_one_query(pool, queue, line):
    items = [(f"t{n:05}", None) for n in range(3000)]
    made = await queue.submit_many("line", items, priority=0)
    ids = [job_id for job_id, _ in made]
    await queue.submit_many("line", [("high", None)], priority=1)
    # one run_after for the whole batch: the id decides, in the claim as here
    rank = {str(job_id): n + 1 for n, job_id in enumerate(sorted(ids))}
    # the ones watched, in any order, some not: each where the claim will take it
    watched = ids[::7][::-1]
    positions = await queue.positions(watched)
    assert positions == {str(job_id): rank[str(job_id)] for job_id in watched}
    views = [json.loads(v) for v in await queue.get_jobs_json(ids[:2])]
    assert {v["id"]: v["position"] for v in views} == {str(i): rank[str(i)] for i in ids[:2]}
    # the claim agrees, chunk by chunk
    everything = await queue.positions(ids)
    (high,) = await queue.claim(["line"], 1, "w")
    for start in range(0, 300, 100):
        claimed = {str(job.id) for job in await queue.claim(["line"], 100, "w")}
        assert claimed == {i for i, p in everything.items() if start < p <= start + 100}


async def test_one_jobs_position_agrees_with_the_batch_count_and_the_claim(pool, queue, line):
    """A single job's answer counts its position on its own (queue_position);
    on a line of priorities, one run_after shared by a batch (the id decides),
    a retry back in line and a job not yet due, it agrees with the feed's
    batched count and with the order the claim takes the jobs in."""
    (retried,) = await queue.submit_many("line", [("retried", None)], priority=0)
    (job,) = await queue.claim(["line"], 1, "w")
    await queue.fail_transient(job.id, job.generation, "flaky", None, retry_after=0)
    await pool.execute("update jobfeed.jobs set run_after = now() - interval '1 minute' where id = $1", retried[0])
    ids = [job_id for job_id, _ in await queue.submit_many("line", [(f"b{n}", None) for n in range(40)])]
    ids += [job_id for job_id, _ in await queue.submit_many("line", [(f"h{n}", None) for n in range(5)], priority=2)]
    for n in range(3):
        ids.append((await queue.submit("line", f"low{n}", priority=-1)).id)
    later = (await queue.submit("line", "later", priority=3,
                                run_after=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))).id
    await queue.submit("other", "x")
    single = {str(job_id): await position(queue, job_id) for job_id in ids}
    assert single == await queue.positions(ids + [retried[0], later])  # neither of these two is in line
    # a few asked at once are counted each on its own, more in one numbered pass
    # (one that ends at the last of them)
    for few in ([ids[0], ids[0]], [ids[7], retried[0], ids[44], later], ids[3::10], ids[-5:],
                [ids[7], retried[0], ids[44], later, ids[1], ids[46]], ids[::2] + [retried[0], later]):
        assert await queue.positions(few) == {str(i): single[str(i)] for i in few if str(i) in single}
    for asked in ([ids[0]] * 2, [ids[0]] * 5):  # a job asked about twice has one row, either way
        assert len(await pool.fetch("select * from jobfeed.positions($1)", asked)) == 1
    assert await position(queue, later) is None and await position(queue, retried[0]) is None
    order = []
    while claimed := await queue.claim(["line"], 1, "w"):
        order.append(str(claimed[0].id))
    order.remove(str(retried[0]))  # claimed before all but the higher priorities, counted by them
    assert sorted(single, key=single.__getitem__) == order
    assert sorted(single.values()) == [n for n in range(len(ids) + 1) if n != 5]


async def test_expired_leases_stand_ahead_of_the_line(pool, queue, line):
    """A running job whose lease expired with attempts left (its worker died) is
    claimed again before any queued job, so every due job counts it; one with
    no attempts left is failed by the claim, not taken, and counts for nothing."""
    for target in ("dead1", "dead2", "spent"):
        await queue.submit("line", target)
    held = await queue.claim(["line"], 3, "gone")
    spent = next(job.id for job in held if job.target == "spent")
    await pool.execute("update jobfeed.jobs set max_attempts = attempts where id = $1", spent)
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 second' where kind = 'line'")
    await queue.submit("other", "x")  # another kind's expired lease is not this line's
    (other,) = await queue.claim(["other"], 1, "gone")
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 second' where id = $1", other.id)
    high = (await queue.submit("line", "high", priority=5)).id
    ids = [high] + [(await queue.submit("line", f"q{n}")).id for n in range(6)]
    single = {str(job_id): await position(queue, job_id) for job_id in ids}
    assert list(single.values()) == [2, 3, 4, 5, 6, 7, 8]  # two reclaimable ahead of all
    assert await queue.positions(ids[:3]) == {str(i): single[str(i)] for i in ids[:3]}  # counted each
    assert await queue.positions(ids) == single  # in one pass
    order = []
    while claimed := await queue.claim(["line"], 1, "w"):
        order.append(str(claimed[0].id))
    assert order[2:] == [str(i) for i in ids] and len(order) == 9, order  # the two reclaimed first
    assert (await queue.admin_get_job(spent))["state"] == "failed"


async def test_sse_sends_position_updates_under_the_same_id(dsn, queue):
    import httpx
    from servers import Watcher, serve
    from waiting import eventually
    async with serve(dsn) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
            jobs = [(await http.post("/api/jobs", json={"kind": "demo", "target": f"p{n}"})).json()
                    for n in range(3)]
            watcher = Watcher(http, f"/api/jobs/{jobs[2]['id']}/events")
            task = asyncio.create_task(watcher.run())
            try:
                await asyncio.wait_for(watcher.opened.wait(), 5)
                await eventually(lambda: asyncio.sleep(0, watcher.views), timeout=5, what="the first view")
                assert watcher.views[0]["position"] == 2
                # the one ahead goes: 1 ahead (a lease that outlasts the test: an
                # expired one would put the job back at the head of the line)
                await queue.claim(["demo"], 1, "w", lease=3600)

                async def moved():
                    return [v["position"] for v in watcher.views][-1:] == [1]
                await eventually(moved, timeout=10, interval=0.05, what="position 1 on the stream")
                events = [e for e in watcher.events if e.event == "job"]
                assert [e.json()["position"] for e in events] == [2, 1]
                assert {e.id for e in events} == {"1"}  # the version never moved
                assert events[-1].json()["version"] == 1
                # its own start: a new version, position null
                claimed = await queue.claim(["demo"], 10, "w")
                assert jobs[2]["id"] in {str(job.id) for job in claimed}

                async def started():
                    return watcher.views[-1]["status"] == "processing"
                await eventually(started, timeout=10, what="processing")
                assert watcher.views[-1]["position"] is None and watcher.events[-1].id == "2"
            finally:
                task.cancel()


async def test_the_feed_refreshes_every_watched_queued_job_with_one_query(pool, queue, line):
    from jobfeed.api.feed import Feed
    from jobfeed.api.subscriptions import View
    feed = Feed(pool, queue, position_interval=3600)  # rounds by hand
    made = await queue.submit_many("line", [(f"f{n}", None) for n in range(50)])
    subs = []
    for job_id in sorted(job_id for job_id, _ in made)[10:]:  # (one run_after: in id order)
        sub = feed.subscribe(str(job_id))
        feed.seed(sub, View.parse(await queue.get_job_json(job_id)))
        subs.append(sub)
    assert [(await s.next()).position for s in subs[:3]] == [10, 11, 12]
    for s in subs[1:]:  # opened a round ago; the first one just now
        s.since -= feed.position_interval
    await queue.claim(["line"], 5, "w")
    await feed.refresh_positions()
    assert feed.position_rounds == 1
    views = [await s.next() for s in subs[1:]]
    assert [v.position for v in views] == list(range(6, 45))
    assert {v.version for v in views} == {1}
    # a stream gets a position at most every round's interval: the young one is
    # owed the move (before: it got it at once, however soon after its first view)
    assert subs[0]._pending is None
    subs[0].since -= feed.position_interval
    await feed.refresh_positions()  # nothing moved, but the owed move goes out
    assert (await subs[0].next()).position == 5
    await feed.refresh_positions()  # nothing moved, nothing owed: nothing offered
    assert all(s._pending is None for s in subs)
    for s in subs:
        s.close()


async def test_the_walk_for_watched_jobs_reads_no_further_than_the_last_of_them(pool, queue, line):
    # Five or more watched jobs are numbered in one walk of their kind's line.
    # It read to the end of the last one's priority: every job behind them
    # too, however many, at every refresh. It ends at the last one.
    ids = sorted(job_id for job_id, _ in await queue.submit_many("line", [(f"t{n}", None) for n in range(3000)]))
    await queue.submit("line", "high", priority=1)
    async with pool.acquire() as conn:
        for watched in (ids[:10:2], ids[:32:2], ids[:34:2], ids[:80:2]):
            assert await queue.positions(watched) == {str(job_id): 1 + 2 * n for n, job_id in enumerate(watched)}
            rows, plans = await explained(conn, "select * from jobfeed.queue_positions($1::uuid[], now())",
                                          watched, analyze=True)
            assert {r["id"]: r["position"] for r in rows} == {job_id: 1 + 2 * n for n, job_id in enumerate(watched)}
            walked = [n for row in plans.splitlines() if "jobs_queued_priority" in row for n in rows_of(row)]
            assert walked, plans  # the walk's own plan, not a call of it
            assert max(walked) <= 2 * len(watched) + 2, plans  # 3,000: the whole line
            assert "using jobs_queued_due" not in plans  # the jobs asked about by key, not a range of the due ones


async def test_the_walk_for_many_watched_jobs_never_compares_each_with_each(pool, queue, line):
    """Many watched jobs, the last near the back, in a session whose kept
    plans were made on a few: no plan node handles more rows than the line
    holds (the walk joined to the watched jobs was planned, in a kept plan,
    as a nested loop handling watched x walked)."""
    ids = sorted(job_id for job_id, _ in await queue.submit_many("line", [(f"t{n}", None) for n in range(3000)]))
    async with pool.acquire() as conn:
        for _ in range(8):  # plans a session keeps are made after five calls
            await conn.fetch("select * from jobfeed.queue_positions($1::uuid[], now())", ids[:6])
        watched = ids[1::2]
        rows, plans = await explained(conn, "select * from jobfeed.queue_positions($1::uuid[], now())",
                                      watched, analyze=True)
    assert {r["id"]: r["position"] for r in rows} == {job_id: 1 + 2 * n for n, job_id in enumerate(watched)}
    assert most_rows_one_node_read(plans) <= 3000, heavy_lines(plans)


async def test_a_few_watched_jobs_of_two_kinds_walk_each_kinds_line(pool, queue, line):
    lines = {kind: [(await queue.submit(kind, f"{kind}{n}")).id for n in range(6)] for kind in ("line", "other")}
    watched = lines["line"][1::2] + lines["other"][::2]  # six: one walk per kind, each to its last
    assert await queue.positions(watched) == {str(i): 1 + 2 * n for n, i in enumerate(lines["line"][1::2])} | {
        str(i): 2 * n for n, i in enumerate(lines["other"][::2])}


async def test_a_scheduled_job_coming_due_gets_its_position_and_loses_scheduled_for(pool, queue, line):
    """No write marks the moment a job submitted for later comes due: the
    position round that first finds it in the line says so on its streams, as
    a GET would (scheduled_for null when due now)."""
    from jobfeed.api.feed import Feed
    from jobfeed.api.subscriptions import View
    feed = Feed(pool, queue, position_interval=3600)  # rounds by hand
    later = (await queue.submit("line", "later", run_after=dt.datetime.now(dt.timezone.utc)
                                + dt.timedelta(hours=1))).id
    sub = feed.subscribe(str(later))
    feed.seed(sub, View.parse(await queue.get_job_json(later)))
    first = json.loads((await sub.next()).text)
    assert first["scheduled_for"] is not None and first["position"] is None
    await pool.execute("update jobfeed.jobs set run_after = now() - interval '1 second' where id = $1", later)
    sub.since -= feed.position_interval
    await feed.refresh_positions()
    moved = json.loads((await sub.next()).text)
    assert (moved["position"], moved["scheduled_for"], moved["version"]) == (0, None, first["version"])
    assert moved == await queue.get_job(later)  # what a GET answers
    sub.close()
