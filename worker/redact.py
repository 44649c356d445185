"""What an attempt's error says, made fit to store: handlers' own errors keep
their code and message; any other exception becomes `internal_error` (users see
only that code, admins the detail). Messages lose URL credentials and query
strings (where API keys and request ids travel) either way, also those of a
request line in an access log. Codes and messages are cut to their limits and
lose what PostgreSQL's text cannot hold (a NUL, a lone surrogate), which would
otherwise leave the outcome unwritten and the job running until its lease
expired."""

from __future__ import annotations

import re

from .job_errors import JobError, Transient

MAX_MESSAGE = 2000
MAX_CODE = 200
INTERNAL = "internal_error"

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

# scheme://user:password@host  and  ?query (up to whitespace, a quote or a bracket)
_CREDENTIALS = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s@'\"<>]*@")
_QUERY = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s?'\"<>]*)\?[^\s'\"<>)\]]*")
# an HTTP request line's target, as in an access log: GET /path?query
_TARGET_QUERY = re.compile(r"(\b(?:GET|HEAD|POST|PUT|PATCH|DELETE|OPTIONS) /[^\s?'\"<>]*)\?[^\s'\"<>]*")
# a request id in a path (POST /api/requests/{id}/leave): under requesters
# access it opens its job, as ?request= does
_REQUEST_PATH = re.compile(r"(/api/requests/)[^/\s?'\"<>]+")


def redact(text: str) -> str:
    text = _CREDENTIALS.sub(r"\1***@", text)
    text = _QUERY.sub(r"\1?***", text)
    text = _REQUEST_PATH.sub(r"\1***", text)
    return _TARGET_QUERY.sub(r"\1?***", text)


def fit_to_store(text: str, limit: int) -> str:
    """At most limit characters, each a NUL or a lone surrogate made U+FFFD."""
    return _UNSTORABLE.sub("\ufffd", text[:limit])


def redacted(error: JobError) -> JobError:
    """The same error (class, retry_after) with its code and message fit to store."""
    # str(): a code or message set after the constructor checked them
    error.code = fit_to_store(str(error.code), MAX_CODE)
    error.message = fit_to_store(redact(str(error.message)), MAX_MESSAGE)
    return error


def unexpected(exc: BaseException) -> Transient:
    """An exception no handler raised on purpose: transient (worth retrying), code
    internal_error; the class and text are for admins only."""
    try:
        text = f"{type(exc).__name__}: {exc}"
    except Exception:  # an exception whose __str__ fails: its class must do
        text = f"{type(exc).__name__} (its text could not be read)"
    return Transient(INTERNAL, fit_to_store(redact(text), MAX_MESSAGE))
