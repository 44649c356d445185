"""The queue's Python face: one method per SQL function (sql/queries.sql), errors
raised by the functions turned into QueueError. No queue rule lives here.
Queue is this module's submitting and reading, with the worker's calls
(queue_lease.py) and the operator's (queue_admin.py)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import uuid
from typing import Any, Iterable, Sequence

import asyncpg

from . import producer
from .limits import MAX_PAYLOAD_BYTES
from .queue_admin import AdminCalls
from .queue_calls import UNSTORABLE, QueueError, _batch, _seconds, payload_text
from .queue_lease import LeaseCalls
from .queue_records import ClaimTimes, Job, Submission
from .sql import query
from .states import TERMINAL
from .waits import wait_event

__all__ = ["ClaimTimes", "Job", "Queue", "QueueError", "Submission"]


def _as_id(value: uuid.UUID | str) -> uuid.UUID | None:
    """A job's or request's id as given; None when it is no UUID (which no
    job or request has), rather than PostgreSQL's DataError."""
    if isinstance(value, uuid.UUID):
        return value
    try:
        return uuid.UUID(str(value))
    except ValueError:
        return None


class Queue(LeaseCalls, AdminCalls):
    """The queue's functions, called on a pool, or on one connection: then each
    call runs on it, inside its transaction if one is open. Submitting in the
    transaction that writes your own data is the outbox pattern: the job exists
    (and its NOTIFY goes out) exactly when your data commits, and not at all if
    it rolls back. A refused call (QueueError) aborts that transaction."""

    # -- kinds
    async def register_kind(self, kind: str, *, max_attempts: int, lease: float,
                            backoff: Sequence[float], jitter: float = 0.1, description: str = "",
                            overwrite: bool = True, priority: int = 0, max_running: int | None = None,
                            max_running_per_key: int | None = None,
                            rate: tuple[int, float] | None = None) -> None:
        """overwrite=False only adds a kind not registered yet (see sql/functions/30_submit.sql).
        rate is (starts, per seconds)."""
        await self._fetch("register_kind", kind, max_attempts, _seconds(lease),
                          [_seconds(b) for b in backoff], jitter, description, overwrite,
                          priority, max_running, max_running_per_key,
                          rate[0] if rate else None, _seconds(rate[1]) if rate else None)
        # Remembered unless written in a transaction of the caller's, which may
        # yet roll back (the kind with it): then the next submission adds it again.
        in_transaction = getattr(self.pool, "is_in_transaction", None)
        if in_transaction is None or not in_transaction():
            self._known.add(kind)

    async def list_kinds(self) -> list[dict]:
        return [json.loads(r[0]) for r in await self._fetch("list_kinds")]

    # -- submitting and reading
    async def submit(self, kind: str, target: str, payload: dict | None = None, *,
                     run_after: dt.datetime | None = None, priority: int | None = None,
                     concurrency_key: str | None = None, max_payload: int | None = None,
                     requester: str | None = None, notify_url: str | None = None,
                     request: bool = False, force: bool = False,
                     after: Iterable[uuid.UUID | str] | None = None,
                     await_signals: Iterable[str] | None = None,
                     signal_timeout: float | None = None) -> Submission:
        """Submit, deduplicated by (kind, target). run_after: not claimed before
        then; priority: None is the kind's default. With requester=, notify_url=
        or request=True a request is recorded too (see leave()), and the kind's
        reuse_for applies (force=True skips it); without, the call is as cheap
        as a bare submission. A new job may wait: after (ids of jobs it runs
        after; it fails with dependency_failed if one does not complete) and
        await_signals (names delivered with signal(); signal_timeout seconds,
        else it fails with signal_timeout); they combine with everything
        else (a job waiting with a run_after is due at the later of the two).
        Checked as over HTTP (worker/producer.py): a run_after already past is
        now; max_payload defaults to JOBFEED_MAX_PAYLOAD; refusals are QueueError."""
        producer.submission(kind, target, payload)  # first, as POST /api/jobs checks
        if requester is not None:  # None, most submissions' value, costs nothing
            requester = producer.requester(requester)
        if type(request) is not bool or type(force) is not bool:
            producer.flags(request=request, force=force)
        run_after = producer.due_at(run_after)
        priority = producer.priority(priority)
        concurrency_key = producer.concurrency_key(concurrency_key)
        if notify_url is not None:
            notify_url = producer.notify_url(notify_url, self.settings.webhook_hosts)
        if max_payload is None:
            max_payload = self.max_payload
        # JOBFEED_MAX_ACTIVE_PER_REQUESTER counts a requester's requests however made
        max_active = None if requester is None else self.settings.max_active_per_requester
        ids: list[uuid.UUID] = []
        names: list[str] = []
        timeout: float | None = None
        if after is not None or await_signals is not None or signal_timeout is not None:
            ids, names, timeout = producer.waiting(after, await_signals, signal_timeout)
        try:
            if ids or names:
                job_id, created, _, request_id, reused = await self.submit_waiting_json(
                    kind, target, payload, after=ids, await_signals=names, signal_timeout=timeout,
                    run_after=run_after, priority=priority, concurrency_key=concurrency_key,
                    max_payload=max_payload, request=request, requester=requester, notify_url=notify_url,
                    max_active=max_active, force=force)
                return Submission(job_id, created, reused, request_id)
            if request or requester is not None or notify_url is not None:
                job_id, created, _, request_id, reused = await self.submit_request_json(
                    kind, target, payload, run_after=run_after, priority=priority, concurrency_key=concurrency_key,
                    max_payload=max_payload, requester=requester, notify_url=notify_url, max_active=max_active,
                    force=force)
                return Submission(job_id, created, reused, request_id)
            # No view asked for: none is built.
            await self._add_kind(kind)
            rows = await self._fetch("submit_id", kind, target, payload_text(payload),
                                     run_after, max_payload, priority, concurrency_key)
        except producer.REFUSED as exc:
            raise producer.refused(exc) from None
        return Submission(rows[0]["id"], rows[0]["created"])

    async def submit_request_json(self, kind: str, target: str, payload: dict | None = None, *,
                                  run_after: dt.datetime | None = None, priority: int | None = None,
                                  concurrency_key: str | None = None, max_payload: int = MAX_PAYLOAD_BYTES,
                                  requester: str | None = None, notify_url: str | None = None,
                                  max_active: int | None = None,
                                  force: bool = False) -> tuple[uuid.UUID, bool, str, uuid.UUID, bool]:
        """submit() recording a request: (job id, created, public view as JSON
        text, request id, reused). max_active: refuse (QueueError too_many_jobs,
        429) when the requester would wait for more jobs than that."""
        text = payload_text(payload)
        await self._add_kind(kind)
        rows = await self._fetch("submit_request", kind, target, text, run_after, max_payload,
                                 requester, notify_url, max_active, force, priority, concurrency_key)
        r = rows[0]
        return r["id"], r["created"], r["view"], r["request_id"], r["reused"]

    async def submit_json(self, kind: str, target: str, payload: dict | None = None, *,
                          run_after: dt.datetime | None = None, priority: int | None = None,
                          concurrency_key: str | None = None,
                          max_payload: int = MAX_PAYLOAD_BYTES,
                          after: Sequence[uuid.UUID | str] | None = None,
                          await_signals: Sequence[str] | None = None,
                          signal_timeout: float | None = None) -> tuple[uuid.UUID, bool, str]:
        """submit(), also answering the job's public view as JSON text."""
        if after or await_signals:
            job_id, created, view, _, _ = await self.submit_waiting_json(
                kind, target, payload, after=after, await_signals=await_signals, signal_timeout=signal_timeout,
                run_after=run_after, priority=priority, concurrency_key=concurrency_key, max_payload=max_payload)
            return job_id, created, view
        text = payload_text(payload)
        await self._add_kind(kind)
        rows = await self._fetch("submit", kind, target, text, run_after, max_payload, priority, concurrency_key)
        return rows[0]["id"], rows[0]["created"], rows[0]["view"]

    async def submit_waiting_json(self, kind: str, target: str, payload: dict | None = None, *,
                                  after: Sequence[uuid.UUID | str] | None = None,
                                  await_signals: Sequence[str] | None = None, signal_timeout: float | None = None,
                                  run_after: dt.datetime | None = None, priority: int | None = None,
                                  concurrency_key: str | None = None, max_payload: int = MAX_PAYLOAD_BYTES,
                                  request: bool = False, requester: str | None = None,
                                  notify_url: str | None = None, max_active: int | None = None,
                                  force: bool = False) -> tuple[uuid.UUID, bool, str, uuid.UUID | None, bool]:
        """A submission that may wait (after, await_signals): (job id, created,
        public view as JSON text, request id or None, reused). A request is
        recorded as by submit_request_json when request, requester or
        notify_url says so."""
        text = payload_text(payload)
        await self._add_kind(kind)
        ids = [a if isinstance(a, uuid.UUID) else uuid.UUID(str(a)) for a in after or ()]
        rows = await self._fetch("submit_waiting", kind, target, text, ids, list(await_signals or ()),
                                 _seconds(signal_timeout), max_payload, run_after, priority, concurrency_key,
                                 request, requester, notify_url, max_active, force)
        r = rows[0]
        return r["id"], r["created"], r["view"], r["request_id"], r["reused"]

    async def submit_many(self, kind: str, items: Iterable[tuple[str, dict | None]], *,
                          run_after: dt.datetime | None = None, priority: int | None = None,
                          concurrency_key: str | None = None,
                          max_payload: int | None = None) -> list[tuple[uuid.UUID, bool]]:
        """Submit (target, payload) pairs of one kind (any iterable) in one
        statement; answers (job id, created) per item, in order, deduplicated
        and checked as submit() is: one refused item refuses the batch."""
        items = list(items)  # read once: a generator would be spent by the checks
        if not items:
            return []
        producer.batch(kind, items)
        run_after = producer.due_at(run_after)
        priority = producer.priority(priority)
        concurrency_key = producer.concurrency_key(concurrency_key)
        if max_payload is None:
            max_payload = self.max_payload
        try:
            await self._add_kind(kind)
            rows = await self._fetch("submit_many", kind, *_batch(items), run_after, max_payload,
                                     priority, concurrency_key)
        except producer.REFUSED as exc:
            raise producer.refused(exc) from None
        return [(r["id"], r["created"]) for r in rows]

    async def submit_many_json(self, kind: str, items: Sequence[tuple[str, dict | None]], *,
                               run_after: dt.datetime | None = None, priority: int | None = None,
                               concurrency_key: str | None = None,
                               max_payload: int = MAX_PAYLOAD_BYTES) -> list[tuple[uuid.UUID, bool, str]]:
        """submit_many(), also answering each job's public view as JSON text."""
        if not items:
            return []
        await self._add_kind(kind)
        rows = await self._fetch("submit_many_views", kind, *_batch(items), max_payload,
                                 run_after, priority, concurrency_key)
        return [(r["id"], r["created"], r["view"]) for r in rows]

    async def signal(self, job_id: uuid.UUID | str, name: str, data: Any = None) -> tuple[bool, dict]:
        """Deliver signal name (with JSON data) to a job that awaits it: ->
        (first, public view). Only the first delivery of a name counts; a
        repeat answers first=False and changes nothing. QueueError not_found
        (404), not_awaited (409), invalid_payload (422: data PostgreSQL cannot
        store), payload_too_large (413: data over JOBFEED_MAX_PAYLOAD), as over HTTP."""
        if (jid := _as_id(job_id)) is None:
            raise QueueError("not_found", "no such job", 404)
        first, view = await self.signal_json(jid, producer.signal_name(name), data)
        return first, json.loads(view)

    async def signal_json(self, job_id: uuid.UUID, name: str, data: Any = None) -> tuple[bool, str]:
        try:
            rows = await self._fetch("signal", job_id, name, json.dumps(data), self.max_payload)
        except UNSTORABLE:  # a NUL, a lone surrogate, NaN (json.dumps writes it; PostgreSQL refuses it)
            raise QueueError("invalid_payload", "the signal holds JSON that PostgreSQL cannot store", 422) from None
        return rows[0]["first"], rows[0]["view"]

    async def submit_many_requests_json(
            self, kind: str, items: Sequence[tuple[str, dict | None]], *, requesters: Sequence[str | None],
            notify_urls: Sequence[str | None], max_payload: int = MAX_PAYLOAD_BYTES,
            max_active: int | None = None, forces: Sequence[bool] | None = None,
            run_after: dt.datetime | None = None, priority: int | None = None,
            concurrency_key: str | None = None) -> list[tuple[uuid.UUID, bool, str, uuid.UUID, bool]]:
        """submit_many_json() recording one request per item (the API's group
        commit). Any requester over max_active refuses the whole batch."""
        if not items:
            return []
        await self._add_kind(kind)
        rows = await self._fetch("submit_many_requests", kind, *_batch(items), max_payload,
                                 list(requesters), list(notify_urls), max_active,
                                 None if forces is None else list(forces), run_after, priority, concurrency_key)
        return [(r["id"], r["created"], r["view"], r["request_id"], r["reused"]) for r in rows]

    async def leave_json(self, request_id: uuid.UUID | str) -> str:
        """The request leaves (idempotent); answers its job's public view as JSON
        text. QueueError not_found for an unknown request."""
        if (rid := _as_id(request_id)) is None:
            raise QueueError("not_found", "no such request", 404)
        return await self._fetchval("leave", rid)

    async def leave_later_json(self, request_id: uuid.UUID | str, grace: float) -> tuple[str, dt.datetime | None]:
        """The request leaves in `grace` seconds unless it stays first (a
        deferred leave: a closing page's, which a reload takes back); it is
        active until then. Answers its job's public view as JSON text and when
        it will leave (None: it has left, as a grace of 0 leaves at once). The
        grace is checked as ?grace= is and capped by JOBFEED_LEAVE_GRACE."""
        grace = producer.grace(grace, self.settings.leave_grace)
        if (rid := _as_id(request_id)) is None:
            raise QueueError("not_found", "no such request", 404)
        (row,) = await self._fetch("leave_later", rid, _seconds(grace))
        return row["view"], row["leave_at"]

    async def leave(self, request_id: uuid.UUID | str, *, grace: float | None = None) -> dict:
        """The request leaves: at once, or, given `grace` (seconds), once that
        has passed unless it stays first (stay()). When it was the last active
        request of an unfinished job, the kind's on_abandon decides: cancel (the
        default) or keep. Answers the job's public view."""
        if grace is None:
            return json.loads(await self.leave_json(request_id))
        return json.loads((await self.leave_later_json(request_id, grace))[0])

    async def stay_json(self, request_id: uuid.UUID | str) -> tuple[str, bool]:
        """The request's pending leave, if any, is called off: answers its job's
        public view as JSON text and whether a leave was pending. QueueError
        request_left (409) when it has left already, not_found for an unknown
        request."""
        if (rid := _as_id(request_id)) is None:
            raise QueueError("not_found", "no such request", 404)
        (row,) = await self._fetch("stay", rid)
        return row["view"], row["called_off"]

    async def stay(self, request_id: uuid.UUID | str) -> bool:
        """The request stays (see stay_json): True when a pending leave was called off."""
        return (await self.stay_json(request_id))[1]

    async def may_view(self, job_id: uuid.UUID, requester: str | None, request_id: uuid.UUID | None) -> bool:
        """Did this identity, or the holder of this request id, ever request the job?"""
        return await self._fetchval("may_view", job_id, requester, request_id)

    async def set_kind_request_policy(self, kind: str, *, on_abandon: str = "cancel", on_duplicate: str = "join",
                                      reuse_for: float | None = None, dedupe: str = "global") -> None:
        await self._fetch("set_kind_request_policy", kind, on_abandon, on_duplicate, _seconds(reuse_for), dedupe)

    async def get_job_json(self, job_id: uuid.UUID | str) -> str | None:
        """The public view as JSON text (relayed as is by the API); None for an
        unknown job (or an id no job could have)."""
        if (jid := _as_id(job_id)) is None:
            return None
        return await self._fetchval("get_job", jid)

    async def get_job(self, job_id: uuid.UUID | str) -> dict | None:
        text = await self.get_job_json(job_id)
        return None if text is None else json.loads(text)

    async def wait(self, job_id: uuid.UUID | str, timeout: float) -> dict | None:
        """The job's public view once it is final, or as it is after `timeout`
        seconds; None for an unknown job. Listens for the job's change
        notifications on one connection (of the pool, held meanwhile) and
        re-reads only when one names the job: it never polls. On a Connection
        inside a transaction, LISTEN starts only at commit: wait outside one.
        Not on a pool through a pooler in transaction mode (PgBouncer), whose
        sessions do not stay with a client: LISTEN needs the server's own.
        timeout: seconds from 0 (inf: until final); ValueError for NaN or less."""
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout >= 0:  # NaN too
            raise ValueError(f"timeout must be seconds from 0, not {timeout!r}")
        if (jid := _as_id(job_id)) is None:
            return None
        key = str(jid)
        changed = asyncio.Event()

        def on_change(_conn, _pid, _channel, payload: str) -> None:
            if key in payload:
                changed.set()

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        async with self._listening("jobfeed_changed", on_change) as conn:
            while True:
                changed.clear()  # before reading: a change after the read wakes us
                text = await conn.fetchval(query("get_job"), jid)
                view = None if text is None else json.loads(text)
                if view is None or view["status"] in TERMINAL:
                    return view
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return view
                await wait_event(changed, remaining)

    @contextlib.asynccontextmanager
    async def _listening(self, channel: str, callback):
        if isinstance(self.pool, asyncpg.Pool):
            async with self.pool.acquire() as conn:
                await conn.add_listener(channel, callback)
                try:
                    yield conn
                finally:
                    await conn.remove_listener(channel, callback)
        else:
            await self.pool.add_listener(channel, callback)
            try:
                yield self.pool
            finally:
                await self.pool.remove_listener(channel, callback)

    async def get_jobs_json(self, job_ids: Sequence[uuid.UUID | str]) -> list[str]:
        return [r[0] for r in await self.get_job_rows(job_ids)]

    async def get_job_rows(self, job_ids: Sequence[uuid.UUID | str]) -> list[asyncpg.Record]:
        """Each job's view as JSON text, then its id, version, status,
        requesters, position and updated_at (epoch seconds): the live feed's
        re-read, which so never parses a view (sql/queries.sql, get_jobs)."""
        return await self._fetch("get_jobs", list(job_ids))

    async def positions(self, job_ids: Sequence[uuid.UUID | str]) -> dict[str, int]:
        """Queue positions of those of these jobs that are due and never started
        (one query for the lot), by id as text."""
        return {str(r["id"]): r["position"] for r in await self._fetch("positions", list(job_ids))}
