"""The worker: claims jobs in batches up to its free slots, runs their handlers
concurrently, renews their leases in one background heartbeat, and records each
outcome fenced by generation.

Wakes on NOTIFY jobfeed_due, polls as a fallback, and sleeps until the next due
job, so a lost notification costs latency, never a job. On stop (SIGTERM/SIGINT)
it claims nothing more, lets running handlers finish within the grace period,
then releases what is left so another worker takes it at once."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import socket
import time
import uuid
from typing import Sequence

from . import redact
from .db import Listener
from .queue import Job, Queue
from .tasks import Abandon, Context, JobError, LeaseLost, Permanent, Release, TaskSpec

log = logging.getLogger("jobfeed.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


def _lease(spec: TaskSpec) -> float:
    assert spec.lease is not None, "the runner gets specs resolved against the settings"
    return spec.lease


@dataclasses.dataclass
class _Running:
    ctx: Context
    task: asyncio.Task | None = None
    stop_reason: str | None = None  # why we cancelled the handler: lost | shutdown | budget
    recording: bool = False         # the handler is done; its outcome is being written

    def stop(self, reason: str) -> None:
        """Cancel the handler (never the write of its outcome)."""
        if self.stop_reason is None and not self.recording and self.task is not None:
            self.stop_reason = reason
            self.task.cancel()


class _Completions:
    """Completions from many handlers, written with one complete_many call by one
    task: while a call is in flight the next batch gathers, so a busy worker
    writes in batches and an idle one at once. A handler's task ends as soon as
    its result is queued here; `unwritten` counts what waits (the runner caps
    it), and drained() waits for all of it (shutdown)."""

    MAX_BATCH = 1000

    def __init__(self, queue: Queue, on_written):
        self.queue = queue
        self.on_written = on_written
        self.unwritten = 0
        self._pending: list[tuple[uuid.UUID, int, object]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, job_id: uuid.UUID, generation: int, result) -> None:
        self._pending.append((job_id, generation, result))
        self.unwritten += 1
        self._idle.clear()
        self._wake.set()

    async def drained(self) -> None:
        await self._idle.wait()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._pending:
                batch, self._pending = self._pending[:self.MAX_BATCH], self._pending[self.MAX_BATCH:]
                try:
                    completed = await self.queue.complete_many(batch)
                    for job_id, generation, _ in batch:
                        if job_id not in completed:
                            log.info("job %s gen %d: lease lost before its completion was recorded",
                                     job_id, generation)
                except Exception:
                    # Those jobs stay running until their leases expire, then run again.
                    log.exception("recording %d completions failed", len(batch))
                self.unwritten -= len(batch)
                self.on_written()
            self._idle.set()


class Runner:
    def __init__(self, queue: Queue, dsn: str, specs: Sequence[TaskSpec], *, concurrency: int = 10,
                 worker_id: str | None = None, poll_interval: float = 5.0, grace: float = 30.0,
                 budget: float | None = None, reserve: float = 30.0, max_jobs: int | None = None):
        if not specs:
            raise ValueError("a worker needs at least one kind to run")
        self.queue = queue
        self.dsn = dsn
        self.specs = {s.kind: s for s in specs}
        self.kinds = list(self.specs)
        self.concurrency = concurrency
        self.worker_id = worker_id or default_worker_id()
        self.poll_interval = poll_interval
        self.grace = grace
        self.budget = budget
        self.reserve = reserve
        self.max_jobs = max_jobs
        self.heartbeat_interval = max(min(_lease(s) for s in specs) / 3, 0.05)
        self.claimed_count = 0
        self._running: dict[tuple[uuid.UUID, int], _Running] = {}
        self._tasks: set[asyncio.Task] = set()
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._deadline: float | None = None
        self._completions = _Completions(queue, self._wake.set)
        self._recording = 0  # handlers done, failures and releases being written

    # -------------------------------------------------------------- control
    def stop(self) -> None:
        """Stop claiming and shut down gracefully (safe from a signal handler)."""
        self._stop.set()
        self._wake.set()

    @property
    def running_count(self) -> int:
        return len(self._running)

    def _may_claim(self) -> int:
        """How many jobs we may claim now."""
        if self._stop.is_set():
            return 0
        # A finished handler frees its slot before its outcome is written, so the
        # next claim overlaps the last batch's write; at most `concurrency`
        # outcomes may wait unwritten.
        unwritten = self._recording + self._completions.unwritten
        free = self.concurrency - len(self._running) - max(unwritten - self.concurrency, 0)
        if self.max_jobs is not None:
            free = min(free, self.max_jobs - self.claimed_count)
        if self._deadline is not None and self._deadline - time.monotonic() < self.reserve:
            return 0  # claiming now and timing out would burn an attempt
        return max(free, 0)

    # -------------------------------------------------------------- main loop
    async def run(self) -> None:
        if self.budget is not None:
            self._deadline = time.monotonic() + self.budget
        listener = Listener(self.dsn, {"jobfeed_due": self._on_due}, on_connect=self._on_listen,
                            name="jobfeed-worker-listen")
        await listener.start()
        heartbeat = asyncio.create_task(self._heartbeat(), name="jobfeed-heartbeat")
        completions = asyncio.create_task(self._completions.run(), name="jobfeed-completions")
        budget_timer = (asyncio.create_task(self._budget_timer(), name="jobfeed-budget")
                        if self._deadline is not None else None)
        log.info("worker %s: kinds %s, concurrency %d", self.worker_id, ",".join(self.kinds), self.concurrency)
        try:
            await self._loop()
        finally:
            await self._shutdown()
            heartbeat.cancel()
            completions.cancel()
            if budget_timer:
                budget_timer.cancel()
            await listener.stop()
            log.info("worker %s: stopped after %d claims", self.worker_id, self.claimed_count)

    async def _loop(self) -> None:
        error_delay = 0.1
        while not self._stop.is_set():
            self._wake.clear()  # before claiming: a NOTIFY arriving meanwhile wakes the wait below
            limit = self._may_claim()
            claimed: list[Job] = []
            try:
                if limit > 0:
                    claimed = await self.queue.claim(self.kinds, limit, self.worker_id)
                error_delay = 0.1
            except Exception as exc:  # database down or restarting: keep trying
                log.warning("worker %s: claim failed (%s); retrying in %.1fs", self.worker_id, exc, error_delay)
                await self._sleep(error_delay)
                error_delay = min(error_delay * 2, 5.0)
                continue
            for job in claimed:
                self._start(job)
            if self._deadline is not None or self.max_jobs is not None:
                if not claimed and not self._running:
                    return  # a budget run ends when nothing is due and nothing runs
                if self._may_claim() == 0 and not self._running:
                    return
            if claimed and len(claimed) == limit:
                continue  # there may be more waiting
            timeout = self.poll_interval
            if self._may_claim() > 0:
                try:
                    due = await self.queue.next_due(self.kinds)
                    if due is not None:
                        timeout = min(timeout, max(due, 0.0) + 0.005)
                except Exception:
                    pass
            await self._sleep(timeout)

    async def _sleep(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self._wake.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    def _on_due(self, _channel: str, kind: str) -> None:
        if kind in self.specs:
            self._wake.set()

    async def _on_listen(self) -> None:
        self._wake.set()  # (re)connected: something may have become due meanwhile

    async def _budget_timer(self) -> None:
        assert self._deadline is not None  # started only with a budget
        await asyncio.sleep(max(self._deadline - time.monotonic(), 0))
        log.info("worker %s: time budget used up", self.worker_id)
        self._stop.set()
        self._wake.set()
        self._cancel_all("budget")

    # -------------------------------------------------------------- one job
    def _start(self, job: Job) -> None:
        spec = self.specs[job.kind]
        key = (job.id, job.generation)
        entry = _Running(Context(self.queue, job, _lease(spec)))
        self._running[key] = entry
        self.claimed_count += 1
        # One task per job runs the handler, then queues or writes its outcome.
        entry.task = asyncio.create_task(self._run_job(key, entry, spec), name=f"job-{job.id}-{job.generation}")
        self._tasks.add(entry.task)
        entry.task.add_done_callback(self._tasks.discard)

    async def _run_job(self, key: tuple[uuid.UUID, int], entry: _Running, spec: TaskSpec) -> None:
        job = entry.ctx.job
        try:
            try:
                result = await spec.handler(job, entry.ctx)
            except asyncio.CancelledError:
                if entry.stop_reason is None:
                    raise  # not ours: the runner itself is being torn down
                asyncio.current_task().uncancel()  # type: ignore[union-attr]  # we run in a task
                outcome: tuple[str, JobError | None]
                if entry.stop_reason in ("shutdown", "budget"):
                    outcome = ("error", Release(entry.stop_reason, f"worker {entry.stop_reason}", retry_after=0))
                else:
                    outcome = ("lost", None)
            except LeaseLost:
                outcome = ("lost", None)
            except Abandon:
                outcome = ("abandoned", None)
            except JobError as exc:
                outcome = ("error", redact.redacted(exc))
            except Exception as exc:  # a bug or an unclassified error: worth retrying
                log.exception("job %s (%s) raised", job.id, job.kind)
                outcome = ("error", redact.unexpected(exc))
            else:
                self._completions.add(job.id, job.generation, result)  # written in a batch
                return
            entry.recording = True
            self._running.pop(key, None)
            self._recording += 1
            self._wake.set()
            try:
                await self._record(job, *outcome)
            finally:
                self._recording -= 1
                self._wake.set()
        except Exception:
            log.exception("job %s: recording the outcome failed; the lease will expire and it runs again", job.id)
        finally:
            self._running.pop(key, None)
            self._wake.set()

    async def _record(self, job: Job, what: str, value) -> None:
        q, ident = self.queue, (job.id, job.generation)
        if what in ("lost", "abandoned"):
            log.info("job %s gen %d: %s, nothing recorded", job.id, job.generation,
                     "lease lost" if what == "lost" else "abandoned by its handler")
            return
        if isinstance(value, Permanent):
            ok = await q.fail_permanent(*ident, value.code, value.message)
        elif isinstance(value, Release):
            ok = await q.release(*ident, value.code, value.retry_after or 0, value.message)
        else:
            ok = await q.fail_transient(*ident, value.code, value.message, value.retry_after)
        if not ok:
            log.info("job %s gen %d: lease lost before its outcome (%s) was recorded", job.id, job.generation, what)

    # -------------------------------------------------------------- leases
    async def _heartbeat(self) -> None:
        while True:
            await asyncio.sleep(self.heartbeat_interval)
            held = [(k, r) for k, r in self._running.items()
                    if r.ctx.heartbeat and r.stop_reason is None and not r.recording]
            if not held:
                continue
            try:
                lost = await self.queue.extend_many([k for k, _ in held])
            except Exception as exc:
                log.warning("heartbeat failed (%s); will try again", exc)
                continue
            for key, entry in held:
                if key[0] in lost:
                    entry.ctx.lost.set()
                    entry.stop("lost")

    # -------------------------------------------------------------- stopping
    def _cancel_all(self, reason: str) -> None:
        for entry in list(self._running.values()):
            entry.stop(reason)

    async def _shutdown(self) -> None:
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=self.grace)
            if pending:
                log.info("worker %s: %d jobs still running after %.1fs; releasing them",
                         self.worker_id, len(pending), self.grace)
                self._cancel_all("shutdown")
                await asyncio.wait(set(self._tasks), timeout=10)
        try:  # completions queued by handlers that finished are written before we go
            await asyncio.wait_for(self._completions.drained(), 10)
        except asyncio.TimeoutError:
            log.warning("worker %s: completions not written; those jobs will run again", self.worker_id)
