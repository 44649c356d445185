"""What every part of the queue's Python face shares: running one named SQL
function (sql/queries.sql), turning the errors it raises into QueueError, and
converting arguments."""

from __future__ import annotations

import datetime as dt
import json
import re
import uuid
from typing import Any, Sequence

import asyncpg

from .settings import Settings, max_payload_from_env
from .sql import query

# SQLSTATEs raised by sql/functions (class JF) -> HTTP status.
_HTTP_STATUS = {"JF404": 404, "JF409": 409, "JF413": 413, "JF422": 422, "JF429": 429}


class QueueError(Exception):
    """A queue function refused the call: `code` is stable, `status` an HTTP status."""

    def __init__(self, code: str, message: str, status: int = 400):
        super().__init__(message)
        self.code = code
        self.message = message
        self.status = status


def _translate(exc: asyncpg.PostgresError) -> Exception:
    state = getattr(exc, "sqlstate", "") or ""
    if state in _HTTP_STATUS:
        return QueueError(exc.hint or "error", exc.args[0] if exc.args else str(exc), _HTTP_STATUS[state])
    return exc


def _plain(value: Any) -> str:
    if isinstance(value, uuid.UUID):  # job ids, as ctx.submit answers them
        return str(value)
    raise TypeError(f"a {type(value).__name__} is not JSON")


# Payloads, results and checkpoints alike: a job id (uuid.UUID) written as its
# string, as a handler most often keeps the ids ctx.submit gave it.
_PAYLOADS = json.JSONEncoder(allow_nan=False, default=_plain)
# a NUL written as JSON: jsonb refuses it (an escaped backslash before "u0000" is no NUL)
_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")


def payload_text(payload: dict | None) -> str:
    """A payload (None: {}) as JSON text, refused (invalid_payload, as over
    HTTP) when json cannot write it (a datetime, a set, a cycle) or jsonb
    would not store it (NaN or Infinity, a NUL, a lone surrogate): checked
    here, not left to the database, so that a batch can name its item."""
    try:
        text = _PAYLOADS.encode(payload if payload is not None else {})
        if "\\ud" in text:  # surrogates: a pair (an emoji) passes, a lone one does not encode
            json.dumps(payload, ensure_ascii=False, default=_plain).encode()
    except (TypeError, ValueError) as exc:  # UnicodeEncodeError is one
        raise QueueError("invalid_payload", f"the payload is not JSON PostgreSQL can store: {_why(exc)}",
                         422) from None
    if "\\u0000" in text and _NUL.search(text):
        raise QueueError("invalid_payload", "the payload is not JSON PostgreSQL can store: a NUL character", 422)
    return text


def _why(exc: Exception) -> str:
    if isinstance(exc, UnicodeEncodeError):
        return "a lone surrogate in a string"
    if str(exc).startswith("Out of range float"):  # allow_nan's refusal
        return "NaN or Infinity"
    return str(exc)


def _batch(items: Sequence[tuple[str, dict | None]]) -> tuple[list[str], list[str]]:
    """(targets, payloads as JSON text) for the batch functions; a payload JSON
    cannot write is refused naming its item, as the database's checks do."""
    payloads = []
    for n, (_, p) in enumerate(items, 1):
        try:
            payloads.append(payload_text(p))
        except QueueError as exc:
            raise QueueError(exc.code, f"item {n}: {exc.message}", exc.status) from None
    return [t for t, _ in items], payloads


# What PostgreSQL refuses in JSON it is given: a NUL or a lone surrogate in a
# string (DataError), nesting past its stack (ProgramLimitExceededError).
UNSTORABLE = (asyncpg.DataError, asyncpg.ProgramLimitExceededError)
UNSTORABLE_CODE = "invalid_result"


def result_json(value: Any) -> str:
    """A handler's result as JSON text; most return None, spared json.dumps.
    TypeError or ValueError for what JSON cannot hold (a set, NaN)."""
    return "null" if value is None else _PAYLOADS.encode(value)




def _seconds(value: float | None) -> dt.timedelta | None:
    return None if value is None else dt.timedelta(seconds=value)


class QueueCalls:
    """The connection (a Pool, or one Connection) and the calls on it."""

    def __init__(self, pool: asyncpg.Pool | asyncpg.Connection, *, settings: Settings | None = None):
        self.pool = pool  # anything with fetch/fetchval: a Pool or a Connection
        # for kinds' defaults (JOBFEED_LEASE, ...) and the requester cap; read
        # from the environment if None
        self._settings = settings
        self._known: set[str] = set()  # kinds this object has registered or seen registered

    async def _add_kind(self, kind: str) -> None:
        """Producers first: a kind this process knows (its @task module is
        imported) is added to the database before its first submission here, so a
        producer can submit before any worker has started. Never overwrites the
        settings a worker wrote. One statement per kind and Queue object (per
        submission inside a transaction of the caller's, which may roll back)."""
        if kind in self._known:
            return
        from .tasks import register_kind, registry  # tasks imports the queue
        spec = registry.get(kind)
        if spec is None:
            return  # not ours to describe: the database decides (unknown_kind)
        await register_kind(self, spec.resolved(self.settings), overwrite=False)

    @property
    def max_payload(self) -> int:
        """The payload limit: the settings' when given, else JOBFEED_MAX_PAYLOAD's
        alone (not the whole environment's settings on each new Queue object: a
        Queue per transaction is the outbox pattern's)."""
        return self._settings.max_payload if self._settings is not None else max_payload_from_env()

    @property
    def settings(self) -> Settings:
        if self._settings is None:
            self._settings = Settings.from_env()
        return self._settings

    async def _fetch(self, name: str, *args) -> list[asyncpg.Record]:
        try:
            return await self.pool.fetch(query(name), *args)
        except asyncpg.PostgresError as exc:
            raise _translate(exc) from None

    async def _fetchval(self, name: str, *args):
        try:
            return await self.pool.fetchval(query(name), *args)
        except asyncpg.PostgresError as exc:
            raise _translate(exc) from None
