"""Admin routes (true states, every attempt, retry and cancel, stats, the live
dashboard feed) and the session cookie a browser uses for them."""

from __future__ import annotations

import datetime as dt
import uuid

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobfeed.worker.schedules import with_slots
from jobfeed.worker.states import STATES
from jobfeed.worker.submission import storable

from . import auth, streams
from .body import json_object, read_json
from .errors import ApiError, dumps, json_text
from .parse import digits
from .state import services
from .views import decode_cursor, encode_cursor, jobs_page, parse_job_id

MAX_LIMIT = 500


async def _admin(request: Request) -> None:
    svc = services(request)
    await auth.require_admin(request, svc.settings.admin_token, svc.pool)


def _limit(value: str | None) -> int:
    if value is None or value == "":
        return 50
    limit = digits(value, 6)
    if limit is None or not 1 <= limit <= MAX_LIMIT:
        raise ApiError(422, "invalid_query", f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return limit


# A filter the list does not know is refused, not dropped: an admin trying the
# bulk actions' error_code here would otherwise be shown every job.
LIST_PARAMS = ("state", "kind", "limit", "cursor")


async def list_jobs(request: Request) -> Response:
    await _admin(request)
    params = request.query_params
    for key in params.keys():
        if key not in LIST_PARAMS:
            raise ApiError(422, "invalid_query",
                           f"unknown query parameter {key!r}; the list takes {', '.join(LIST_PARAMS)}")
        if len(params.getlist(key)) > 1:
            raise ApiError(422, "invalid_query", f"{key} given more than once")
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
    await _admin(request)
    job = await services(request).queue.admin_get_job(parse_job_id(request.path_params["job_id"]))
    if job is None:
        raise ApiError(404, "not_found", "no such job")
    return JSONResponse(job)


async def retry(request: Request) -> Response:
    await _admin(request)
    return JSONResponse(await services(request).queue.retry(parse_job_id(request.path_params["job_id"])))


async def cancel(request: Request) -> Response:
    await _admin(request)
    return JSONResponse(await services(request).queue.cancel(parse_job_id(request.path_params["job_id"])))


# The dashboard reloads stats a second after the changes it hears of: a snapshot
# at most that old already holds them. (/metrics takes the default 5 s.) Either
# way the table is counted at most once per max_age, whoever asks.
DASHBOARD_STATS_AGE = 1.0


async def stats(request: Request) -> Response:
    await _admin(request)
    return JSONResponse(await services(request).queue.stats(max_age=DASHBOARD_STATS_AGE))


async def workers(request: Request) -> Response:
    await _admin(request)
    return JSONResponse({"workers": await services(request).queue.list_workers()})


async def charts(request: Request) -> Response:
    await _admin(request)
    return JSONResponse(await services(request).queue.charts())


async def events(request: Request) -> Response:
    svc = services(request)
    session = await auth.require_admin(request, svc.settings.admin_token, svc.pool)
    return await streams.admin_stream(request, session)


async def session(request: Request) -> Response:
    """Whether this request has admin rights: the dashboard asks before it
    shows the sign-in form, without a 401 in the browser's console."""
    svc = services(request)
    return JSONResponse({"signed_in": await auth.is_admin(request, svc.settings.admin_token, svc.pool)})


async def sign_in(request: Request) -> Response:
    """Trade the admin token for an HttpOnly cookie (EventSource cannot send headers)."""
    svc = services(request)
    token = json_object(await read_json(request, 4096), {"token"}, '{"token": "..."}').get("token")
    if not isinstance(token, str):
        raise ApiError(422, "invalid_request", 'the body must be {"token": "..."}')
    if svc.settings.admin_token is None:
        raise ApiError(401, "unauthorized", auth.ADMIN_DISABLED)
    if not auth.token_matches(token, svc.settings.admin_token):
        raise ApiError(401, "unauthorized", "wrong admin token")
    lifetime = svc.settings.session_lifetime
    sid = await auth.open_session(svc.pool, lifetime)
    response = JSONResponse({"signed_in": True, "expires_in": int(lifetime)})
    # token is the admin token: it just matched
    response.set_cookie(auth.cookie_name(request), auth.session_value(token, sid, lifetime),
                        max_age=int(lifetime), path=auth.cookie_path(request), httponly=True, samesite="strict",
                        secure=request.url.scheme == "https")
    return response


async def sign_out(request: Request) -> Response:
    """Revoke the session the cookie names (in every API process: the server
    keeps it), then drop the cookie."""
    svc = services(request)
    name = auth.cookie_name(request)
    cookie = request.cookies.get(name)
    if cookie:
        auth.check_same_origin(request)
        sid = auth.session_id(cookie, svc.settings.admin_token) if svc.settings.admin_token else None
        if sid is not None:
            await auth.close_session(svc.pool, sid)
    response = Response(status_code=204)
    response.delete_cookie(name, path=auth.cookie_path(request), httponly=True, samesite="strict",
                           secure=request.url.scheme == "https")
    return response


async def _kind_paused(request: Request, paused: bool) -> Response:
    await _admin(request)
    kind = request.path_params["kind"]
    if "\x00" in kind:
        raise ApiError(404, "not_found", "no such kind")
    return JSONResponse(await services(request).queue.set_kind_paused(kind, paused))


async def pause_kind(request: Request) -> Response:
    return await _kind_paused(request, True)


async def resume_kind(request: Request) -> Response:
    return await _kind_paused(request, False)


_BULK_FIELDS = {"state", "kind", "error_code", "ids"}
MAX_BULK_IDS = 10_000


def _bulk_filter(body) -> dict:
    """{"state"?, "kind"?, "error_code"?, "ids"?} -> Queue.bulk's filter; an
    empty one is refused (it would touch every job)."""
    body = json_object(body, _BULK_FIELDS, "a JSON object")
    found = {k: v for k, v in body.items() if v is not None}
    if not found:
        raise ApiError(422, "filter_required", "name at least one of state, kind, error_code or ids")
    state = found.get("state")
    if state is not None and state not in STATES:
        raise ApiError(422, "invalid_request", f"state must be one of {', '.join(STATES)}")
    for name in ("kind", "error_code"):
        value = found.get(name)
        if value is not None and (not isinstance(value, str) or not value or not storable(value)):
            raise ApiError(422, "invalid_request", f"{name} must be a non-empty string")
    ids = found.get("ids")
    if ids is not None:
        if not isinstance(ids, list) or len(ids) > MAX_BULK_IDS:
            raise ApiError(422, "invalid_request", f"ids must be a list of at most {MAX_BULK_IDS} job ids")
        try:
            ids = [uuid.UUID(i) for i in ids]
        except (TypeError, ValueError, AttributeError):
            raise ApiError(422, "invalid_request", "ids must be job ids") from None
    return {"state": state, "kind": found.get("kind"), "error_code": found.get("error_code"), "ids": ids}


async def _bulk(request: Request, action: str) -> Response:
    await _admin(request)
    svc = services(request)
    # no body is the empty filter: 422 filter_required, not a JSON error
    where = _bulk_filter(await read_json(request, 1 << 20, if_empty={}))
    changed, skipped = await svc.queue.bulk_outcome(action, **where)
    # "skipped" only when some were: the contract's answer is {"count": N}
    return JSONResponse({"count": changed, "skipped": skipped} if skipped else {"count": changed})


async def bulk_retry(request: Request) -> Response:
    return await _bulk(request, "retry")


async def bulk_cancel(request: Request) -> Response:
    return await _bulk(request, "cancel")


async def schedules(request: Request) -> Response:
    """Periodic kinds with their last slot (and its job) and their next slot."""
    await _admin(request)
    now = dt.datetime.now(dt.timezone.utc)
    rows = await services(request).queue.list_schedules()
    for row in rows:
        with_slots(row, now)
    return JSONResponse({"schedules": rows})
