"""Liveness, readiness and metrics."""

from __future__ import annotations

import asyncio
import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from jobfeed.worker import migrate

from .state import services

log = logging.getLogger("jobfeed.api")


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def readyz(request: Request) -> Response:
    """Ready when the database answers and its schema is the one this code expects."""
    svc = services(request)
    try:
        async with asyncio.timeout(5):
            async with svc.pool.acquire() as conn:
                pending = await migrate.pending(conn)
    except Exception as exc:
        log.warning("readyz: database unreachable (%s)", type(exc).__name__)
        return JSONResponse({"status": "unavailable", "database": False, "pending": None}, status_code=503)
    body = {"status": "ready" if not pending else "unavailable", "database": True, "pending": pending,
            "feed": svc.feed.connected}
    return JSONResponse(body, status_code=200 if not pending else 503)


async def metrics(request: Request) -> Response:
    svc = services(request)
    text = svc.metrics.render(await svc.queue.stats(), svc.feed, svc.batcher)
    return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")
