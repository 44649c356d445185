"""Writing one attempt's outcome, other than a plain completion (those go in
batches: worker/completions.py): a failure, a release, a wait_for, or a
completion with the children its handler submitted."""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Sequence

from . import metrics
from .queue import Job, Queue
from .queue_calls import UNSTORABLE, UNSTORABLE_CODE
from .retrying import retrying
from .tasks import JobError, Permanent, Release, TaskSpec, Transient

log = logging.getLogger("jobfeed.worker")

Outcome = tuple[str, Any]  # ("done" | "spawn" | "wait" | "error" | "lost" | "abandoned", result or error)
LOST: Outcome = ("lost", None)


def outcome_label(job: Job, outcome: Outcome) -> tuple[str, str]:
    """(the metrics' outcome label, the error's code or "")."""
    what, error = outcome
    code = error.code if isinstance(error, JobError) else ""
    if what in ("done", "spawn"):
        return metrics.COMPLETED, code
    if what == "wait":
        return metrics.WAITING, code
    if what in ("lost", "abandoned"):
        return (metrics.LOST if what == "lost" else metrics.ABANDONED), code
    if isinstance(error, Permanent):
        return metrics.FAILED, code
    if isinstance(error, Release):
        return metrics.RELEASED, code
    return (metrics.FAILED if job.attempt >= job.max_attempts else metrics.RETRIED), code


def as_raised(error: JobError, spec: TaskSpec) -> JobError:
    """A handler's Release without retry_after is due again after the kind's
    first backoff delay: at once, the worker that released it would claim it
    straight back, for ever (a release is not counted)."""
    if isinstance(error, Release) and error.retry_after is None and spec.backoff:
        error.retry_after = spec.backoff[0]
    return error


async def record_outcome(queue: Queue, job: Job, what: str, value: Any, lease: float,
                         planned: Sequence[dict] = ()) -> Outcome:
    """Write an attempt's outcome; its planned children (ctx.submit) go only
    with a completion or a wait_for, in the same fenced call. -> the outcome
    as written: LOST when the lease was lost first."""
    q, ident = queue, (job.id, job.generation)
    if what in ("lost", "abandoned"):
        log.info("job %s gen %d: %s, nothing recorded", job.id, job.generation,
                 "lease lost" if what == "lost" else "abandoned by its handler")
        return what, value
    if what == "wait":
        call = lambda: q.wait_for(*ident, planned, value.ids)  # noqa: E731
    elif what == "spawn":
        call = lambda: q.complete_spawning(*ident, value, planned)  # noqa: E731
    elif isinstance(value, Permanent):
        call = lambda: q.fail_permanent(*ident, value.code, value.message)  # noqa: E731
    elif isinstance(value, Release):
        call = lambda: q.release(*ident, value.code, value.retry_after or 0, value.message)  # noqa: E731
    else:
        call = lambda: q.fail_transient(*ident, value.code, value.message, value.retry_after)  # noqa: E731
    # Fenced, so repeating it after a passing error is safe (see worker/completions.py).
    until = time.monotonic() + lease + 1.0
    written: Outcome = (what, value)
    try:
        ok = await retrying(call, until=until, what=f"write job {job.id}'s {what}")
    except UNSTORABLE as exc:  # the result PostgreSQL refused, as Completions does
        if what != "spawn":
            raise
        log.warning("job %s: its result cannot be stored (%s)", job.id, exc)
        ok = await retrying(functools.partial(q.fail_unstorable, *ident, exc),
                            until=until, what=f"write job {job.id}'s failure")
        written = ("error", Transient(UNSTORABLE_CODE, str(exc)))
    if not ok:
        log.info("job %s gen %d: lease lost before its outcome (%s) was recorded", job.id, job.generation, what)
        return LOST
    return written
