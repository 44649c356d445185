"""GET /api/jobs/{id}?wait=30s: answer when the job is final or the time is up.

Rides the feed (one LISTEN per process) like a stream does: subscribe, read the
snapshot, then take the views the feed offers until one is final. Nothing polls."""

from __future__ import annotations

import asyncio
import uuid

from .parse import seconds
from .subscriptions import View
from .state import Services

MAX_WAIT = 60.0  # seconds; a longer ?wait= is clamped to it


def wait_seconds(value: str | None) -> float | None:
    """?wait= as seconds (a duration like 30s, or a number of seconds), at most
    MAX_WAIT; None when absent."""
    if value is None:
        return None
    return min(max(seconds(value, "wait"), 0.0), MAX_WAIT)


async def wait_for_final(svc: Services, job_id: uuid.UUID, seconds: float) -> str | None:
    """The job's public view (JSON text) once final, or as it is when `seconds`
    have passed; None for an unknown job."""
    sub = svc.feed.subscribe(str(job_id))  # subscribe first: no change falls between
    try:
        text = await svc.queue.get_job_json(job_id)
        if text is None:
            return None
        view = View.parse(text)
        svc.feed.seed(sub, view)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not view.terminal:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                async with asyncio.timeout(remaining):
                    offered = await sub.next()
            except TimeoutError:
                break
            if offered is None:  # the server is stopping: answer with what we have
                break
            view = offered
        return view.text
    finally:
        sub.close()
