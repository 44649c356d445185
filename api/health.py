"""Liveness, readiness and metrics."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobfeed.worker import migrate

from .metrics import CONTENT_TYPE
from .state import services

log = logging.getLogger("jobfeed.api")


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready when the database answers and its schema fits this code: the version
    it needs or a newer compatible one, so a newer release migrating the
    database during a rolling deploy does not take this process out of service."""
    svc = services(request)
    try:
        async with asyncio.timeout(5):
            status = await migrate.schema_status(svc.pool)
    except Exception as exc:
        log.warning("readyz: database unreachable (%s)", type(exc).__name__)
        return JSONResponse({"status": "unavailable", "database": False, "schema": None}, status_code=503)
    ready = status.compatible
    body = {"status": "ready" if ready else "unavailable", "database": True, "schema": status.as_json(),
            "feed": svc.feed.connected}
    return JSONResponse(body, status_code=200 if ready else 503)


async def metrics(request: Request) -> Response:
    svc = services(request)
    text = svc.metrics.render(await svc.queue.stats(), svc.feed, svc.batcher)
    return Response(text, media_type=CONTENT_TYPE)
