"""Deferred leaves: a closing job page asks for its request to leave after a
grace (leave_later), a page that comes back calls it off (stay), and the
sweeper's leave_due applies the ones past due through leave(), with its
abandon rules. Until then the request is active. Time is planted (p_now);
over HTTP: test_requests_http.py; the sweeper's rounds: test_sweeper.py; the
job page: test_browser_leave.py."""

from __future__ import annotations

import datetime as dt
import json
import uuid

import pytest

from jobfeed.worker.queue import QueueError

from request_kinds import k  # noqa: F401  (a fixture: the kinds these tests submit to)

T = dt.datetime(2031, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
SECOND = dt.timedelta(seconds=1)


async def leave_later(pool, request_id, grace: float, now=T) -> tuple[dict, dt.datetime | None]:
    row = await pool.fetchrow("select view::text, leave_at from jobfeed.leave_later($1, $2, $3)",
                              request_id, dt.timedelta(seconds=grace), now)
    return json.loads(row["view"]), row["leave_at"]


async def leave_due(pool, now, limit: int = 100) -> int:
    return await pool.fetchval("select jobfeed.leave_due($1, $2)", limit, now)


async def request_row(pool, request_id):
    return await pool.fetchrow("select leave_at, left_at from jobfeed.requests where id = $1", request_id)


async def status(queue, job_id) -> tuple[str, int]:
    view = await queue.get_job(job_id)
    return view["status"], view["requesters"]


async def test_a_deferred_leave_waits_its_grace_then_leaves_as_leave_does(pool, queue, k):
    s = await queue.submit("k", "t", request=True)
    view, leave_at = await leave_later(pool, s.request_id, 20)
    assert leave_at == T + 20 * SECOND
    assert (view["status"], view["requesters"]) == ("queued", 1)  # still waiting: active
    assert await request_row(pool, s.request_id) == (T + 20 * SECOND, None)

    assert await leave_due(pool, T + 19 * SECOND) == 0
    assert await status(queue, s.id) == ("queued", 1)
    assert await leave_due(pool, T + 20 * SECOND) == 1
    # the only requester gone: abandoned, and k's on_abandon cancels
    assert await status(queue, s.id) == ("canceled", 0)
    assert (await request_row(pool, s.request_id))["left_at"] == T + 20 * SECOND
    assert await leave_due(pool, T + 60 * SECOND) == 0


async def test_a_pending_leave_keeps_the_request_active_for_every_count(pool, queue, k):
    """Shared with an explicit leaver, a job whose other request has a leave
    pending is not abandoned; the requester's cap still counts it."""
    a = await queue.submit_request_json("k", "t", requester="ann", max_active=1)
    b = await queue.submit_request_json("k", "t", requester="bob", max_active=1)
    job_id, request_a, request_b = a[0], a[3], b[3]
    await leave_later(pool, request_a, 20)
    assert await status(queue, job_id) == ("queued", 2)
    await queue.leave(request_b)  # explicit: at once, and not the last
    assert await status(queue, job_id) == ("queued", 1)
    with pytest.raises(QueueError) as refused:  # ann's pending request counts against her cap
        await queue.submit_request_json("k", "other", requester="ann", max_active=1)
    assert (refused.value.code, refused.value.status) == ("too_many_jobs", 429)

    assert await leave_due(pool, T + 21 * SECOND) == 1
    assert await status(queue, job_id) == ("canceled", 0)
    await queue.submit_request_json("k", "other", requester="ann", max_active=1)  # her cap is free


async def test_stay_calls_off_a_pending_leave(pool, queue, k):
    s = await queue.submit("k", "t", request=True)
    await leave_later(pool, s.request_id, 20)
    text, called_off = await queue.stay_json(s.request_id)
    view = json.loads(text)
    assert (view["id"], view["status"], view["requesters"], called_off) == (str(s.id), "queued", 1, True)
    assert await request_row(pool, s.request_id) == (None, None)
    assert await leave_due(pool, T + 3600 * SECOND) == 0
    assert await status(queue, s.id) == ("queued", 1)
    assert await queue.stay(s.request_id) is False  # nothing pending: fine, changes nothing

    # too late: the leave was applied, and staying cannot undo it
    await leave_later(pool, s.request_id, 20)
    assert await leave_due(pool, T + 20 * SECOND) == 1
    with pytest.raises(QueueError) as late:
        await queue.stay(s.request_id)
    assert (late.value.code, late.value.status) == ("request_left", 409)
    assert await status(queue, s.id) == ("canceled", 0)
    for unknown in (uuid.uuid4(), "not-a-uuid"):
        with pytest.raises(QueueError) as e:
            await queue.stay(unknown)
        assert (e.value.code, e.value.status) == ("not_found", 404)


async def test_an_explicit_leave_is_immediate_even_with_a_leave_pending(pool, queue, k):
    s = await queue.submit("k", "t", request=True)
    await leave_later(pool, s.request_id, 20)
    view = await queue.leave(s.request_id)
    assert (view["status"], view["requesters"]) == ("canceled", 0)
    assert await leave_due(pool, T + 20 * SECOND) == 0  # nothing left to apply


async def test_no_grace_leaves_at_once_and_asking_again_never_puts_a_leave_off(pool, queue, k):
    s = await queue.submit("k", "t", request=True)
    t2 = await queue.submit("k", "t2", request=True)
    view, leave_at = await leave_later(pool, t2.request_id, 0)
    assert (view["status"], leave_at) == ("canceled", None)

    await leave_later(pool, s.request_id, 10)
    _, leave_at = await leave_later(pool, s.request_id, 20, now=T + SECOND)
    assert leave_at == T + 10 * SECOND  # the earlier stands
    _, leave_at = await leave_later(pool, s.request_id, 2, now=T + SECOND)
    assert leave_at == T + 3 * SECOND  # a sooner one wins
    assert await leave_due(pool, T + 3 * SECOND) == 1
    # left: asked again, answered as leave() answers (idempotent), no time
    view, leave_at = await leave_later(pool, s.request_id, 20, now=T + 5 * SECOND)
    assert (view["status"], leave_at) == ("canceled", None)
    with pytest.raises(QueueError) as e:
        await queue.leave(uuid.uuid4(), grace=20)
    assert e.value.status == 404


async def test_a_kept_job_outlives_its_deferred_leave(pool, queue, k):
    s = await queue.submit("kept", "t", request=True)
    await leave_later(pool, s.request_id, 5)
    assert await leave_due(pool, T + 5 * SECOND) == 1
    assert await status(queue, s.id) == ("queued", 0)


async def test_a_final_jobs_request_has_no_leave_to_defer_and_the_sweeper_counts_live_leaves_only(pool, queue, k):
    """A request stops being active when its job is final: asking it to leave
    later leaves at once (no leave_at), and a leave pending when its job
    became final is dropped by leave_due, not counted as one it applied.
    Before: the answer carried a leave_at and the sweeper counted it."""
    done = await queue.submit("kept", "done", request=True)
    pending = await queue.submit("kept", "pending", request=True)
    live = await queue.submit("k", "live", request=True)
    await leave_later(pool, pending.request_id, 10)
    await leave_later(pool, live.request_id, 10)
    for job_id in (done.id, pending.id):
        await pool.execute("select jobfeed.cancel($1, $2)", job_id, T)

    view, leave_at = await leave_later(pool, done.request_id, 10)
    assert (view["status"], leave_at) == ("canceled", None)
    assert await request_row(pool, done.request_id) == (None, T)
    assert await leave_due(pool, T + 10 * SECOND) == 1  # live's alone
    assert await status(queue, live.id) == ("canceled", 0)
    assert await request_row(pool, pending.request_id) == (None, None)  # dropped
    assert await leave_due(pool, T + 60 * SECOND) == 0


async def test_leave_due_goes_in_batches_earliest_first(pool, queue, k):
    subs = [await queue.submit("k", f"b{n}", request=True) for n in range(5)]
    for n, s in enumerate(subs):
        await leave_later(pool, s.request_id, 10 + n)
    assert await leave_due(pool, T + 60 * SECOND, limit=2) == 2
    states = [(await status(queue, s.id))[0] for s in subs]
    assert states == ["canceled", "canceled", "queued", "queued", "queued"]
    assert await leave_due(pool, T + 60 * SECOND, limit=2) == 2
    assert await leave_due(pool, T + 60 * SECOND, limit=2) == 1
    assert {(await status(queue, s.id))[0] for s in subs} == {"canceled"}


@pytest.mark.parametrize("grace", [-1, -0.001, float("nan"), float("inf"), True, "5s", None])
async def test_a_bad_grace_from_python_is_refused_and_changes_nothing(pool, queue, k, grace):
    """As ?grace= refuses it (422 invalid_query). Before: a negative grace left
    at once and canceled a lone requester's job; nan, inf and a string raised
    ValueError, OverflowError and TypeError; True was one second."""
    s = await queue.submit("k", "t", request=True)
    for call in (queue.leave(s.request_id, grace=grace) if grace is not None else None,
                 queue.leave_later_json(s.request_id, grace)):
        if call is None:
            continue
        with pytest.raises(QueueError) as refused:
            await call
        assert (refused.value.code, refused.value.status) == ("invalid_query", 422), refused.value
    assert await status(queue, s.id) == ("queued", 1)
    assert await request_row(pool, s.request_id) == (None, None)


async def test_python_leaves_are_capped_by_the_leave_grace_setting(pool, k):
    """JOBFEED_LEAVE_GRACE caps Queue.leave's grace as it caps ?grace=; at 0s
    every leave is at once."""
    from jobfeed import Queue
    from jobfeed.worker.settings import Settings
    capped = Queue(pool, settings=Settings(leave_grace=3.0))
    s = await capped.submit("k", "capped", request=True)
    before = await pool.fetchval("select now()")
    _, leave_at = await capped.leave_later_json(s.request_id, 100_000)
    assert dt.timedelta(seconds=2.5) < leave_at - before < dt.timedelta(seconds=10)
    at_once = Queue(pool, settings=Settings(leave_grace=0.0))
    s = await at_once.submit("k", "at-once", request=True)
    assert (await at_once.leave(s.request_id, grace=60))["status"] == "canceled"
