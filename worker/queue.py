"""The queue's Python face: one method per SQL function (sql/queries.sql), errors
raised by the functions turned into QueueError. No queue rule lives here."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import random
import time
import uuid
from typing import NamedTuple
from typing import Any, Awaitable, Callable, Sequence, TypeVar

import asyncpg

from .limits import MAX_PAYLOAD_BYTES
from .settings import Settings
from .sql import query
from .states import TERMINAL

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


log = logging.getLogger("jobfeed.worker")
_T = TypeVar("_T")

# Errors after which the same call may simply be made again: the transaction was
# rolled back (deadlock, serialization failure), or the connection or the server
# went away, so it either never happened or committed once. The worker's writes
# are fenced by generation, so a repeat of one that did commit answers "lost"
# and changes nothing.
RETRYABLE: tuple[type[BaseException], ...] = (
    asyncpg.TransactionRollbackError, asyncpg.PostgresConnectionError, asyncpg.OperatorInterventionError,
    asyncpg.TooManyConnectionsError, asyncpg.InterfaceError, OSError, asyncio.TimeoutError,
    # a connection whose server went away mid-call ("cannot switch to state")
    asyncpg.exceptions.InternalClientError)


async def retrying(call: Callable[[], Awaitable[_T]], *, until: float, what: str,
                   first_delay: float = 0.02, max_delay: float = 1.0) -> _T:
    """Run call(), again after each retryable error, with exponential backoff
    (and jitter, so two workers that collided do not collide again) until the
    monotonic time `until`; then, or on any other error, the error is raised."""
    delay = first_delay
    while True:
        try:
            return await call()
        except RETRYABLE as exc:
            left = until - time.monotonic()
            if left <= 0:
                raise
            pause = min(delay * (0.5 + random.random()), left)
            log.warning("could not %s yet (%s: %s); trying again in %.2fs", what, type(exc).__name__, exc, pause)
            await asyncio.sleep(pause)
            delay = min(delay * 2, max_delay)


def _batch(items: Sequence[tuple[str, dict | None]]) -> tuple[list[str], list[str]]:
    """(targets, payloads as JSON text) for the batch functions."""
    return [t for t, _ in items], [json.dumps(p if p is not None else {}) for _, p in items]


def _result_json(value: Any) -> str:
    """A handler's result as JSON text; most return None, spared json.dumps."""
    return "null" if value is None else json.dumps(value)


def _seconds(value: float | None) -> dt.timedelta | None:
    return None if value is None else dt.timedelta(seconds=value)


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


class Queue:
    """The queue's functions, called on a pool, or on one connection: then each
    call runs on it, inside its transaction if one is open. Submitting in the
    transaction that writes your own data is the outbox pattern: the job exists
    (and its NOTIFY goes out) exactly when your data commits, and not at all if
    it rolls back. A refused call (QueueError) aborts that transaction."""

    def __init__(self, pool: asyncpg.Pool | asyncpg.Connection, *, settings: Settings | None = None):
        self.pool = pool  # anything with fetch/fetchval: a Pool or a Connection
        self._settings = settings  # for kinds' defaults (JOBFEED_LEASE, ...); read from the environment if None
        self._known: set[str] = set()  # kinds this object has registered or seen registered

    async def _add_kind(self, kind: str) -> None:
        """Producers first: a kind this process knows (its @task module is
        imported) is added to the database before its first submission here, so a
        producer can submit before any worker has started. Never overwrites the
        settings a worker wrote. One statement per kind and Queue object."""
        if kind in self._known:
            return
        from .tasks import register_kind, registry  # tasks imports this module
        spec = registry.get(kind)
        if spec is None:
            return  # not ours to describe: the database decides (unknown_kind)
        await register_kind(self, spec.resolved(self._settings or Settings.from_env()), overwrite=False)

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
        self._known.add(kind)

    async def list_kinds(self) -> list[dict]:
        return [json.loads(r[0]) for r in await self._fetch("list_kinds")]

    # -- submitting and reading
    async def submit(self, kind: str, target: str, payload: dict | None = None, *,
                     run_after: dt.datetime | None = None, priority: int | None = None,
                     concurrency_key: str | None = None, max_payload: int = MAX_PAYLOAD_BYTES,
                     requester: str | None = None, notify_url: str | None = None,
                     request: bool = False, force: bool = False,
                     after: Sequence[uuid.UUID | str] | None = None,
                     await_signals: Sequence[str] | None = None,
                     signal_timeout: float | None = None) -> Submission:
        """Submit, deduplicated by (kind, target). run_after: not claimed before
        then; priority: None is the kind's default. With requester=, notify_url=
        or request=True a request is recorded too (see leave()), and the kind's
        reuse_for applies (force=True skips it); without, the call is as cheap
        as a bare submission. A new job may wait: after (ids of jobs it runs
        after; it fails with dependency_failed if one does not complete) and
        await_signals (names delivered with signal(); signal_timeout seconds,
        else it fails with signal_timeout); they combine with everything
        else (a job waiting with a run_after is due at the later of the two)."""
        if after or await_signals:
            job_id, created, _, request_id, reused = await self.submit_waiting_json(
                kind, target, payload, after=after, await_signals=await_signals, signal_timeout=signal_timeout,
                run_after=run_after, priority=priority, concurrency_key=concurrency_key, max_payload=max_payload,
                request=request, requester=requester, notify_url=notify_url, force=force)
            return Submission(job_id, created, reused, request_id)
        if request or requester is not None or notify_url is not None:
            job_id, created, _, request_id, reused = await self.submit_request_json(
                kind, target, payload, run_after=run_after, priority=priority, concurrency_key=concurrency_key,
                max_payload=max_payload, requester=requester, notify_url=notify_url, force=force)
            return Submission(job_id, created, reused, request_id)
        # No view asked for: none is built.
        await self._add_kind(kind)
        rows = await self._fetch("submit_id", kind, target, json.dumps(payload if payload is not None else {}),
                                 run_after, max_payload, priority, concurrency_key)
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
        text = json.dumps(payload if payload is not None else {})
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
        text = json.dumps(payload if payload is not None else {})
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
        text = json.dumps(payload if payload is not None else {})
        await self._add_kind(kind)
        ids = [a if isinstance(a, uuid.UUID) else uuid.UUID(str(a)) for a in after or ()]
        rows = await self._fetch("submit_waiting", kind, target, text, ids, list(await_signals or ()),
                                 _seconds(signal_timeout), max_payload, run_after, priority, concurrency_key,
                                 request, requester, notify_url, max_active, force)
        r = rows[0]
        return r["id"], r["created"], r["view"], r["request_id"], r["reused"]

    async def submit_many(self, kind: str, items: Sequence[tuple[str, dict | None]], *,
                          run_after: dt.datetime | None = None, priority: int | None = None,
                          concurrency_key: str | None = None,
                          max_payload: int = MAX_PAYLOAD_BYTES) -> list[tuple[uuid.UUID, bool]]:
        """Submit (target, payload) pairs of one kind in one statement; answers
        (job id, created) per item, in order, deduplicated as submit() is."""
        if not items:
            return []
        await self._add_kind(kind)
        rows = await self._fetch("submit_many", kind, *_batch(items), run_after, max_payload,
                                 priority, concurrency_key)
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
        (404), not_awaited (409)."""
        job_id = job_id if isinstance(job_id, uuid.UUID) else uuid.UUID(str(job_id))
        first, view = await self.signal_json(job_id, name, data)
        return first, json.loads(view)

    async def signal_json(self, job_id: uuid.UUID, name: str, data: Any = None) -> tuple[bool, str]:
        rows = await self._fetch("signal", job_id, name, json.dumps(data))
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

    async def leave_json(self, request_id: uuid.UUID) -> str:
        """The request leaves (idempotent); answers its job's public view as JSON
        text. QueueError not_found for an unknown request."""
        return await self._fetchval("leave", request_id)

    async def leave(self, request_id: uuid.UUID) -> dict:
        """The request leaves. When it was the last active request of an
        unfinished job, the kind's on_abandon decides: cancel (the default) or
        keep. Answers the job's public view."""
        return json.loads(await self.leave_json(request_id))

    async def may_view(self, job_id: uuid.UUID, requester: str | None, request_id: uuid.UUID | None) -> bool:
        """Did this identity, or the holder of this request id, ever request the job?"""
        return await self._fetchval("may_view", job_id, requester, request_id)

    async def set_kind_request_policy(self, kind: str, *, on_abandon: str = "cancel", on_duplicate: str = "join",
                                      reuse_for: float | None = None, dedupe: str = "global") -> None:
        await self._fetch("set_kind_request_policy", kind, on_abandon, on_duplicate, _seconds(reuse_for), dedupe)

    async def get_job_json(self, job_id: uuid.UUID) -> str | None:
        """The public view as JSON text (relayed as is by the API)."""
        return await self._fetchval("get_job", job_id)

    async def get_job(self, job_id: uuid.UUID) -> dict | None:
        text = await self.get_job_json(job_id)
        return None if text is None else json.loads(text)

    async def wait(self, job_id: uuid.UUID, timeout: float) -> dict | None:
        """The job's public view once it is final, or as it is after `timeout`
        seconds; None for an unknown job. Listens for the job's change
        notifications on one connection (of the pool, held meanwhile) and
        re-reads only when one names the job: it never polls. On a Connection
        inside a transaction, LISTEN starts only at commit: wait outside one."""
        key = str(job_id)
        changed = asyncio.Event()

        def on_change(_conn, _pid, _channel, payload: str) -> None:
            if key in payload:
                changed.set()

        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(timeout, 0.0)
        async with self._listening("jobfeed_changed", on_change) as conn:
            while True:
                changed.clear()  # before reading: a change after the read wakes us
                text = await conn.fetchval(query("get_job"), job_id)
                view = None if text is None else json.loads(text)
                if view is None or view["status"] in TERMINAL:
                    return view
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return view
                try:
                    await asyncio.wait_for(changed.wait(), remaining)
                except asyncio.TimeoutError:
                    pass

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
        return [r[0] for r in await self._fetch("get_jobs", list(job_ids))]

    async def positions(self, job_ids: Sequence[uuid.UUID | str]) -> dict[str, int]:
        """Queue positions of those of these jobs that are due and never started
        (one query for the lot), by id as text."""
        return {str(r["id"]): r["position"] for r in await self._fetch("positions", list(job_ids))}

    async def admin_get_job(self, job_id: uuid.UUID) -> dict | None:
        text = await self._fetchval("admin_get_job", job_id)
        return None if text is None else json.loads(text)

    async def admin_get_jobs_json(self, job_ids: Sequence[uuid.UUID | str]) -> list[str]:
        return [r[0] for r in await self._fetch("admin_get_jobs", list(job_ids))]

    async def admin_list_jobs(self, *, state: str | None = None, kind: str | None = None, limit: int = 50,
                              before: uuid.UUID | None = None) -> list[dict]:
        """Newest first; `before` is the last id of the previous page."""
        rows = await self._fetch("admin_list_jobs", state, kind, limit, before)
        return [json.loads(r[0]) for r in rows]

    async def stats(self, minutes: int = 15, max_age: float = 5.0) -> dict:
        """Counts by kind and state, oldest due job, throughput: as of at most
        max_age seconds ago (the answer's 'as_of'), counted at most once per
        max_age for all callers together."""
        return json.loads(await self._fetchval("stats", minutes, _seconds(max_age)))

    # -- admin actions (QueueError not_found / invalid_state / target_busy)
    async def retry(self, job_id: uuid.UUID) -> dict:
        return json.loads(await self._fetchval("retry", job_id))

    async def cancel(self, job_id: uuid.UUID) -> dict:
        return json.loads(await self._fetchval("cancel", job_id))

    async def set_kind_paused(self, kind: str, paused: bool) -> dict:
        """Pause or resume a kind (QueueError not_found); answers the kind's view."""
        return json.loads(await self._fetchval("set_kind_paused", kind, paused))

    async def bulk(self, action: str, *, state: str | None = None, kind: str | None = None,
                   error_code: str | None = None, ids: Sequence[uuid.UUID] | None = None,
                   batch: int = 500) -> int:
        """Retry or cancel ("retry" | "cancel") every job matching the filter, in
        batches of `batch` jobs, one transaction each; answers how many changed.
        QueueError filter_required when the filter is empty. Safe to repeat."""
        if action not in ("retry", "cancel"):
            raise ValueError(f"unknown bulk action {action!r}")
        ids = None if ids is None else list(ids)
        total, after = 0, None
        while True:
            rows = await self._fetch(f"bulk_{action}", state, kind, error_code, ids, after, batch)
            changed, picked, after = rows[0]
            total += changed
            if picked < batch:
                return total

    # -- periodic jobs (worker/schedules.py)
    async def register_schedule(self, kind: str, schedule: str | None, timezone: str, every: float | None) -> None:
        await self._fetch("register_schedule", kind, schedule, timezone, _seconds(every))

    async def enqueue_slot(self, kind: str, slot: dt.datetime, now: dt.datetime | None = None) -> uuid.UUID | None:
        """The slot's new job, or None when the slot was taken already."""
        return await self._fetchval("enqueue_slot", kind, slot, now)

    async def list_schedules(self) -> list[dict]:
        return [json.loads(r[0]) for r in await self._fetch("list_schedules")]

    # -- worker side: every write is fenced by (id, generation); False = lease lost
    async def claim(self, kinds: Sequence[str], limit: int, worker_id: str,
                    lease: float | None = None) -> list[Job]:
        return (await self.claim_timed(kinds, limit, worker_id, lease))[0]

    async def claim_timed(self, kinds: Sequence[str], limit: int, worker_id: str, lease: float | None = None
                          ) -> tuple[list[Job], list[ClaimTimes]]:
        """claim, and the ClaimTimes of each job claimed."""
        rows = await self._fetch("claim", list(kinds), limit, worker_id, _seconds(lease))
        loads = json.loads
        jobs = [Job(r[0], r[1], r[2], loads(r[3]), r[4], r[5], r[6], r[7], None if r[8] is None else loads(r[8]),
                    r[9], None if r[10] is None else loads(r[10]), None if r[11] is None else loads(r[11]))
                for r in rows]
        return jobs, [ClaimTimes(r[0], r[1], r[12], r[13], r[14]) for r in rows]

    async def set_traceparent(self, job_id: uuid.UUID, traceparent: str) -> None:
        await self._fetch("set_traceparent", job_id, traceparent)

    async def worker_beat(self, worker_id: str, host: str, kinds: Sequence[str], concurrency: int,
                          running: int, lease: float) -> None:
        await self._fetch("worker_beat", worker_id, host, list(kinds), concurrency, running, _seconds(lease))

    async def worker_stopped(self, worker_id: str) -> None:
        await self._fetch("worker_stopped", worker_id)

    async def list_workers(self) -> list[dict]:
        """Workers seen in the last hour: id, host, kinds, concurrency, running,
        started_at, last_seen, lost (silent for two leases)."""
        return json.loads(await self._fetchval("list_workers"))

    async def sample_depth(self) -> int:
        """Record queue depth by kind now (the sweeper, each round)."""
        return await self._fetchval("sample_depth")

    async def charts(self) -> dict:
        """The dashboard's charts over the last hour: depth samples, wait p50/p95
        by kind, failures by kind and code."""
        return json.loads(await self._fetchval("charts"))

    async def next_due(self, kinds: Sequence[str]) -> float | None:
        """Seconds until the next job of these kinds is claimable (<= 0: now)."""
        return (await self.next_due_after_claim(kinds, None))[0]

    async def next_due_after_claim(self, kinds: Sequence[str], before: dt.datetime | None
                                   ) -> tuple[float | None, dt.datetime]:
        """next_due after a claim that took fewer jobs than it asked for, with
        `before` a database time earlier than that claim (None: no such claim):
        jobs due by then that it left, their concurrency key being full, wait
        for a freed slot's notification (next_due_v2). -> (seconds, the
        database's time now: the `before` of the next claim)."""
        rows = await self._fetch("next_due_v2", list(kinds), before)
        due, now = rows[0][0], rows[0][1]
        return (None if due is None else (due - now).total_seconds()), now

    async def extend_many(self, jobs: Sequence[tuple[uuid.UUID, int]], lease: float | None = None) -> set[uuid.UUID]:
        """Renew the leases, by `lease` seconds (default: the kind's lease);
        returns the ids whose lease is lost."""
        if not jobs:
            return set()
        lost = await self._fetchval("extend_many", [j[0] for j in jobs], [j[1] for j in jobs], _seconds(lease))
        return set(lost)

    async def progress(self, job_id: uuid.UUID, generation: int, done: float, total: float | None,
                       message: str | None) -> bool:
        return await self._fetchval("progress", job_id, generation, done, total, message)

    async def checkpoint(self, job_id: uuid.UUID, generation: int, state: Any) -> bool:
        return await self._fetchval("checkpoint", job_id, generation, json.dumps(state))

    async def complete(self, job_id: uuid.UUID, generation: int, result: Any) -> bool:
        return await self._fetchval("complete", job_id, generation, _result_json(result))

    async def complete_many(self, jobs: Sequence[tuple[uuid.UUID, int, Any]]) -> set[uuid.UUID]:
        """Complete (id, generation, result) triples in one statement; returns the
        ids completed (the others had lost their lease)."""
        done = await self._fetchval("complete_many", [j[0] for j in jobs], [j[1] for j in jobs],
                                    [_result_json(j[2]) for j in jobs])
        return set(done)

    async def child_id(self, parent_id: uuid.UUID, generation: int, kind: str, target: str, payload: dict | None,
                       max_payload: int = MAX_PAYLOAD_BYTES) -> uuid.UUID | None:
        """The id a child of (kind, target) has (or will have once the parent's
        outcome writes it); None when the parent's lease is lost. QueueError for
        a submission submit() would refuse."""
        await self._add_kind(kind)
        return await self._fetchval("child_id", parent_id, generation, kind, target,
                                    json.dumps(payload if payload is not None else {}), max_payload)

    async def complete_spawning(self, job_id: uuid.UUID, generation: int, result: Any,
                                children: Sequence[dict]) -> bool:
        """Complete the job and write its children (dicts of id, kind, target,
        payload, priority, concurrency_key) in one fenced transaction."""
        return await self._fetchval("complete_spawning", job_id, generation, _result_json(result),
                                    json.dumps(list(children), default=str))

    async def wait_for(self, job_id: uuid.UUID, generation: int, children: Sequence[dict],
                       wait: Sequence[uuid.UUID]) -> bool:
        """Write the children, then the job waits until every job in `wait` is
        final; fenced like the other outcomes."""
        return await self._fetchval("wait_for", job_id, generation, json.dumps(list(children), default=str),
                                    list(wait))

    async def fail_transient(self, job_id: uuid.UUID, generation: int, code: str, message: str | None,
                             retry_after: float | None = None) -> bool:
        return await self._fetchval("fail_transient", job_id, generation, code, message, _seconds(retry_after))

    async def fail_permanent(self, job_id: uuid.UUID, generation: int, code: str, message: str | None) -> bool:
        return await self._fetchval("fail_permanent", job_id, generation, code, message)

    async def release(self, job_id: uuid.UUID, generation: int, code: str, retry_after: float = 0,
                      message: str | None = None) -> bool:
        return await self._fetchval("release", job_id, generation, code, _seconds(retry_after), message)

    # -- sweeper
    async def sweep_expired(self) -> int:
        return await self._fetchval("sweep_expired")

    async def delete_finished(self, retention: float, limit: int = 1000) -> int:
        return await self._fetchval("delete_finished", _seconds(retention), limit)

    async def delete_old_slots(self, retention: float) -> int:
        """Periodic slots past retention, each kind's newest kept (one bounded batch)."""
        return await self._fetchval("delete_old_slots", _seconds(retention))
