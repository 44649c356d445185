"""The built-in kind `jobfeed.webhook`: POST a final job's public view to a
request's notify_url, signed the Standard Webhooks way (webhook-id,
webhook-timestamp, webhook-signature with JOBFEED_WEBHOOK_SECRET).

The database queues one delivery job per request when its job becomes final
(sql/functions/35_requests.sql); this handler sends it. A failed POST is a
transient error (5xx, 429, network) retried with the kind's backoff, or
permanent (404, 410, 422): at least once, with the same webhook-id every time,
so receivers can drop repeats. Processes install the kind when the secret is set
(worker/startup.py): importing this module registers nothing."""

from __future__ import annotations

import datetime as dt
import functools
import json

import httpx
from standardwebhooks.webhooks import Webhook

from . import metrics
from .settings import Settings
from .submission import WEBHOOK_KIND, host_allowed
from .tasks import Permanent, Registry, Release, TaskSpec, check_response, http_errors, registry

KIND = WEBHOOK_KIND


@functools.cache
def _settings() -> Settings:
    return Settings.from_env()


async def deliver(job, ctx):
    """One delivery attempt, counted in jobfeed_webhook_deliveries_total by
    outcome: delivered, retried, released (401/403: our credentials) or failed
    (refused for good, or the last attempt)."""
    try:
        answer = await _post(job)
    except Release:
        metrics.WEBHOOKS.labels("released").inc()
        raise
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
    async with httpx.AsyncClient(timeout=30, follow_redirects=False) as client:
        with http_errors():
            response = await client.post(url, content=body, headers=headers)
            check_response(response)
    return {"status": response.status_code}


SPEC = TaskSpec(KIND, deliver, max_attempts=10, lease=60, backoff=(10, 60, 300, 900, 3600),
                description="delivers a final job view to a notify_url")


def install(into: Registry = registry) -> None:
    """Make this process run (and describe) the webhook kind."""
    into.add(SPEC)
