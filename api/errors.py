"""One error shape for every failure: {"error": {"code", "message"}}.

Codes are stable and meant for programs; messages are for people."""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import asyncpg

from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from jobfeed.worker.queue import QueueError
from jobfeed.worker.submission import InvalidSubmission

from .headers import HEADERS

log = logging.getLogger("jobfeed.api")


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers


def error_response(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> Response:
    # ASCII JSON: a message quoting the client's input may hold a lone
    # surrogate (JSON can spell one), which UTF-8 cannot encode.
    return json_text(dumps({"error": {"code": code, "message": message}}), status, headers)


async def _api_error(request: Request, exc: ApiError) -> Response:
    return error_response(exc.status, exc.code, exc.message, exc.headers)


async def _refused(request: Request, exc: QueueError | InvalidSubmission) -> Response:
    """The queue's refusal, or a submission's check (worker/submission.py, shared
    with Queue.submit), answered with its own status and code."""
    return error_response(exc.status, exc.code, exc.message)


# Starlette raises these for unmatched routes and methods (and StaticFiles for
# missing files): the same JSON shape everywhere, for programs and pages alike.
_HTTP_CODES = {400: "bad_request", 404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
_HTTP_MESSAGES = {404: "no such route", 405: "method not allowed"}


async def _http_error(request: Request, exc: HTTPException) -> Response:
    code = _HTTP_CODES.get(exc.status_code, "http_error")
    message = _HTTP_MESSAGES.get(exc.status_code, str(exc.detail))
    return error_response(exc.status_code, code, message, getattr(exc, "headers", None))


async def _client_gone(request: Request, exc: ClientDisconnect) -> Response:
    # The client hung up mid-body (or the request timeout closed it): nobody
    # reads this answer, and it is no server error worth a traceback.
    log.debug("client left during %s %s", request.method, request.url.path)
    return error_response(400, "client_disconnected", "the client closed the connection")


# The database is down, restarting or full: a 503 that says so (a load
# balancer or client retries it), not a 500 that reads as a bug. A server
# reached by its Unix socket (the embedded one) that stopped has removed the
# socket: FileNotFoundError (no route reads files of its own); a host name
# that does not resolve for now: socket.gaierror; one that takes the
# connection and never answers: TimeoutError, past db.CONNECT_TIMEOUT; one that
# turns new connections away for now (pg_hba.conf's reject while an operator
# works): InvalidAuthorizationSpecificationError (at start, a wrong password
# stops the process: it cannot be a running API's state); a connection cut
# mid-call: asyncpg's "cannot switch to state" InternalClientError.
DATABASE_GONE = (ConnectionError, FileNotFoundError, socket.gaierror, TimeoutError, asyncpg.PostgresConnectionError,
                 asyncpg.CannotConnectNowError, asyncpg.AdminShutdownError, asyncpg.CrashShutdownError,
                 asyncpg.TooManyConnectionsError, asyncpg.InvalidAuthorizationSpecificationError,
                 asyncpg.exceptions.InternalClientError)


async def _database_gone(request: Request, exc: Exception) -> Response:
    log.warning("database unavailable on %s %s: %s", request.method, request.url.path, type(exc).__name__)
    return error_response(503, "database_unavailable", "the database is not reachable; try again shortly",
                          {"Retry-After": "1"})


async def _unexpected(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    # Starlette's ServerErrorMiddleware sends this answer, outside SecurityHeaders: its headers are given here.
    # It then raises the exception on, and the server drops the connection: Connection: close tells the
    # client not to send its next request on it.
    return error_response(500, "internal_error", "internal error", {**HEADERS, "Connection": "close"})


EXCEPTION_HANDLERS: dict[Any, Any] = {  # Starlette types each handler by its exception
    ApiError: _api_error,
    QueueError: _refused,
    InvalidSubmission: _refused,
    HTTPException: _http_error,
    ClientDisconnect: _client_gone,
    **{kind: _database_gone for kind in DATABASE_GONE},
    Exception: _unexpected,
}


def json_text(text: str, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    """Relay JSON that PostgreSQL already built, without decoding it."""
    return Response(text, status_code=status, media_type="application/json", headers=headers)


def dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"))
