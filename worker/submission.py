"""What a submission may be: the checks every entry point (HTTP API, command
line) makes before the database makes them again, so that each answers bad
input the same way, with the same code."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import uuid
from typing import Any, Callable
from urllib.parse import urlsplit

from .hosts import canonical_host
from .limits import INT_MAX, MAX_NOTIFY_URL, MAX_TARGET_BYTES
from .redact import MAX_MESSAGE
from .settings import MAX_DURATION, SettingError, parse_duration
from .tasks import registry

# How many jobs one submission may run after (submit_waiting says the same).
MAX_AFTER = 100
# The built-in kind whose jobs deliver webhooks (worker/webhooks.py): only the
# database makes them, from a request's notify_url. One submitted by anyone
# else would have the secret sign a body of its choosing.
WEBHOOK_KIND = "jobfeed.webhook"


class InvalidSubmission(ValueError):
    """A submission refused before it reaches the database: an HTTP status, a
    stable code and a message for people."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message


def _no_constants(name: str) -> Any:
    # NaN and Infinity are not JSON, and PostgreSQL would refuse them later.
    raise ValueError(f"{name} is not valid JSON")


# One decoder for every caller (json.loads with an option builds a new one per call).
JSON_DECODER = json.JSONDecoder(parse_constant=_no_constants)


def parse_payload(text: str) -> dict:
    """A payload given as JSON text (the command line's --payload)."""
    try:
        payload = JSON_DECODER.decode(text)
    except (ValueError, RecursionError) as exc:
        raise InvalidSubmission(400, "invalid_json", f"the payload is not valid JSON: {str(exc)[:200]}") from None
    return check_payload(payload)


def parse_after(values: list) -> list[uuid.UUID]:
    """The job ids a submission runs after (its `after`), each a UUID string."""
    if not isinstance(values, list) or len(values) > MAX_AFTER:
        raise InvalidSubmission(422, "invalid_request", f"after must be a list of at most {MAX_AFTER} job ids")
    ids = []
    for item in values:
        if isinstance(item, uuid.UUID):  # as Queue.submit may be given them
            ids.append(item)
            continue
        try:
            if not isinstance(item, str):
                raise ValueError(item)
            ids.append(uuid.UUID(item))
        except ValueError:
            raise InvalidSubmission(422, "unknown_dependency", f"no such job: {str(item)[:40]}") from None
    return ids


def parse_signals(names: object, timeout: object) -> tuple[list[str], float | None]:
    """A submission's await_signals (names) and signal_timeout (a duration such
    as "10m", or seconds as a number)."""
    if not isinstance(names, list) or len(names) > MAX_AFTER or not all(signal_name(n) for n in names):
        raise InvalidSubmission(422, "invalid_request",
                                f"await_signals must be a list of at most {MAX_AFTER} names of 1 to 100 bytes"
                                " without '/'")
    if timeout is None:
        return names, None
    if not names:
        raise InvalidSubmission(422, "invalid_request", "signal_timeout needs await_signals")
    return names, duration_field(timeout, "signal_timeout", "invalid_request", zero=False)


def signal_name(name: object) -> bool:
    """A name a job may await: 1 to 100 bytes PostgreSQL can store, no "/" (it
    is a path segment of POST /api/jobs/{id}/signals/{name})."""
    return isinstance(name, str) and storable(name) and "/" not in name and 1 <= len(name.encode("utf-8")) <= 100


def check_signal_name(name: object) -> str:
    """A signal's name as delivered: one no job can await is refused as not awaited."""
    if isinstance(name, str) and signal_name(name):
        return name
    raise InvalidSubmission(409, "not_awaited", "this job awaits no such signal")


def duration_field(value: object, name: str, code: str, *, zero: bool) -> float:
    """A submission's duration: a string such as "90s" or "5m" (or "0" where
    zero is allowed), or seconds as a number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if (0 <= value if zero else 0 < value) and value <= MAX_DURATION:
            return float(value)
        low = "from 0 to" if zero else "more than 0 and"
        raise InvalidSubmission(422, code, f"{name} must be {low} at most {MAX_DURATION:,.0f} seconds")
    if not isinstance(value, str):
        raise InvalidSubmission(422, code, f'{name} must be a duration such as "90s" or "5m", or seconds')
    if zero and value.strip() == "0":
        return 0.0
    try:
        return parse_duration(value, name, zero=zero)
    except SettingError as exc:
        raise InvalidSubmission(422, code, str(exc)) from None


def storable(text: str) -> bool:
    """PostgreSQL text holds neither NUL nor lone surrogates."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def check_payload(payload: object) -> dict:
    if not isinstance(payload, dict):
        raise InvalidSubmission(422, "invalid_payload", "payload must be a JSON object")
    return payload


def check_submission(kind: object, target: object, payload: object) -> tuple[str, str, dict]:
    """(kind, target, payload) when they may be submitted, else InvalidSubmission:
    the shapes, the target's size and the kind's own validate() when this
    process has loaded the kind (the database checks the payload's size and
    whether the kind exists)."""
    kind, target, payload = check_kind(kind), check_target(target), check_payload(payload)
    spec = registry.get(kind)
    if spec is not None and spec.validate is not None:
        run_validate(kind, spec.validate, payload)
    return kind, target, payload


def check_kind(kind: object) -> str:
    """A submission's kind: a string (the database says whether it exists),
    not the webhook kind."""
    if not isinstance(kind, str):
        raise InvalidSubmission(422, "invalid_request", "kind must be a string")
    if not kind or not storable(kind):
        raise InvalidSubmission(422, "unknown_kind", f"unknown kind {kind!r}")
    if kind == WEBHOOK_KIND:
        raise InvalidSubmission(422, "unknown_kind", f"jobs of kind {kind!r} are made from a notify_url only")
    return kind


def check_target(target: object) -> str:
    """A submission's target: a string of 1 to MAX_TARGET_BYTES bytes PostgreSQL can store."""
    if not isinstance(target, str) or not storable(target) \
            or not 1 <= len(target.encode("utf-8")) <= MAX_TARGET_BYTES:
        raise InvalidSubmission(422, "invalid_target", f"target must be a string of 1 to {MAX_TARGET_BYTES} bytes")
    return target


def check_requester(requester: object) -> str | None:
    """An identity (JOBFEED_REQUESTER_HEADER's value, the host's identify(),
    Queue.submit's requester=): None or "" is nobody; else a string of at most
    MAX_TARGET_BYTES bytes PostgreSQL can store (it is indexed as a target is)."""
    if requester is None or requester == "":
        return None
    if not isinstance(requester, str) or not storable(requester) \
            or len(requester.encode("utf-8")) > MAX_TARGET_BYTES:
        raise InvalidSubmission(422, "invalid_requester",
                                f"a requester is a string of at most {MAX_TARGET_BYTES} bytes PostgreSQL can store")
    return requester


def run_validate(kind: str, validate: Callable[[dict], None], payload: dict) -> None:
    """The kind's validate(): ValueError or TypeError refuse the payload; any
    other exception is a bug in the hook."""
    try:
        validate(payload)
    except (ValueError, TypeError) as exc:
        # TypeError too: a validate() that compares or converts a value of
        # the wrong type fails this way, and the payload is what is wrong.
        # clamped as any stored error message: a client sees it whole
        message = str(exc)[:MAX_MESSAGE] or "payload refused by its kind"
        raise InvalidSubmission(422, "invalid_payload", message) from None
    except Exception:
        raise
    except BaseException as exc:
        # SystemExit, KeyboardInterrupt, CancelledError (validate() is called,
        # not awaited: one out of it is its own, not the request's), ...: past
        # the API's handler for Exception, uvicorn would answer a bare 500 (no
        # JSON, no security headers).
        raise RuntimeError(f"validate() of kind {kind!r} raised {type(exc).__name__}") from exc


def host_allowed(url: str, hosts: tuple[str, ...]) -> bool:
    """A notify_url: http(s) to one of the allowed hosts (JOBFEED_WEBHOOK_HOSTS, in
    canonical form: worker/hosts.py), on any port but 0."""
    try:
        parts = urlsplit(url)
        host = canonical_host(parts.hostname or "")
        port = parts.port  # raises ValueError for one out of range
    except ValueError:
        return False
    # no user:password@ either: credentials would sit in the database and logs;
    # no space or control character, which no request line can carry
    return (parts.scheme in ("http", "https") and host is not None and host in hosts and port != 0
            and "@" not in parts.netloc and not any(c.isspace() or not c.isprintable() for c in url))


def check_notify_url(url: object, hosts: tuple[str, ...]) -> str:
    """A submission's notify_url: on a host JOBFEED_WEBHOOK_HOSTS allows (unset: none)."""
    if not isinstance(url, str):
        raise InvalidSubmission(422, "notify_url_not_allowed", "notify_url must be a string (an http(s) URL)")
    if len(url) > MAX_NOTIFY_URL:
        raise InvalidSubmission(422, "notify_url_not_allowed", f"notify_url is at most {MAX_NOTIFY_URL} characters")
    if not storable(url) or not host_allowed(url, hosts):
        raise InvalidSubmission(422, "notify_url_not_allowed",
                                "notify_url must be an http(s) URL on a host in JOBFEED_WEBHOOK_HOSTS")
    return url


@dataclasses.dataclass(frozen=True)
class Schedule:
    """When and how a job runs: not before run_after, priority (None: the
    kind's), concurrency_key. Hashable: the API's group commit batches the
    submissions that share one."""
    run_after: dt.datetime | None = None
    priority: int | None = None
    concurrency_key: str | None = None

    def kwargs(self) -> dict[str, Any]:
        """As keyword arguments of Queue.submit*."""
        return {"run_after": self.run_after, "priority": self.priority, "concurrency_key": self.concurrency_key}


# RFC 3339's date-time (section 5.6), "T" or "t" between date and time; what
# datetime.fromisoformat also takes (week dates, hours alone, basic format) is not.
_RFC3339 = re.compile(r"\d{4}-\d\d-\d\d[Tt]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", re.ASCII)


def parse_run_at(value: object) -> dt.datetime | None:
    """RFC 3339 with an offset or Z, e.g. 2026-12-01T03:00:00Z, as due() takes it."""
    example = "e.g. 2026-12-01T03:00:00Z"
    if not isinstance(value, str) or not _RFC3339.fullmatch(value.strip()):
        shown = f"run_at {value[:64]!r}" if isinstance(value, str) else "run_at"
        raise InvalidSubmission(422, "invalid_run_at", f"{shown} is not an RFC 3339 time with an offset or Z, {example}")
    try:
        when = dt.datetime.fromisoformat(value.strip().upper())
    except ValueError:
        raise InvalidSubmission(422, "invalid_run_at", f"run_at {value[:64]!r} is not a valid time, {example}") from None
    return due(when)


def due(when: dt.datetime) -> dt.datetime | None:
    """When a job is due: None for a time already past (due now, queued as a
    job submitted now, not ahead of those submitted before it); more than
    MAX_DURATION ahead is refused, and so is a naive datetime, as HTTP refuses
    a run_at without an offset: it names no one instant."""
    if not isinstance(when, dt.datetime):  # a date, or a string from Python (HTTP's run_at is parsed)
        raise InvalidSubmission(422, "invalid_run_at", f"run_after must be a datetime, not a {type(when).__name__}")
    if when.utcoffset() is None:  # from Python only: HTTP's run_at has an offset or Z
        raise InvalidSubmission(422, "invalid_run_at",
                                "run_after must be an aware datetime, e.g. datetime.now(timezone.utc) + ...")
    now = dt.datetime.now(dt.timezone.utc)
    if when <= now:
        return None
    if when - now > dt.timedelta(seconds=MAX_DURATION):
        raise InvalidSubmission(422, "invalid_run_at", f"run_at is at most {MAX_DURATION:,} seconds from now")
    return when


def check_priority(priority: object) -> int | None:
    """A submission's priority: None (the kind's) or a whole number (not a bool) in range."""
    if priority is None or (isinstance(priority, int) and not isinstance(priority, bool)
                            and -INT_MAX <= priority <= INT_MAX):
        return priority
    raise InvalidSubmission(422, "invalid_priority", f"priority must be a whole number from {-INT_MAX} to {INT_MAX}")


def check_schedule(run_at: object = None, delay: object = None, priority: object = None,
                   concurrency_key: object = None) -> Schedule:
    """The scheduling fields of a submission (None: not given) -> Schedule."""
    if run_at is not None and delay is not None:
        raise InvalidSubmission(422, "invalid_request", "give run_at or delay, not both")
    run_after = None
    if run_at is not None:
        run_after = parse_run_at(run_at)
    elif delay is not None:
        seconds = duration_field(delay, "delay", "invalid_delay", zero=True)
        run_after = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=seconds)
    return Schedule(run_after, check_priority(priority), check_concurrency_key(concurrency_key))


def check_concurrency_key(key: object) -> str | None:
    """A submission's concurrency key: None (none) or 1 to MAX_TARGET_BYTES bytes PostgreSQL can store."""
    if key is None or (isinstance(key, str) and storable(key) and 1 <= len(key.encode("utf-8")) <= MAX_TARGET_BYTES):
        return key
    raise InvalidSubmission(422, "invalid_concurrency_key",
                            f"concurrency_key must be a string of 1 to {MAX_TARGET_BYTES} bytes")
