"""What Queue.submit and Queue.submit_many check before the database, so that a
producer's refusal is a QueueError as over HTTP: the kind's own validate()
(when this process has loaded the kind), a run_after already past (due now,
queued as a job submitted now) or too far ahead, the waiting fields, a
notify_url's host. The database checks the rest (the kind, the sizes); what it
cannot store (a NUL, NaN, an int out of range, an empty key) is refused as
`invalid_input` instead of asyncpg's own errors."""

from __future__ import annotations

import datetime as dt
import uuid
from typing import Sequence

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


def validated(kind: str, payloads: Sequence[dict | None]) -> None:
    """The kind's validate() on each payload (None: {}), as a submission over
    HTTP runs it."""
    from .tasks import registry

    spec = registry.get(kind)
    if spec is None or spec.validate is None:
        return
    for payload in payloads:
        if payload is not None and not isinstance(payload, dict):
            continue  # not a JSON object: the database refuses it (invalid_payload)
        try:
            spec.validate({} if payload is None else payload)
        except (ValueError, TypeError) as exc:
            raise QueueError("invalid_payload", str(exc) or "payload refused by its kind", 422) from None


def due_at(run_after: dt.datetime | None) -> dt.datetime | None:
    """run_after as the queue takes it: None when already past."""
    if run_after is None:
        return None
    from .submission import InvalidSubmission, due

    try:
        return due(run_after)
    except InvalidSubmission as exc:
        raise _queue_error(exc) from None


def waiting(after: Sequence[uuid.UUID | str] | None, await_signals: Sequence[str] | None,
            signal_timeout: float | None) -> tuple[list[uuid.UUID], list[str], float | None]:
    """after (job ids), await_signals (names) and signal_timeout, checked."""
    from .submission import InvalidSubmission, parse_after, parse_signals

    try:
        ids = parse_after([str(a) for a in after or ()])
        names, timeout = parse_signals(list(await_signals or ()), signal_timeout)
    except InvalidSubmission as exc:
        raise _queue_error(exc) from None
    return ids, names, timeout


def notify_url(url: str, hosts: tuple[str, ...]) -> str:
    """A notify_url on a host JOBFEED_WEBHOOK_HOSTS allows (unset: none)."""
    from .submission import InvalidSubmission, check_notify_url

    try:
        return check_notify_url(url, hosts)
    except InvalidSubmission as exc:
        raise _queue_error(exc) from None
