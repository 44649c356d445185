"""How a handler says an attempt ended: raise Transient / Permanent / Release
(a JobError), Abandon, or return ctx.wait_for(ids); LeaseLost tells it the
job is no longer its own."""

from __future__ import annotations

import uuid
from typing import Sequence

from .settings import MAX_DURATION


class JobError(Exception):
    """An attempt ended without a result. `code` is short and stable (shown to
    admins, and to users once the job has finally failed)."""

    # retry_after may be given by position too: the contract reads "code, message, optional retry_after"
    def __init__(self, code: str, message: str = "", retry_after: float | None = None):
        # refused here, in the handler's traceback: as stored, a number or None would
        # be a code no filter finds
        if not isinstance(code, str) or not isinstance(message, str):
            raise TypeError(f"a job error's code and message are strings, not {code!r} and {message!r}"[:300])
        super().__init__(message or code)
        self.code = code
        self.message = message or code
        self.retry_after = _delay(retry_after)


def _delay(seconds: object) -> float | None:
    """retry_after as seconds a job's run_after can hold: from 0 to
    MAX_DURATION (an upstream's Retry-After may say anything); NaN is none."""
    if seconds is None:
        return None
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise TypeError(f"retry_after is seconds (a number), not {seconds!r}")
    if seconds != seconds:
        return None
    return min(max(float(seconds), 0.0), MAX_DURATION)


class Transient(JobError):
    """Passing trouble (5xx, 429, timeout, network): try again after the backoff."""


class Permanent(JobError):
    """Will never work (404 and the like): fail now."""


class Release(JobError):
    """Not the job's fault (our time budget, our own credentials): put it back
    without counting the attempt; retry_after seconds from now."""


class Abandon(Exception):
    """The handler walked away from the job, as a dead worker would: record
    nothing; the job is reclaimed once its lease expires."""


class LeaseLost(Exception):
    """The job is no longer ours (reclaimed after an expired lease, or canceled).
    Stop working on it; nothing more about it will be recorded."""


class WaitFor:
    """What `ctx.wait_for(ids)` makes: returned by a handler, the job waits
    (true state 'waiting') until every job named is final, then runs again
    with them in job.children."""
    __slots__ = ("ids",)

    def __init__(self, ids: Sequence[uuid.UUID]):
        self.ids = tuple(ids)

    def __repr__(self) -> str:
        return f"WaitFor({len(self.ids)} jobs)"
