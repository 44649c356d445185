"""Public routes: submit, read, watch a job; list kinds."""

from __future__ import annotations

import dataclasses
import uuid

import asyncpg
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobfeed.worker import tasks, tracing
from jobfeed.worker.startup import DEMO_KIND, load_demo_checks
from jobfeed.worker.queue import Queue, QueueError
from jobfeed.worker.submission import (Schedule, check_notify_url, check_schedule,
                                       check_signal_name, check_submission, parse_after, parse_signals)

from . import access, auth, streams, uploads, waiting
from .body import json_object, read_json
from .errors import ApiError, json_text
from .jobstream import JobStream
from .parse import seconds
from .state import services
from .views import parse_job_id, parse_request_id, with_field, with_flag

_FIELDS = {"kind", "target", "payload", "run_at", "delay", "priority", "concurrency_key", "force", "notify_url",
           "after", "await_signals", "signal_timeout"}
NOT_NULLABLE = {"kind", "target", "payload"}
RETRY_AFTER_TOO_MANY = 10  # seconds; when one of the requester's jobs ends is unknowable


def _force(body) -> bool:
    force = body.get("force", False)
    if not isinstance(force, bool):
        raise ApiError(422, "invalid_request", "force must be true or false")
    return force


def _notify_url(body, hosts: tuple[str, ...]) -> str | None:
    url = body.get("notify_url")
    if url is None:
        return None
    return check_notify_url(url, hosts)


def _fields(body) -> dict:
    """The body's fields, known ones only; an optional field given as null is
    taken as absent (as serializers write a None). Not kind and target, nor
    payload, which the contract wants a JSON object when given."""
    body = json_object(body, _FIELDS, "a JSON object with kind, target and payload")
    return {k: v for k, v in body.items() if v is not None or k in NOT_NULLABLE}


def _check_submission(body: dict) -> tuple[str, str, dict, Schedule]:
    kind, target, payload = check_submission(body.get("kind"), body.get("target"), body.get("payload", {}))
    return kind, target, payload, check_schedule(body.get("run_at"), body.get("delay"), body.get("priority"),
                                                 body.get("concurrency_key"))


async def submit(request: Request) -> Response:
    svc = services(request)
    auth.require_api_token(request, svc.settings.api_token)
    with tracing.span("POST /api/jobs", parent=request.headers.get("traceparent"), server=True):
        if uploads.is_multipart(request.headers.get("content-type")):
            return await uploads.submit_with_files(request, svc)
        return await _submit(request, svc)


@dataclasses.dataclass
class Submitting:
    """A submission's fields, checked."""
    kind: str
    target: str
    payload: dict
    schedule: Schedule
    force: bool
    notify_url: str | None
    after: list
    signals: list[str]
    signal_timeout: float | None


def check_body(body, svc) -> Submitting:
    body = _fields(body)
    kind, target, payload, schedule = _check_submission(body)
    force = _force(body)
    notify_url = _notify_url(body, svc.settings.webhook_hosts)
    after = parse_after(body.get("after", []))
    signals, signal_timeout = parse_signals(body.get("await_signals", []), body.get("signal_timeout"))
    return Submitting(kind, target, payload, schedule, force, notify_url, after, signals, signal_timeout)


async def demo_checks(body, svc) -> None:
    """A demo submission to an API that started before the database had the
    kind: its bounds hold once it has (see load_demo_checks)."""
    if isinstance(body, dict) and body.get("kind") == DEMO_KIND and tasks.registry.get(DEMO_KIND) is None:
        await load_demo_checks(svc.queue)


async def _submit(request: Request, svc) -> Response:
    body = await read_json(request, svc.body_limit)
    await demo_checks(body, svc)
    sub = check_body(body, svc)
    return answer(request, *await write(request, svc, sub))


async def write(request: Request, svc, sub: Submitting, queue: Queue | None = None) -> Answer:
    """Submit: through the group commit, or, given `queue` (on a connection in
    a transaction: an upload's, a traced submission's), on it alone."""
    tracing.annotate({"jobfeed.kind": sub.kind})
    await access.require_after(svc, request, sub.after)
    traceparent = tracing.current_traceparent()  # this request's span: every run of the job joins its trace
    if traceparent and queue is None:
        # The job and its trace context in one transaction: committed apart, a
        # worker could claim the job between them, its first run in no trace.
        async with svc.pool.acquire() as conn, conn.transaction():
            return await write(request, svc, sub, Queue(conn, settings=svc.settings))
    with svc.metrics.submitting() as timed:
        try:
            with tracing.span("jobfeed submit", attributes={"jobfeed.kind": sub.kind}):
                if sub.after or sub.signals:
                    # rare, and it locks its dependencies: outside the group commit, a request all the same
                    job_id, created, text, request_id, reused = await (queue or svc.queue).submit_waiting_json(
                        sub.kind, sub.target, sub.payload, max_payload=svc.settings.max_payload, after=sub.after,
                        await_signals=sub.signals, signal_timeout=sub.signal_timeout, request=True,
                        requester=svc.requester(request), notify_url=sub.notify_url,
                        max_active=svc.settings.max_active_per_requester, force=sub.force, **sub.schedule.kwargs())
                elif queue is not None:
                    job_id, created, text, request_id, reused = await queue.submit_request_json(
                        sub.kind, sub.target, sub.payload, max_payload=svc.settings.max_payload,
                        requester=svc.requester(request), notify_url=sub.notify_url,
                        max_active=svc.settings.max_active_per_requester, force=sub.force,
                        **sub.schedule.kwargs())
                else:
                    job_id, created, text, request_id, reused = await svc.batcher.submit(
                        sub.kind, sub.target, sub.payload, sub.schedule, requester=svc.requester(request),
                        force=sub.force, notify_url=sub.notify_url)
                if traceparent and created:
                    await (queue or svc.queue).set_traceparent(job_id, traceparent)
        except QueueError as exc:
            if exc.code == "too_many_jobs":  # a job of theirs must finish or be left first
                raise ApiError(429, exc.code, exc.message,
                               headers={"Retry-After": str(RETRY_AFTER_TOO_MANY)}) from None
            raise
        except (asyncpg.DataError, asyncpg.ProgramLimitExceededError):
            # e.g. "\u0000" in a string, or nesting deeper than jsonb takes
            raise ApiError(422, "invalid_payload", "payload holds JSON that PostgreSQL cannot store") from None
        timed["kind"] = sub.kind
    return job_id, created, text, request_id, reused


Answer = tuple[uuid.UUID, bool, str, "uuid.UUID | None", bool]


def answer(request: Request, job_id: uuid.UUID, created: bool, text: str, request_id: uuid.UUID | None,
           reused: bool) -> Response:
    text = with_flag(with_flag(text, "deduplicated", not created and not reused), "reused", reused)
    if request_id is not None:
        text = with_field(text, "request_id", str(request_id))
    return json_text(text, 201 if created else 200,
                     headers={"Location": f"{request.scope.get('root_path', '')}/api/jobs/{job_id}"})


async def get_job(request: Request) -> Response:
    job_id = parse_job_id(request.path_params["job_id"])
    svc = services(request)
    seconds = waiting.wait_seconds(request.query_params.get("wait"))
    await access.require_view(svc, request, job_id)
    if seconds:
        text = await waiting.wait_for_final(svc, job_id, seconds)
    else:
        text = await svc.queue.get_job_json(job_id)
    if text is None:
        raise ApiError(404, "not_found", "no such job")
    return json_text(text)


async def leave_request(request: Request) -> Response:
    """DELETE /api/requests/{id} and POST .../leave (a closing page's sendBeacon):
    at once, or with ?grace= later unless the request stays first (stay_request);
    the answer then says when (leave_at, null when it has left, or its job is final)."""
    request_id = parse_request_id(request.path_params["request_id"])
    svc = services(request)
    grace = request.query_params.get("grace")
    if grace is None:
        text = await svc.queue.leave_json(request_id)  # QueueError not_found -> 404
        return json_text('{"job": ' + text + "}")
    # the queue caps it by JOBFEED_LEAVE_GRACE: a page closed for good is let go in that time
    text, leave_at = await svc.queue.leave_later_json(request_id, seconds(grace, "grace"))
    return json_text(with_field('{"job": ' + text + "}", "leave_at", leave_at and leave_at.isoformat()))


async def stay_request(request: Request) -> Response:
    """POST /api/requests/{id}/stay: a deferred leave is called off (the page
    that asked for it came back: a reload, Back); called_off says whether one
    was pending; 409 when it was applied."""
    request_id = parse_request_id(request.path_params["request_id"])
    text, called_off = await services(request).queue.stay_json(request_id)  # not_found 404, request_left 409
    return json_text(with_flag('{"job": ' + text + "}", "called_off", called_off))


async def job_events(request: Request) -> Response | JobStream:
    job_id = parse_job_id(request.path_params["job_id"])
    await access.require_view(services(request), request, job_id)
    return await streams.job_stream(request, job_id)


async def list_kinds(request: Request) -> Response:
    return JSONResponse({"kinds": await services(request).queue.list_kinds()})


async def signal(request: Request) -> Response:
    """Deliver a signal: the API token when one is set, else admin rights."""
    svc = services(request)
    if svc.settings.api_token is not None:
        auth.require_api_token(request, svc.settings.api_token)
    else:
        await auth.require_admin(request, svc.settings.admin_token, svc.pool)
    job_id = parse_job_id(request.path_params["job_id"])
    name = check_signal_name(request.path_params["name"])
    data = await read_json(request, svc.body_limit) if await _has_body(request) else None
    first, text = await svc.queue.signal_json(job_id, name, data)  # QueueError invalid_payload: a 422
    return json_text(with_flag(text, "first", first))


async def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return length != "0" if length is not None else "transfer-encoding" in request.headers
