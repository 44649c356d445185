"""The handler's HTTP helpers: an upstream's answer, or httpx's errors, as the
JobError it calls for (README, "Writing handlers")."""

from __future__ import annotations

import contextlib
import time
from typing import Iterator

import httpx

from .http_dates import http_date
from .job_errors import Permanent, Release, Transient
from .redact import redact

_PERMANENT_STATUS = {404, 410, 422}
_RELEASE_STATUS = {401, 403}


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Retry-After as seconds: delay-seconds (RFC 9110: digits only, so no
    "-1", "5.5", "1e3" or "nan") or an HTTP-date (worker/http_dates.py); anything
    else as if not sent."""
    value = response.headers.get("retry-after")
    if not value:
        return None
    if value.isascii() and value.isdigit():
        return float(value)  # JobError bounds it above (float: 5,000 digits are inf, not an error)
    now = time.time()
    when = http_date(value, now)
    return None if when is None else max(when - now, 0.0)  # neither seconds nor a date: as if not sent


def check_response(response: httpx.Response) -> httpx.Response:
    """Raise the JobError an upstream answer calls for: 5xx, 429 and 408 (a
    timeout) transient (honouring Retry-After), 404/410/422 and other 4xx permanent, 401/403 release
    (our own credentials are at fault, not the job)."""
    status = response.status_code
    if status < 400:
        return response
    code = f"http_{status}"
    # without the URL's credentials and query string (API keys travel there),
    # also in the exception a handler may log itself
    message = redact(f"{response.request.method} {response.request.url} answered {status}")
    if status >= 500 or status in (429, 408):
        raise Transient(code, message, retry_after=retry_after_seconds(response))
    if status in _RELEASE_STATUS:
        after = retry_after_seconds(response)  # Retry-After: 0 is at once; none is 60 s
        raise Release(code, message, retry_after=60 if after is None else after)
    raise Permanent(code, message)


@contextlib.contextmanager
def http_errors() -> Iterator[None]:
    """Turn httpx's timeouts and network errors into Transient, and error
    statuses raised by response.raise_for_status() into the right JobError."""
    try:
        yield
    except httpx.HTTPStatusError as exc:
        check_response(exc.response)
        raise
    except httpx.TimeoutException as exc:
        raise Transient("timeout", _failed(exc)) from exc
    except httpx.TransportError as exc:
        raise Transient("network_error", _failed(exc)) from exc


def _failed(exc: httpx.TransportError) -> str:
    """'GET https://host/path failed: what went wrong', the URL redacted as in
    check_response; the request is left out when httpx has none to give."""
    what = str(exc) or type(exc).__name__
    try:
        request = exc.request
    except RuntimeError:  # raised outside a request (a transport used on its own)
        return redact(what)
    return redact(f"{request.method} {request.url} failed: {what}")
