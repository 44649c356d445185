"""Public routes: submit, read, watch a job; list kinds."""

from __future__ import annotations

import asyncpg
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from jobfeed.worker import tracing
from jobfeed.worker.submission import InvalidSubmission, Schedule, check_schedule, check_submission

from . import auth, streams
from .body import read_json
from .errors import ApiError, json_text
from .state import services
from .views import parse_job_id, with_flag

_FIELDS = {"kind", "target", "payload", "run_at", "delay", "priority", "concurrency_key"}


def _check_submission(body) -> tuple[str, str, dict, Schedule]:
    if not isinstance(body, dict):
        raise ApiError(422, "invalid_request", "the body must be a JSON object with kind, target and payload")
    unknown = sorted(set(body) - _FIELDS)
    if unknown:
        raise ApiError(422, "invalid_request", f"unknown field(s): {', '.join(unknown)}")
    try:
        kind, target, payload = check_submission(body.get("kind"), body.get("target"), body.get("payload", {}))
        return kind, target, payload, check_schedule(body.get("run_at"), body.get("delay"), body.get("priority"),
                                                     body.get("concurrency_key"))
    except InvalidSubmission as exc:
        raise ApiError(exc.status, exc.code, exc.message) from None


async def submit(request: Request) -> Response:
    svc = services(request)
    auth.require_api_token(request, svc.settings.api_token)
    with tracing.span("POST /api/jobs", parent=request.headers.get("traceparent"), server=True):
        return await _submit(request, svc)


async def _submit(request: Request, svc) -> Response:
    kind, target, payload, schedule = _check_submission(await read_json(request, svc.body_limit))
    tracing.annotate({"jobfeed.kind": kind})
    traceparent = tracing.current_traceparent()  # this request's span: every run of the job joins its trace
    with svc.metrics.submitting() as timed:
        try:
            with tracing.span("jobfeed submit", attributes={"jobfeed.kind": kind}):
                job_id, created, text = await svc.batcher.submit(kind, target, payload, schedule)
                if traceparent and created:
                    await svc.queue.set_traceparent(job_id, traceparent)
        except (asyncpg.DataError, asyncpg.ProgramLimitExceededError):
            # e.g. "\u0000" in a string, or nesting deeper than jsonb takes
            raise ApiError(422, "invalid_payload", "payload holds JSON that PostgreSQL cannot store") from None
        timed["kind"] = kind
    return json_text(with_flag(text, "deduplicated", not created), 201 if created else 200,
                     headers={"Location": f"{request.scope.get('root_path', '')}/api/jobs/{job_id}"})


async def get_job(request: Request) -> Response:
    job_id = parse_job_id(request.path_params["job_id"])
    text = await services(request).queue.get_job_json(job_id)
    if text is None:
        raise ApiError(404, "not_found", "no such job")
    return json_text(text)


async def job_events(request: Request) -> Response:
    return await streams.job_stream(request, parse_job_id(request.path_params["job_id"]))


async def list_kinds(request: Request) -> Response:
    return JSONResponse({"kinds": await services(request).queue.list_kinds()})
