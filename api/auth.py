"""Tokens: the admin token (header or session cookie) and the optional API token
for submissions. Compared in constant time; never logged, never stored in the
cookie.

The session cookie is 'session id.expiry.signature', signed with the admin
token (changing the token signs every session out). The id names a row the
server keeps (sql/functions/80_sessions.sql), so signing out revokes the cookie
in every API process. Cookie-authenticated writes must come from the server's
own origin (CSRF: SameSite does not separate ports)."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid

from starlette.requests import Request

from jobfeed.worker import sql
from jobfeed.worker.settings import MIN_ADMIN_TOKEN

from .errors import ApiError
from .parse import digits

SESSION_COOKIE = "jobfeed_admin"
# Over https: a __Host- cookie is Secure, host-only and Path=/, so a sibling
# subdomain or a plain-http page cannot plant or overwrite it. Under a host's
# prefix (Path=/prefix/) browsers refuse a __Host- one: __Secure- (Secure, and
# so never planted by a plain-http page) is the most they take there.
SECURE_SESSION_COOKIE = "__Host-jobfeed_admin"
PREFIXED_SECURE_SESSION_COOKIE = "__Secure-jobfeed_admin"
_SESSION_PURPOSE = b"jobfeed admin session:"
_WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _same(given: str, expected: str) -> bool:
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8"))


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def cookie_name(request: Request) -> str:
    if request.url.scheme != "https":
        return SESSION_COOKIE
    return PREFIXED_SECURE_SESSION_COOKIE if request.scope.get("root_path") else SECURE_SESSION_COOKIE


def cookie_path(request: Request) -> str:
    """The session is jobfeed's alone: under a host's prefix, scoped to it."""
    return request.scope.get("root_path", "") + "/"


def _signature(token: str, session_id: str, expires: int) -> str:
    message = _SESSION_PURPOSE + f"{session_id}.{expires}".encode()
    return hmac.new(token.encode("utf-8"), message, hashlib.sha256).hexdigest()


def session_value(token: str, session_id: uuid.UUID | str, lifetime: float, now: float | None = None) -> str:
    """'id.expiry.signature': proves the holder signed in, without containing the token."""
    expires = int((now or time.time()) + lifetime)
    return f"{session_id}.{expires}.{_signature(token, str(session_id), expires)}"


def session_id(value: str, token: str, now: float | None = None) -> uuid.UUID | None:
    """The session a cookie names, when its signature holds and it has not
    expired; None for anything else (never an exception: the value is the
    client's)."""
    if len(value) > 200:
        return None
    id_text, expires_text, signature = (value.split(".") + ["", ""])[:3]
    expires = digits(expires_text, 12)
    if expires is None or expires < (now or time.time()) or len(id_text) != 36:
        return None
    try:
        sid = uuid.UUID(id_text)
    except ValueError:
        return None
    if not _same(signature, _signature(token, id_text, expires)):
        return None
    return sid


def token_matches(given: str, token: str | None) -> bool:
    """An empty or short token never matches, whatever is configured."""
    return token is not None and len(token) >= MIN_ADMIN_TOKEN and len(given) >= MIN_ADMIN_TOKEN \
        and _same(given, token)


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="jobfeed"'}


def own_origin(request: Request) -> str:
    host = request.headers.get("host") or (request.url.netloc if request.url.netloc else "")
    return f"{request.url.scheme}://{host}"


def check_same_origin(request: Request) -> None:
    """A cookie rides along on any request the browser makes, whichever page
    made it: a write must show it came from our own pages."""
    # every copy of a header must agree: a second one may be the foreign one
    origins = request.headers.getlist("origin")
    if origins:
        if set(origins) == {own_origin(request)}:
            return
    elif set(request.headers.getlist("sec-fetch-site")) == {"same-origin"}:
        return
    raise ApiError(403, "csrf", "a signed-in write must come from this server's own pages (Origin mismatch)")


ADMIN_DISABLED = "admin access is disabled: no admin token is configured (set JOBFEED_ADMIN_TOKEN)"


async def open_session(pool, lifetime: float) -> uuid.UUID:
    return await pool.fetchval(sql.query("open_admin_session"), float(lifetime))


async def session_live(pool, sid: uuid.UUID) -> bool:
    """Neither signed out (in any API process) nor expired."""
    return bool(await pool.fetchval(sql.query("admin_session_valid"), sid))


async def close_session(pool, sid: uuid.UUID) -> None:
    await pool.fetchval(sql.query("close_admin_session"), sid)


async def require_admin(request: Request, token: str | None, pool) -> uuid.UUID | None:
    """Let the request through with the admin token (Bearer) or a live session
    cookie (writes from our own origin only); answers the session, None for the
    token. With no admin token configured, admin routes stay closed."""
    if token is None:
        raise ApiError(401, "unauthorized", ADMIN_DISABLED, _CHALLENGE)
    given = _bearer(request)
    if given is not None:
        if token_matches(given, token):
            return None
    else:
        cookie = request.cookies.get(cookie_name(request))
        if cookie:
            if request.method in _WRITES:
                check_same_origin(request)
            sid = session_id(cookie, token)
            if sid is not None and await session_live(pool, sid):
                return sid
    raise ApiError(401, "unauthorized", "a valid admin token or session is required", _CHALLENGE)


async def is_admin(request: Request, token: str | None, pool) -> bool:
    """require_admin as a question: False where it would answer 401."""
    try:
        await require_admin(request, token, pool)
    except ApiError as exc:
        if exc.status != 401:
            raise
        return False
    return True


def bearer_matches(request: Request, token: str) -> bool:
    given = _bearer(request)
    return given is not None and _same(given, token)


def require_api_token(request: Request, token: str | None) -> None:
    """Submissions are open unless an API token is configured."""
    if token is None:
        return
    given = _bearer(request)
    if given is None or not _same(given, token):
        raise ApiError(401, "unauthorized", "a valid API token (JOBFEED_API_TOKEN) is required", _CHALLENGE)
