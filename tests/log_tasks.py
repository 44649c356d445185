"""A kind whose handler logs, and fails once with, a URL holding credentials and
an API key in its query: what the logs must never show (tests/test_logs.py)."""

import logging

from jobfeed import Transient, task

SECRET_PASSWORD = "planted-url-password-71"
SECRET_KEY = "planted-query-key-93"
URL = f"https://svc:{SECRET_PASSWORD}@upstream.example/v1/thing?api_key={SECRET_KEY}"

log = logging.getLogger("tests.leaky")


@task("leaky", backoff=(0.1,), jitter=0.0)
async def leaky(job, ctx):
    log.info("calling %s for %s", URL, job.target)
    if job.generation == 1:
        raise Transient("upstream_unavailable", f"GET {URL} answered 503")
    return {"ok": True}
