"""What the queue's calls answer: a claimed job, its claim's timings, a
submission's outcome."""

from __future__ import annotations

import dataclasses
import datetime as dt
import uuid
from typing import Any, NamedTuple


@dataclasses.dataclass(frozen=True, slots=True)
class Job:
    """A job as a worker holds it (and its handler sees it): every write about
    it names (id, generation)."""
    id: uuid.UUID
    kind: str
    target: str
    payload: dict
    attempt: int          # this claim's attempt number (releases are not counted)
    max_attempts: int
    generation: int       # grows on every claim: run n of the job
    lease_until: dt.datetime
    checkpoint: Any       # what an earlier attempt saved with ctx.checkpoint, or None
    lease: float | None = None  # seconds: the lease the claim granted (the heartbeat's pace)
    signals: dict | None = None  # the signals it awaited: name -> data (None: it awaited none)
    # what its latest ctx.wait_for waited for, in that order: {id, kind, target,
    # status, result, error} each (None: it never waited)
    children: list | None = None


class ClaimTimes(NamedTuple):
    """What the database says of a job it just handed out, for the worker's
    metrics and spans: seconds it waited once due and since it was submitted,
    by the database's clock, and its submitter's trace context."""
    id: uuid.UUID
    kind: str
    generation: int
    wait: float
    age: float
    traceparent: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Submission:
    """What a submission got: the job's id, whether this call made it (False: an
    unfinished job already held the target, and the caller shares it), whether
    it is a completed job reused, and the request's id (None unless one was
    recorded: Queue.submit records one only when asked)."""
    id: uuid.UUID
    created: bool
    reused: bool = False
    request_id: uuid.UUID | None = None

    # `job_id, created = await queue.submit(...)` (and [0], [1]) keep working as before.
    def __iter__(self):
        return iter((self.id, self.created))

    def __getitem__(self, index):
        return (self.id, self.created)[index]

    def __len__(self) -> int:
        return 2
