"""What an attempt's error says, made fit to store: handlers' own errors keep
their code and message; any other exception becomes `internal_error` (users see
only that code, admins the detail). Messages lose URL credentials and query
strings (where API keys and request ids travel) either way, also those of a
request line in an access log."""

from __future__ import annotations

import re

from .job_errors import JobError, Transient

MAX_MESSAGE = 2000
INTERNAL = "internal_error"

# scheme://user:password@host  and  ?query (up to whitespace, a quote or a bracket)
_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"<>]*@")
_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?'\"<>]*)\?[^\s'\"<>)\]]*")
# an HTTP request line's target, as in an access log: GET /path?query
_TARGET_QUERY = re.compile(r"(\b(?:GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) /[^\s?'\"<>]*)\?[^\s'\"<>]*")


def redact(text: str) -> str:
    text = _CREDENTIALS.sub(r"\1***@", text)
    text = _QUERY.sub(r"\1?***", text)
    return _TARGET_QUERY.sub(r"\1?***", text)


def redacted(error: JobError) -> JobError:
    """The same error (class, code, retry_after) with its message redacted."""
    clean = redact(error.message)
    if clean != error.message:
        error.message = clean
    return error


def unexpected(exc: BaseException) -> Transient:
    """An exception no handler raised on purpose: transient (worth retrying), code
    internal_error; the class and text are for admins only."""
    return Transient(INTERNAL, redact(f"{type(exc).__name__}: {exc}")[:MAX_MESSAGE])
