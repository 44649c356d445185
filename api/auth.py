"""Tokens: the admin token (header or session cookie) and the optional API token
for submissions. Compared in constant time; never logged, never stored in the
cookie (it holds an expiry signed with the token)."""

from __future__ import annotations

import hashlib
import hmac
import time

from starlette.requests import Request

from .errors import ApiError

SESSION_COOKIE = "jobfeed_admin"
_SESSION_PURPOSE = b"jobfeed admin session:"


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def _signature(token: str, expires: int) -> str:
    return hmac.new(token.encode("utf-8"), _SESSION_PURPOSE + str(expires).encode(), hashlib.sha256).hexdigest()


def session_value(token: str, lifetime: float, now: float | None = None) -> str:
    """'expiry.signature': proves the holder knew the token, without containing it.
    Changing the admin token signs every session out."""
    expires = int((now or time.time()) + lifetime)
    return f"{expires}.{_signature(token, expires)}"


def _valid_session(value: str, token: str, now: float | None = None) -> bool:
    expires_text, _, signature = value.partition(".")
    if not expires_text.isdigit() or int(expires_text) < (now or time.time()):
        return False
    return _same(signature, _signature(token, int(expires_text)))


def token_matches(given: str, token: str | None) -> bool:
    return token is not None and _same(given, token)


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="jobfeed"'}


def require_admin(request: Request, token: str | None) -> None:
    """Let the request through with the admin token (Bearer) or a valid session
    cookie. With no admin token configured, admin routes stay closed."""
    if token is None:
        raise ApiError(401, "unauthorized",
                       "admin access is disabled: no admin token is configured (set JOBFEED_ADMIN_TOKEN)",
                       _CHALLENGE)
    given = _bearer(request)
    if given is not None:
        if _same(given, token):
            return
    else:
        cookie = request.cookies.get(SESSION_COOKIE)
        if cookie and _valid_session(cookie, token):
            return
    raise ApiError(401, "unauthorized", "a valid admin token or session is required", _CHALLENGE)


def require_api_token(request: Request, token: str | None) -> None:
    """Submissions are open unless an API token is configured."""
    if token is None:
        return
    given = _bearer(request)
    if given is None or not _same(given, token):
        raise ApiError(401, "unauthorized", "a valid API token is required to submit jobs", _CHALLENGE)
