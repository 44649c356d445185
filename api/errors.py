"""One error shape for every failure: {"error": {"code", "message"}}.

Codes are stable and meant for programs; messages are for people."""

from __future__ import annotations

import json
import logging
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from jobfeed.worker.queue import QueueError

log = logging.getLogger("jobfeed.api")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


async def _api_error(request: Request, exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def _queue_error(request: Request, exc: QueueError) -> Response:
    return error_response(exc.status, exc.code, exc.message)


# Starlette raises these for unmatched routes and methods. Under /api they get
# the JSON shape; the UI's paths keep plain text, as a browser would expect.
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed"}


async def _http_error(request: Request, exc: HTTPException) -> Response:
    if request.url.path.startswith("/api/") or request.url.path == "/api":
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        message = "no such route" if exc.status_code == 404 else str(exc.detail)
        return error_response(exc.status_code, code, message, getattr(exc, "headers", None))
    return PlainTextResponse(str(exc.detail), status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return error_response(500, "internal", "internal error")


EXCEPTION_HANDLERS: dict[Any, Any] = {  # Starlette types each handler by its exception
    ApiError: _api_error,
    QueueError: _queue_error,
    HTTPException: _http_error,
    Exception: _unexpected,
}


def json_text(text: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Relay JSON that PostgreSQL already built, without decoding it."""
    return Response(text, status_code=status, media_type="application/json", headers=headers)


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))
