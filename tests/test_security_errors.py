"""Failed jobs tell users only what handlers meant to say (issue 9: failed jobs
showed str(exc) to anyone with the job id, upstream URLs with their API keys
included). Any other exception is `internal_error` in public, with the detail
kept for admins, who never see URL credentials or query strings either."""

from __future__ import annotations

import asyncio

import pytest

from jobfeed.worker.redact import redact
from jobfeed.worker.runner import Runner
from jobfeed.worker.tasks import Permanent, TaskSpec
from waiting import wait_state

LEAKY = "GET https://bot:s3cret@api.example.com/v1/mail?api_key=XYZ123&x=1 failed"


@pytest.mark.parametrize("text, expected", [
    (LEAKY, "GET https://***@api.example.com/v1/mail?*** failed"),
    ("postgresql://jobfeed:pw@db:5432/jobs?sslmode=require down",
     "postgresql://***@db:5432/jobs?*** down"),
    ("url='http://h/p?token=abc' end", "url='http://h/p?***' end"),
    ("(see https://h/a?k=v)", "(see https://h/a?***)"),
    ("no url here? fine", "no url here? fine"),
    ("https://example.com/plain", "https://example.com/plain"),
])
def test_redact_removes_credentials_and_query_strings(text, expected):
    assert redact(text) == expected


@pytest.fixture
async def runner(queue, dsn):
    async def leaky(job, ctx):
        if job.payload.get("on_purpose"):
            raise Permanent("upstream_gone", LEAKY)
        raise RuntimeError(LEAKY)

    spec = TaskSpec("leaky", leaky, max_attempts=1, lease=5.0, backoff=(0.05,), jitter=0.0)
    await queue.register_kind("leaky", max_attempts=1, lease=5.0, backoff=(0.05,), jitter=0.0)
    r = Runner(queue, dsn, [spec], poll_interval=0.2, grace=1.0)
    task = asyncio.create_task(r.run())
    yield r
    r.stop()
    await asyncio.wait_for(task, 10)


async def test_an_unexpected_exception_is_internal_error_in_public(runner, queue, pool):
    job_id, _ = await queue.submit("leaky", "bug")
    await wait_state(pool, job_id, "failed")
    public = await queue.get_job(job_id)
    assert public["error"] == {"code": "internal_error", "message": "internal error"}
    admin = await queue.admin_get_job(job_id)
    detail = admin["last_error"]
    assert detail["code"] == "internal_error"
    assert detail["message"].startswith("RuntimeError: GET https://***@api.example.com/v1/mail?***")
    assert admin["attempts_log"][0]["error"] == detail
    for secret in ("s3cret", "XYZ123", "api_key"):
        assert secret not in str(admin) and secret not in str(public)


async def test_errors_raised_on_purpose_keep_their_code_and_message_redacted(runner, queue, pool):
    job_id, _ = await queue.submit("leaky", "purpose", {"on_purpose": True})
    await wait_state(pool, job_id, "failed")
    public = await queue.get_job(job_id)
    assert public["error"] == {"code": "upstream_gone",
                               "message": "GET https://***@api.example.com/v1/mail?*** failed"}
    admin = await queue.admin_get_job(job_id)
    assert "s3cret" not in str(admin) and "XYZ123" not in str(admin)
