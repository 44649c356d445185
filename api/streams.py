"""Server-sent event streams: one job's public view (api/jobstream.py, written
by the feed itself), or every change in true states for the dashboard
(sse-starlette).

When uvicorn starts shutting down (a signal), the feed's shutdown event, shared
by all streams, is set and the feed ends every subscription: each stream
finishes cleanly and the server exits at once instead of waiting on open
streams. No task or event of our own per stream: at 10,000 streams each one
counts."""

from __future__ import annotations

import uuid
from typing import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from . import auth
from .errors import ApiError
from .subscriptions import AdminSubscription, TooManyStreams, View
from .jobstream import SEP, JobStream
from .parse import digits
from .state import Services, services


def _ping() -> ServerSentEvent:
    return ServerSentEvent(comment="ping", sep=SEP)


class _Stream(EventSourceResponse):
    """Ends its subscription however the response ends: sse-starlette skips
    its background task when the stream fails, and an async generator that never
    started never runs its finally."""

    def __init__(self, sub, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._sub = sub

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._sub.close()


def _response(svc: Services, events, sub) -> EventSourceResponse:
    """`events` is the stream; sub.close() ends it."""
    return _Stream(sub, events, ping=svc.settings.sse_ping, ping_message_factory=_ping, sep=SEP,
                   shutdown_event=svc.feed.shutdown, shutdown_grace_period=2.0)


def last_event_id(request: Request) -> int | None:
    """The header, else the query parameter; anything but a plain number is ignored."""
    value = request.headers.get("last-event-id")
    if value is None:
        value = request.query_params.get("last_event_id")
    return digits(value.strip(), 19) if value is not None else None


def _caps(request: Request) -> dict:
    settings = services(request).settings
    client = request.client.host if request.client else None
    return {"client": client, "per_client": settings.max_streams_per_client, "total": settings.max_streams}


def _refused(exc: TooManyStreams) -> ApiError:
    message = ("too many open streams from this client address" if exc.scope == "client"
               else "this server holds as many streams as it may; try again shortly")
    return ApiError(429, "too_many_streams", message, {"Retry-After": "5"})


async def _read(svc: Services, job_id) -> View:
    text = await svc.queue.get_job_json(job_id)
    if text is None:
        raise ApiError(404, "not_found", "no such job")
    return View.parse(text)


def _has_the_end(request: Request, view: View) -> bool:
    """The client has the final view and nothing will follow: 204 tells an
    EventSource to stop reconnecting."""
    return view.terminal and last_event_id(request) == view.version


async def job_stream(request: Request, job_id) -> Response | JobStream:
    svc = services(request)
    try:
        sub = svc.feed.subscribe(str(job_id), **_caps(request))  # LISTEN is already up: subscribe, then read
    except TooManyStreams as exc:
        # the answers that would hold no stream come first, as below the cap
        if _has_the_end(request, await _read(svc, job_id)):
            return Response(status_code=204)
        raise _refused(exc) from None
    try:
        view = await _read(svc, job_id)
        if _has_the_end(request, view):
            sub.close()
            return Response(status_code=204)
        if last_event_id(request) == view.version:
            sub.skip_to(view.version, view.extra)
        else:
            svc.feed.seed(sub, view)
        return JobStream(sub, svc.metrics, int(svc.settings.sse_retry * 1000))
    except BaseException:
        sub.close()  # whatever went wrong, the subscription must not outlive the request
        raise


async def admin_stream(request: Request, session: uuid.UUID | None) -> Response:
    """`session`: the cookie's session the stream was opened with (None for the
    token); the stream ends before its next events once it is signed out or
    expired, whichever API process signed it out."""
    svc = services(request)
    try:
        sub = svc.feed.subscribe_admin(**_caps(request))
    except TooManyStreams as exc:
        raise _refused(exc) from None
    try:
        retry_ms = int(svc.settings.sse_retry * 1000)
        return _response(svc, _admin_events(svc, sub, retry_ms, session), sub)
    except BaseException:
        sub.close()
        raise


async def _admin_events(svc: Services, sub: AdminSubscription, retry_ms: int,
                        session: uuid.UUID | None) -> AsyncIterator[ServerSentEvent]:
    # 'ready' says the subscription is live: a dashboard loads its list after it,
    # and again after every 'resync' (changes may have been missed).
    with svc.metrics.stream("admin"):
        try:
            yield ServerSentEvent("{}", event="ready", retry=retry_ms, sep=SEP)
            while (item := await sub.next()) is not None:
                resync, views = item
                if session is not None and not await auth.session_live(svc.pool, session):
                    return
                if resync:
                    yield ServerSentEvent("{}", event="resync", sep=SEP)
                for text, changed in views:
                    yield ServerSentEvent(text, event="job", sep=SEP)
                    svc.metrics.delivered("admin", changed)  # resumed once the event is written
        finally:
            sub.close()
