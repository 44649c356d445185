"""Writing one attempt's outcome, other than a plain completion (those go in
batches: worker/completions.py): a failure, a release, a wait_for, or a
completion with the children its handler submitted."""

from __future__ import annotations

import functools
import logging
import time
from typing import Any, Sequence

from .queue import Job, Queue
from .queue_calls import UNSTORABLE
from .retrying import retrying
from .tasks import Permanent, Release

log = logging.getLogger("jobfeed.worker")


async def record_outcome(queue: Queue, job: Job, what: str, value: Any, lease: float,
                         planned: Sequence[dict] = ()) -> None:
    """Write an attempt's outcome; its planned children (ctx.submit) go only
    with a completion or a wait_for, in the same fenced call."""
    q, ident = queue, (job.id, job.generation)
    if what in ("lost", "abandoned"):
        log.info("job %s gen %d: %s, nothing recorded", job.id, job.generation,
                 "lease lost" if what == "lost" else "abandoned by its handler")
        return
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
    try:
        ok = await retrying(call, until=until, what=f"write job {job.id}'s {what}")
    except UNSTORABLE as exc:  # the result PostgreSQL refused, as Completions does
        if what != "spawn":
            raise
        log.warning("job %s: its result cannot be stored (%s)", job.id, exc)
        ok = await retrying(functools.partial(q.fail_unstorable, *ident, exc),
                            until=until, what=f"write job {job.id}'s failure")
    if not ok:
        log.info("job %s gen %d: lease lost before its outcome (%s) was recorded", job.id, job.generation, what)
