"""Server-sent event streams: one job's public view, or every change in true
states for the dashboard.

When uvicorn starts shutting down (a signal), sse-starlette sets each stream's
shutdown event; closing the subscription then lets the stream finish cleanly,
so the server exits at once instead of waiting on open streams."""

from __future__ import annotations

import asyncio
from typing import AsyncIterator

import anyio

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from .errors import ApiError
from .feed import AdminSubscription, JobSubscription, View
from .state import Services, services

SEP = "\n"


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep=SEP)


def _response(svc: Services, events, sub) -> EventSourceResponse:
    """events(shutdown) makes the stream; sub.close() ends it."""
    shutdown = anyio.Event()
    return EventSourceResponse(
        events(shutdown), ping=svc.config.sse_ping, ping_message_factory=_ping, sep=SEP,
        shutdown_event=shutdown, shutdown_grace_period=2.0,
        # runs even when the body never starts (HEAD) or the client leaves
        background=BackgroundTask(sub.close))


def _close_on(shutdown: anyio.Event, sub) -> asyncio.Task:
    async def wait() -> None:
        await shutdown.wait()
        sub.close()
    return asyncio.create_task(wait())


def last_event_id(request: Request) -> int | None:
    value = request.headers.get("last-event-id") or request.query_params.get("last_event_id")
    if value is None or not value.strip().isdigit():
        return None
    return int(value)


async def job_stream(request: Request, job_id) -> Response:
    svc = services(request)
    sub = svc.feed.subscribe(str(job_id))  # LISTEN is already up: subscribe, then read
    try:
        text = await svc.queue.get_job_json(job_id)
    except BaseException:
        sub.close()
        raise
    if text is None:
        sub.close()
        raise ApiError(404, "not_found", "no such job")
    view = View.parse(text)
    if last_event_id(request) == view.version:
        if view.terminal:
            # The client has the final view and nothing will follow. 204 tells an
            # EventSource to stop reconnecting.
            sub.close()
            return Response(status_code=204)
        sub.skip_to(view.version)
    else:
        svc.feed.seed(sub, view)
    retry_ms = int(svc.config.sse_retry * 1000)
    return _response(svc, lambda shutdown: _job_events(svc, sub, retry_ms, shutdown), sub)


async def _job_events(svc: Services, sub: JobSubscription, retry_ms: int,
                      shutdown: anyio.Event) -> AsyncIterator[ServerSentEvent]:
    with svc.metrics.stream("job"):
        closer = _close_on(shutdown, sub)
        try:
            retry: int | None = retry_ms
            if sub.newest == sub.sent:  # first view skipped (Last-Event-ID): say retry alone
                yield ServerSentEvent(retry=retry, sep=SEP)
                retry = None
            while (view := await sub.next()) is not None:
                yield ServerSentEvent(view.text, event="job", id=str(view.version), retry=retry, sep=SEP)
                retry = None
                if view.terminal:
                    return  # nothing follows a final status
        finally:
            closer.cancel()
            sub.close()


async def admin_stream(request: Request) -> Response:
    svc = services(request)
    sub = svc.feed.subscribe_admin()
    retry_ms = int(svc.config.sse_retry * 1000)
    return _response(svc, lambda shutdown: _admin_events(svc, sub, retry_ms, shutdown), sub)


async def _admin_events(svc: Services, sub: AdminSubscription, retry_ms: int,
                        shutdown: anyio.Event) -> AsyncIterator[ServerSentEvent]:
    # 'ready' says the subscription is live: a dashboard loads its list after it,
    # and again after every 'resync' (changes may have been missed).
    with svc.metrics.stream("admin"):
        closer = _close_on(shutdown, sub)
        try:
            yield ServerSentEvent("{}", event="ready", retry=retry_ms, sep=SEP)
            while (item := await sub.next()) is not None:
                resync, views = item
                if resync:
                    yield ServerSentEvent("{}", event="resync", sep=SEP)
                for text in views:
                    yield ServerSentEvent(text, event="job", sep=SEP)
        finally:
            closer.cancel()
            sub.close()
