"""`jobfeed retry` and `jobfeed cancel`: an operator's dashboard buttons on the
command line, one job by id (refused as the admin route refuses it) or every
job a filter matches (as the bulk route)."""

from __future__ import annotations

import json
import uuid

from test_cli import jobfeed


async def failed_job(queue, target: str, code: str) -> uuid.UUID:
    job_id = (await queue.submit("demo", target)).id
    [job] = await queue.claim(["demo"], 1, "w-test")
    assert job.id == job_id
    await queue.fail_permanent(job.id, job.generation, code, "gone")
    return job_id


async def states(pool) -> dict[str, str]:
    return {r["target"]: r["state"] for r in await pool.fetch("select target, state::text from jobfeed.jobs")}


async def test_one_job_is_retried_and_canceled_by_its_id(dsn, queue, pool, demo_kind):
    job_id = await failed_job(queue, "a", "http_404")
    retried = jobfeed(dsn, "retry", str(job_id), "--json")
    assert retried.returncode == 0, retried.stderr
    view = json.loads(retried.stdout)
    assert (view["id"], view["state"], view["attempts"]) == (str(job_id), "queued", 0)
    canceled = jobfeed(dsn, "cancel", str(job_id))
    assert canceled.returncode == 0 and canceled.stdout.strip() == f"job {job_id}: canceled"
    again = jobfeed(dsn, "cancel", str(job_id))
    assert again.returncode == 2 and "invalid_state" in again.stderr
    assert await states(pool) == {"a": "canceled"}
    missing = jobfeed(dsn, "retry", str(uuid.uuid4()))
    assert missing.returncode == 1 and "not_found" in missing.stderr
    bad = jobfeed(dsn, "cancel", "not-an-id")
    assert bad.returncode == 2 and "'not-an-id' is not a job id" in bad.stderr


async def test_a_filter_retries_or_cancels_every_job_it_matches(dsn, queue, pool, demo_kind):
    for target in ("a", "b", "c"):
        await failed_job(queue, target, "http_404")
    await failed_job(queue, "d", "http_410")
    await queue.submit("demo", "e")
    nothing = jobfeed(dsn, "retry")
    assert nothing.returncode == 2 and "name job ids, or a filter" in nothing.stderr
    for flag in ("--error-code", "--kind"):  # an empty value is a mistake, not "no filter"
        empty = jobfeed(dsn, "retry", str(uuid.uuid4()), flag, "")
        assert empty.returncode == 2 and f"{flag} must be a non-empty string" in empty.stderr, empty.stderr
    assert await states(pool) == {"a": "failed", "b": "failed", "c": "failed", "d": "failed", "e": "queued"}
    retried = jobfeed(dsn, "retry", "--error-code", "http_404", "--json")
    assert retried.returncode == 0 and json.loads(retried.stdout) == {"count": 3}
    assert await states(pool) == {"a": "queued", "b": "queued", "c": "queued", "d": "failed", "e": "queued"}
    canceled = jobfeed(dsn, "cancel", "--kind", "demo", "--state", "queued")
    assert canceled.returncode == 0 and canceled.stdout.strip() == "4 jobs canceled"
    assert await states(pool) == {"a": "canceled", "b": "canceled", "c": "canceled", "d": "failed", "e": "canceled"}


async def test_ids_with_a_filter_take_only_the_jobs_both_name(dsn, queue, pool, demo_kind):
    a = await failed_job(queue, "a", "http_404")
    b = await failed_job(queue, "b", "http_410")
    await failed_job(queue, "c", "http_404")
    out = jobfeed(dsn, "retry", str(a), str(b), "--error-code", "http_404")
    assert out.returncode == 0 and out.stdout.strip() == "1 job retried"
    assert await states(pool) == {"a": "queued", "b": "failed", "c": "failed"}
