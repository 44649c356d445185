"""The built-in kind `jobfeed.webhook`: POST a final job's public view to a
request's notify_url, signed the Standard Webhooks way (webhook-id,
webhook-timestamp, webhook-signature with JOBFEED_WEBHOOK_SECRET).

The database queues one delivery job per request when its job becomes final
(sql/functions/35_requests.sql); this handler sends it. Only a 2xx delivers: a
5xx, 408, 429, the network or no answer within DEADLINE is a transient error
retried with the kind's backoff (a Retry-After at most its longest step), any
other status permanent (3xx: redirects are not followed; 401/403 too, unlike
the handlers' helpers, which release: a receiver that keeps refusing is not
asked for ever). At least once, with the same webhook-id every time, so
receivers can drop repeats. Processes install the kind when the secret is set
(worker/startup.py): importing this module registers nothing."""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import json

import httpx
from standardwebhooks.webhooks import Webhook

from . import metrics
from .settings import Settings
from .submission import WEBHOOK_KIND, host_allowed
from .http_helpers import http_errors, retry_after_seconds
from .redact import redact
from .tasks import Permanent, Registry, TaskSpec, Transient, registry

KIND = WEBHOOK_KIND
BACKOFF = (10, 60, 300, 900, 3600)  # seconds
DEADLINE = 30  # seconds for one attempt, from connecting to the answer's status line


@functools.cache
def _settings() -> Settings:
    return Settings.from_env()


async def deliver(job, ctx):
    """One delivery attempt, counted in jobfeed_webhook_deliveries_total by
    outcome: delivered, retried or failed (refused for good, or the last attempt)."""
    try:
        answer = await _post(job)
    except Permanent:
        metrics.WEBHOOKS.labels("failed").inc()
        raise
    except Exception:  # 5xx, 429, the network, or unexpected: retried while attempts are left
        metrics.WEBHOOKS.labels("failed" if job.attempt >= job.max_attempts else "retried").inc()
        raise
    metrics.WEBHOOKS.labels("delivered").inc()
    return answer


async def _post(job) -> dict:
    settings = _settings()
    url = job.payload["url"]
    if settings.webhook_secret is None:
        raise Permanent("no_webhook_secret", "JOBFEED_WEBHOOK_SECRET is not set on this worker")
    if not host_allowed(url, settings.webhook_hosts):  # the list may have changed since
        raise Permanent("notify_url_not_allowed", "the notify_url's host is not in JOBFEED_WEBHOOK_HOSTS")
    body = json.dumps(job.payload["body"], separators=(",", ":"))
    webhook_id = job.payload["webhook_id"]
    now = dt.datetime.now(dt.timezone.utc)
    headers = {
        "content-type": "application/json",
        "webhook-id": webhook_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(settings.webhook_secret).sign(webhook_id, now, body),
    }
    try:
        async with asyncio.timeout(DEADLINE):  # httpx's timeouts are per read: a trickle would pass them
            async with httpx.AsyncClient(timeout=DEADLINE, follow_redirects=False) as client:
                with http_errors():
                    # the answer's body is never read (only its status counts): one
                    # of any size costs nothing
                    async with client.stream("POST", url, content=body, headers=headers) as response:
                        pass
    except TimeoutError:
        raise Transient("timeout", redact(f"POST {url} gave no answer within {DEADLINE} s")) from None
    _judge(response)
    return {"status": response.status_code}


def _judge(response: httpx.Response) -> None:
    """Raise what a receiver's answer other than a 2xx calls for."""
    status = response.status_code
    if 200 <= status < 300:
        return
    message = redact(f"POST {response.request.url} answered {status}")
    if status >= 500 or status in (408, 429):
        after = retry_after_seconds(response)
        raise Transient(f"http_{status}", message, retry_after=None if after is None else min(after, BACKOFF[-1]))
    if 300 <= status < 400:
        message += " (redirects are not followed)"
    raise Permanent(f"http_{status}", message)


SPEC = TaskSpec(KIND, deliver, max_attempts=10, lease=60, backoff=BACKOFF,
                description="delivers a final job view to a notify_url")


def install(into: Registry = registry) -> None:
    """Make this process run (and describe) the webhook kind."""
    into.add(SPEC)
