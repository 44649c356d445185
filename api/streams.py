"""Server-sent event streams: one job's public view, or every change in true
states for the dashboard.

When uvicorn starts shutting down (a signal), sse-starlette sets the feed's
shutdown event, shared by all streams, and the feed ends every subscription:
each stream finishes cleanly and the server exits at once instead of waiting on
open streams. No task or event of our own per stream: at 10,000 streams each
one counts."""

from __future__ import annotations

from typing import AsyncIterator

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
    """`events` is the stream; sub.close() ends it."""
    return EventSourceResponse(
        events, ping=svc.settings.sse_ping, ping_message_factory=_ping, sep=SEP,
        shutdown_event=svc.feed.shutdown, shutdown_grace_period=2.0,
        # runs even when the body never starts (HEAD) or the client leaves
        background=BackgroundTask(sub.close))


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
        sub.skip_to(view.version, view.extra)
    else:
        svc.feed.seed(sub, view)
    retry_ms = int(svc.settings.sse_retry * 1000)
    return _response(svc, _job_events(svc, sub, retry_ms), sub)


async def _job_events(svc: Services, sub: JobSubscription, retry_ms: int) -> AsyncIterator[ServerSentEvent]:
    with svc.metrics.stream("job"):
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
            sub.close()


async def admin_stream(request: Request) -> Response:
    svc = services(request)
    sub = svc.feed.subscribe_admin()
    retry_ms = int(svc.settings.sse_retry * 1000)
    return _response(svc, _admin_events(svc, sub, retry_ms), sub)


async def _admin_events(svc: Services, sub: AdminSubscription, retry_ms: int) -> AsyncIterator[ServerSentEvent]:
    # 'ready' says the subscription is live: a dashboard loads its list after it,
    # and again after every 'resync' (changes may have been missed).
    with svc.metrics.stream("admin"):
        try:
            yield ServerSentEvent("{}", event="ready", retry=retry_ms, sep=SEP)
            while (item := await sub.next()) is not None:
                resync, views = item
                if resync:
                    yield ServerSentEvent("{}", event="resync", sep=SEP)
                for text in views:
                    yield ServerSentEvent(text, event="job", sep=SEP)
        finally:
            sub.close()
