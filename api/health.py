"""Liveness, readiness and metrics."""

from __future__ import annotations

import ipaddress
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobfeed.worker import migrate

from .metrics import CONTENT_TYPE
from . import auth
from .errors import DATABASE_GONE, ApiError
from .state import services

log = logging.getLogger("jobfeed.api")

READY_WAIT = 2.0  # seconds /readyz gives each step of its look at the database


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def live(request: Request) -> Response:
    """Whether this process's live feed is connected to the database: while it
    is not, event streams stay open and carry nothing. Answered from memory,
    without the database: every open job page and dashboard asks it every few
    seconds (static/js/api.js)."""
    return JSONResponse({"live": services(request).feed.connected})


async def readyz(request: Request) -> Response:
    """Ready when the database answers and its schema fits this code: the version
    it needs or a newer compatible one, so a newer release migrating the
    database during a rolling deploy does not take this process out of service."""
    svc = services(request)
    try:
        # Each step bounded on its own: the wait for a pooled connection, the
        # query, and the release, which waits for the cancel of a query that
        # timed out (the pool's own bound for that is far longer).
        async with svc.pool.acquire(timeout=READY_WAIT) as conn:
            status = await migrate.schema_status(conn, timeout=READY_WAIT)
    except Exception as exc:
        log.warning("readyz: database unreachable (%s)", type(exc).__name__)
        return JSONResponse({"status": "unavailable", "database": False, "schema": None}, status_code=503)
    ready = status.compatible
    body = {"status": "ready" if ready else "unavailable", "database": True, "schema": status.as_json(),
            "feed": svc.feed.connected}
    return JSONResponse(body, status_code=200 if ready else 503)


def _loopback(request: Request) -> bool:
    try:
        return request.client is not None and ipaddress.ip_address(request.client.host).is_loopback
    except ValueError:  # not an address (a unix socket, a test transport's name)
        return False


def _metrics_access(request: Request) -> None:
    """JOBFEED_METRICS_TOKEN set: it is needed, as a bearer token, from anywhere.
    Unset: only loopback clients (a scraper on the same host, or a proxy that
    decides for itself) may read job counts."""
    token = services(request).settings.metrics_token
    if token is not None:
        if not auth.bearer_matches(request, token):
            raise ApiError(401, "unauthorized", "a valid metrics token is required",
                           {"WWW-Authenticate": 'Bearer realm="jobfeed-metrics"'})
    elif not _loopback(request):
        raise ApiError(403, "forbidden", "metrics answer loopback clients only unless JOBFEED_METRICS_TOKEN is set")


async def metrics(request: Request) -> Response:
    _metrics_access(request)
    svc = services(request)
    try:
        # list_kinds reads the small kinds table (for the paused gauge), never the jobs
        stats, kinds = await svc.queue.stats(), await svc.queue.list_kinds()
    except DATABASE_GONE:
        # The process's own figures matter most while the database is away (the
        # feed's connection, HTTP errors, the worker's): served without the jobs
        # by state and the kinds, which are left out rather than shown stale.
        stats, kinds = {}, []
    text = svc.metrics.render(stats, kinds, svc.feed, svc.batcher)
    return Response(text, media_type=CONTENT_TYPE)
