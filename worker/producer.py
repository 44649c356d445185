"""What Queue.submit and Queue.submit_many check before the database, so that a
producer's refusal is a QueueError as over HTTP: the kind and target, the
payload and the kind's own validate() (when this process has loaded the kind),
a batch's items, a run_after already past (due now, queued as a job submitted
now), too far ahead, naive or no datetime, the priority, the concurrency key,
the requester, the flags, the waiting fields, a notify_url's host, a signal's name, and (queue_calls.
payload_text) a payload JSON or jsonb cannot hold. The database checks the
rest (whether the kind exists, the payload's size); anything else it cannot
store is refused as `invalid_input` instead of asyncpg's own errors."""

from __future__ import annotations

import datetime as dt
import math
import uuid
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet

import asyncpg

from .queue_calls import UNSTORABLE, QueueError

# .submission and .tasks are imported where used: tasks imports the queue,
# which imports this module.

REFUSED = UNSTORABLE + (asyncpg.CheckViolationError,)


def refused(exc: Exception) -> QueueError:
    """What the database would not store, said as a refusal."""
    return QueueError("invalid_input", f"PostgreSQL cannot store it: {exc}", 422)


def _queue_error(exc) -> QueueError:
    """An InvalidSubmission (worker/submission.py) as the queue's refusal."""
    return QueueError(exc.code, exc.message, exc.status)


def submission(kind: str, target: str, payload: dict | None) -> None:
    """kind, target and payload (None: {}) as POST /api/jobs checks them, the
    kind's validate() included."""
    _as_over_http("check_submission", kind, target, {} if payload is None else payload)


def batch(kind: str, items: Sequence[tuple[str, dict | None]]) -> None:
    """submit_many's kind, then each item: a (target, payload) pair checked as
    submission() checks one, its refusal naming the item as the database's
    batch checks do (item 1 is the first)."""
    from .submission import InvalidSubmission, check_payload, check_target, run_validate
    from .tasks import registry

    _as_over_http("check_kind", kind)
    spec = registry.get(kind)
    validate = None if spec is None else spec.validate
    for n, item in enumerate(items, 1):
        try:
            if not isinstance(item, (tuple, list)) or len(item) != 2:
                raise InvalidSubmission(422, "invalid_request", "each item must be a (target, payload) pair")
            check_target(item[0])
            payload = {} if item[1] is None else check_payload(item[1])
            if validate is not None:
                run_validate(kind, validate, payload)
        except InvalidSubmission as exc:
            raise QueueError(exc.code, f"item {n}: {exc.message}", exc.status) from None


def _as_over_http(rule: str, *args):
    """worker/submission.py's `rule`(*args), the check HTTP runs, its refusal
    a QueueError."""
    from . import submission

    try:
        return getattr(submission, rule)(*args)
    except submission.InvalidSubmission as exc:
        raise _queue_error(exc) from None


# None, most submissions' value, is "not given": nothing to import or check.

def due_at(run_after: dt.datetime | None) -> dt.datetime | None:
    """run_after as the queue takes it: None when already past."""
    return None if run_after is None else _as_over_http("due", run_after)


def priority(value: int | None) -> int | None:
    """A priority as HTTP takes it: None (the kind's) or a whole number in range."""
    return None if value is None else _as_over_http("check_priority", value)


def grace(value: float, most: float) -> float:
    """A deferred leave's grace as ?grace= takes it: seconds, 0 or more (not a
    bool, nan or inf), capped by JOBFEED_LEAVE_GRACE (`most`). A negative one
    left at once before, canceling a lone requester's job."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
        raise QueueError("invalid_query", f"grace: {value!r} is not a number of seconds, 0 or more", 422)
    return min(value, most)


def requester(value: str | None) -> str | None:
    """An identity as HTTP takes it: None, or "" (nobody, as an empty header
    is), else a short string PostgreSQL can store."""
    return _as_over_http("check_requester", value)


def flags(**given: object) -> None:
    """Keyword flags (request=, force=) are True or False, not anything truthy."""
    for name, value in given.items():
        if not isinstance(value, bool):
            raise QueueError("invalid_request", f"{name} must be True or False, not {value!r}"[:200], 422)


def concurrency_key(key: str | None) -> str | None:
    """A concurrency key as HTTP takes it: None (none) or a short string PostgreSQL can store."""
    return None if key is None else _as_over_http("check_concurrency_key", key)


def _listed(values: object) -> object:
    """values (not None) as a list, as a JSON array; a string, a mapping, a set
    (HTTP takes no JSON object for these) or any non-iterable (0, False) as it
    is, to be refused as HTTP refuses it, rather than split or taken as keys."""
    if isinstance(values, (str, bytes, bytearray, Mapping, AbstractSet)) or not isinstance(values, Iterable):
        return values
    return list(values)


def waiting(after: Iterable[uuid.UUID | str] | None, await_signals: Iterable[str] | None,
            signal_timeout: float | None) -> tuple[list[uuid.UUID], list[str], float | None]:
    """after (job ids), await_signals (names) and signal_timeout, checked; only
    None is "not given" (an empty list waits for nothing)."""
    from .submission import InvalidSubmission, parse_after, parse_signals

    try:
        ids = [] if after is None else parse_after(_listed(after))  # type: ignore[arg-type]
        names, timeout = parse_signals([] if await_signals is None else _listed(await_signals), signal_timeout)
    except InvalidSubmission as exc:
        raise _queue_error(exc) from None
    return ids, names, timeout


def notify_url(url: str, hosts: tuple[str, ...]) -> str:
    """A notify_url on a host JOBFEED_WEBHOOK_HOSTS allows (unset: none)."""
    return _as_over_http("check_notify_url", url, hosts)


def signal_name(name: str) -> str:
    """A signal's name as HTTP takes it: one no job can await is not_awaited."""
    return _as_over_http("check_signal_name", name)
