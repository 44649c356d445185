"""Admin routes (true states, every attempt, retry and cancel, stats, the live
dashboard feed) and the session cookie a browser uses for them."""

from __future__ import annotations


from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobfeed.worker.states import STATES

from . import auth, streams
from .body import read_json
from .errors import ApiError, dumps, json_text
from .state import services
from .views import decode_cursor, encode_cursor, jobs_page, parse_job_id

MAX_LIMIT = 500


def _admin(request: Request) -> None:
    auth.require_admin(request, services(request).settings.admin_token)


def _limit(value: str | None) -> int:
    if value is None or value == "":
        return 50
    if not value.isdigit() or not 1 <= int(value) <= MAX_LIMIT:
        raise ApiError(422, "invalid_query", f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(value)


async def list_jobs(request: Request) -> Response:
    _admin(request)
    params = request.query_params
    state = params.get("state") or None
    if state is not None and state not in STATES:
        raise ApiError(422, "invalid_query", f"state must be one of {', '.join(STATES)}")
    kind = params.get("kind") or None
    if kind is not None and "\x00" in kind:
        raise ApiError(422, "invalid_query", "kind holds a NUL character")
    limit = _limit(params.get("limit"))
    cursor = params.get("cursor") or None
    before = decode_cursor(cursor) if cursor else None
    jobs = await services(request).queue.admin_list_jobs(state=state, kind=kind, limit=limit, before=before)
    texts = [dumps(job) for job in jobs]
    next_cursor = encode_cursor(texts[-1]) if len(texts) == limit else None
    return json_text(jobs_page(texts, next_cursor))


async def get_job(request: Request) -> Response:
    _admin(request)
    job = await services(request).queue.admin_get_job(parse_job_id(request.path_params["job_id"]))
    if job is None:
        raise ApiError(404, "not_found", "no such job")
    return JSONResponse(job)


async def retry(request: Request) -> Response:
    _admin(request)
    return JSONResponse(await services(request).queue.retry(parse_job_id(request.path_params["job_id"])))


async def cancel(request: Request) -> Response:
    _admin(request)
    return JSONResponse(await services(request).queue.cancel(parse_job_id(request.path_params["job_id"])))


async def stats(request: Request) -> Response:
    _admin(request)
    return JSONResponse(await services(request).queue.stats())


async def events(request: Request) -> Response:
    _admin(request)
    return await streams.admin_stream(request)


def _cookie_path(request: Request) -> str:
    """The session is jobfeed's alone: under a host's prefix, scoped to it."""
    return request.scope.get("root_path", "") + "/"


async def sign_in(request: Request) -> Response:
    """Trade the admin token for an HttpOnly cookie (EventSource cannot send headers)."""
    svc = services(request)
    body = await read_json(request, 4096)
    token = body.get("token") if isinstance(body, dict) else None
    if not isinstance(token, str):
        raise ApiError(422, "invalid_request", 'the body must be {"token": "..."}')
    if not auth.token_matches(token, svc.settings.admin_token):
        raise ApiError(401, "unauthorized", "wrong admin token")
    lifetime = svc.settings.session_lifetime
    response = JSONResponse({"signed_in": True, "expires_in": int(lifetime)})
    # token is the admin token: it just matched
    response.set_cookie(auth.SESSION_COOKIE, auth.session_value(token, lifetime),
                        max_age=int(lifetime), path=_cookie_path(request), httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


async def sign_out(request: Request) -> Response:
    response = Response(status_code=204)
    response.delete_cookie(auth.SESSION_COOKIE, path=_cookie_path(request), httponly=True, samesite="strict")
    return response
