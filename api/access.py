"""Who may see a job (JOBFEED_JOB_ACCESS). `link`: anyone who has its id.
`requesters`: only those who requested it, by identity or by presenting one
of its request ids (X-Jobfeed-Request, or ?request= where headers cannot be
sent, as by EventSource), and admins. Anyone else gets 404, never 403: a
private job's existence is not revealed."""

from __future__ import annotations

import uuid

from starlette.requests import Request

from . import auth
from .errors import ApiError
from .state import Services


def presented_request(request: Request) -> uuid.UUID | None:
    value = request.headers.get("x-jobfeed-request") or request.query_params.get("request")
    if not value or len(value) > 64:
        return None
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


async def require_view(svc: Services, request: Request, job_id: uuid.UUID) -> None:
    """Raise 404 unless this caller may see the job: one of its requesters, or
    an admin (who sees every job in the admin views anyway, and has no other
    way to download its outputs)."""
    if svc.settings.job_access == "requesters" and await _hidden(svc, request, [job_id]):
        raise ApiError(404, "not_found", "no such job")


async def require_after(svc: Services, request: Request, ids: list[uuid.UUID]) -> None:
    """A submission's `after` may name only jobs its sender may see: waiting
    for a private job would tell whether it exists and how it ended. One it
    may not see is refused as no job at all, as the database refuses an id
    that is no job."""
    if svc.settings.job_access == "requesters" and ids and (hidden := await _hidden(svc, request, ids)):
        raise ApiError(422, "unknown_dependency", f"no such job: {', '.join(map(str, hidden))}")


async def _hidden(svc: Services, request: Request, ids: list[uuid.UUID]) -> list[uuid.UUID]:
    """Those of `ids` this caller may not see (none for an admin)."""
    requester = svc.requester(request)
    presented = presented_request(request)
    hidden = [job_id for job_id in ids if (requester is None and presented is None)
              or not await svc.queue.may_view(job_id, requester, presented)]
    if hidden and await auth.is_admin(request, svc.settings.admin_token, svc.pool):
        return []
    return hidden
