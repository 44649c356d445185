"""Admin retry and cancel, state by state: retry only a failed or canceled job,
cancel only a queued or running one; anything else is 409 invalid_state and
changes nothing."""

from __future__ import annotations

import pytest

from queue_sql import claim_one, register, submit
from jobfeed.worker.queue import QueueError


async def job_in(pool, state: str):
    jid = await submit(pool, f"t-{state}")
    if state == "queued":
        return jid
    r = await claim_one(pool)
    if state == "completed":
        await pool.execute("select jobfeed.complete($1, $2, null)", jid, r["generation"])
    elif state == "failed":
        await pool.execute("select jobfeed.fail_permanent($1, $2, 'gone')", jid, r["generation"])
    elif state == "canceled":
        await pool.execute("select jobfeed.cancel($1)", jid)
    return jid


@pytest.fixture(autouse=True)
async def _k(pool):
    await register(pool, "k", lease="1 hour")


async def snapshot(pool, jid):
    return dict(await pool.fetchrow("select state::text, attempts, generation, version from jobfeed.jobs "
                                    "where id = $1", jid))


@pytest.mark.parametrize("state", ["queued", "running", "completed"])
async def test_only_failed_or_canceled_jobs_can_be_retried(queue, pool, state):
    jid = await job_in(pool, state)
    before = await snapshot(pool, jid)
    with pytest.raises(QueueError) as caught:
        await queue.retry(jid)
    assert (caught.value.status, caught.value.code) == (409, "invalid_state")
    assert await snapshot(pool, jid) == before


@pytest.mark.parametrize("state", ["failed", "canceled"])
async def test_failed_or_canceled_jobs_are_retried_from_zero(queue, pool, state):
    jid = await job_in(pool, state)
    view = await queue.retry(jid)
    assert (view["state"], view["attempts"]) == ("queued", 0)


@pytest.mark.parametrize("state", ["completed", "failed", "canceled"])
async def test_finished_jobs_cannot_be_canceled(queue, pool, state):
    jid = await job_in(pool, state)
    before = await snapshot(pool, jid)
    with pytest.raises(QueueError) as caught:
        await queue.cancel(jid)
    assert (caught.value.status, caught.value.code) == (409, "invalid_state")
    assert await snapshot(pool, jid) == before
