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
import datetime as dt
import logging
import os
import socket
import time
import uuid
from typing import Sequence

from . import metrics, schedules, subtasks, tracing
from .db import Listener
from .queue import ClaimTimes, Job, Queue
from .tasks import TaskSpec
from .claimer import ClaimConnection
from .completions import Completions
from .attempts import Attempts
from .run_context import CANCEL_WAIT, Running, lease_of
from .seats import Seats
from .startup import RESERVE_SECONDS
from .testsignal import Signal, Timer
from .waits import wait_event

log = logging.getLogger("jobfeed.worker")


def default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"


@dataclasses.dataclass(eq=False)
class RunnerSignals:
    """Test hooks (worker/testsignal.py), inert unless a test enables them."""
    heartbeat: Timer = dataclasses.field(default_factory=Timer)  # the wait between two renewals
    renewed: Signal = dataclasses.field(default_factory=Signal)  # after each: (keys renewed, ids lost)
    sleeping: Signal = dataclasses.field(default_factory=Signal)  # the claim loop waits: its timeout
    claimed: Signal = dataclasses.field(default_factory=Signal)  # after each claim: how many jobs it took


class Runner(Attempts):
    def __init__(self, queue: Queue, dsn: str, specs: Sequence[TaskSpec], *, concurrency: int = 10,
                 worker_id: str | None = None, poll_interval: float = 5.0, grace: float = 30.0,
                 budget: float | None = None, reserve: float = RESERVE_SECONDS, max_jobs: int | None = None,
                 cancel_wait: float = CANCEL_WAIT):
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
        self.cancel_wait = cancel_wait
        self.budget = budget
        self.reserve = reserve
        self.max_jobs = max_jobs
        self._turn = 0  # which kind a claim names first (round-robin)
        self._looked_at: dt.datetime | None = None  # the database's time at the last next_due
        self.claimed_count = 0
        self._running: dict[tuple[uuid.UUID, int], Running] = {}
        self._tasks: set[asyncio.Task] = set()
        self._stuck: set[asyncio.Task] = set()  # handlers given up on that still run
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()
        self._beat = asyncio.Event()  # a job started: the heartbeat looks at its lease
        self._deadline: float | None = None
        self._full = False  # the claim loop sleeps for want of free slots
        self._completions = Completions(queue, self._slot_freed)
        self._seats = Seats(dsn, self.kinds, name="jobfeed-worker-seats")
        self._claims = ClaimConnection(dsn)
        self._recording = 0  # handlers done, failures and releases being written
        self._handed_back: set[str] = set()  # kinds of the jobs a stop released
        self.signals = RunnerSignals()
        self._ages = metrics.Ages()

    # -------------------------------------------------------------- control
    def stop(self) -> None:
        """Stop claiming and shut down gracefully (safe from a signal handler)."""
        self._stop.set()
        self._wake.set()
        self._seats.seated(False)  # a turn at waking would fall to a worker that claims no more

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
        subtasks.install(asyncio.get_running_loop())  # a handler's task raising SystemExit ends its attempt only
        listener = Listener(self.dsn, {"jobfeed_due": self._on_due, "jobfeed_fenced": self._on_fenced},
                            on_connect=self._on_listen,
                            name="jobfeed-worker-listen")
        await listener.start()
        heartbeat = asyncio.create_task(self._heartbeat(), name="jobfeed-heartbeat")
        presence = asyncio.create_task(self._presence(), name="jobfeed-presence")
        seats = asyncio.create_task(self._seats.run(), name="jobfeed-seats")
        completions = asyncio.create_task(self._completions.run(), name="jobfeed-completions")
        budget_timer = (asyncio.create_task(self._budget_timer(), name="jobfeed-budget")
                        if self._deadline is not None else None)
        # Periodic kinds: every worker runs their scheduler; the database keeps one job per slot.
        periodics = [s.periodic for s in self.specs.values() if s.periodic is not None]
        scheduler = (asyncio.create_task(schedules.run(self.queue, periodics, self._stop), name="jobfeed-schedules")
                     if periodics and self._deadline is None else None)
        log.info("worker %s: kinds %s, concurrency %d", self.worker_id, ",".join(self.kinds), self.concurrency)
        try:
            await self._loop()
        finally:
            await self._shutdown()
            heartbeat.cancel()
            completions.cancel()
            seats.cancel()
            presence.cancel()
            try:  # leave the workers panel at once rather than be shown lost
                await self.queue.worker_stopped(self.worker_id)
            except Exception as exc:
                log.warning("worker %s: could not sign off (%s)", self.worker_id, exc)
            if budget_timer:
                budget_timer.cancel()
            if scheduler:
                scheduler.cancel()
            await self._claims.close()
            await listener.stop()
            log.info("worker %s: stopped after %d claims", self.worker_id, self.claimed_count)

    async def _loop(self) -> None:
        error_delay = 0.1
        while not self._stop.is_set():
            self._wake.clear()  # before claiming: a NOTIFY arriving meanwhile wakes the wait below
            limit = self._may_claim()
            if limit > 0:
                # Woken from a sleep while full (a slot freed): take turns again
                # now, or a notification arriving during this claim would be
                # judged by the full worker's "not for me" and lost.
                self._seats.seated(True)
            claimed: list[Job] = []
            timings: list[ClaimTimes] = []
            try:
                if limit > 0:
                    with tracing.span("jobfeed claim", attributes={"jobfeed.limit": limit,
                                                                   "jobfeed.worker": self.worker_id}):
                        claimer = await self._claims.queue()
                        claimed, timings = await claimer.claim_timed(self._kinds_in_turn(), limit, self.worker_id)
                        self.signals.claimed.signal(len(claimed))
                        tracing.annotate({"jobfeed.claimed": len(claimed)})
                error_delay = 0.1
            except Exception as exc:  # database down or restarting: keep trying
                log.warning("worker %s: claim failed (%s); retrying in %.1fs", self.worker_id, exc, error_delay)
                await self._sleep(error_delay)
                error_delay = min(error_delay * 2, 5.0)
                continue
            self._ages.claimed(timings)
            parents = {t.id: t.traceparent for t in timings if t.traceparent} if claimed and tracing.active() else {}
            for job in claimed:
                self._start(job, parents.get(job.id))
            if self._deadline is not None or self.max_jobs is not None:
                # A budget run ends when nothing is due (or it may claim no more) and
                # nothing runs, nor waits to be written: a claim refused only because
                # outcomes are unwritten (limit 0) is not the end.
                busy = self._running or self._recording or self._completions.unwritten
                if not busy and ((limit > 0 and not claimed) or self._may_claim() == 0):
                    return
            if claimed and len(claimed) == limit:
                continue  # there may be more waiting
            timeout = self.poll_interval
            if claimed:
                await asyncio.sleep(0)  # the handlers start before the look at what is due next
            if self._may_claim() > 0:
                try:
                    # The last look's time came before this claim: jobs due by
                    # then that it left behind a full concurrency key wait for
                    # a freed slot's notification, not for a time.
                    claimer = await self._claims.queue()
                    due, looked_at = await claimer.next_due_after_claim(
                        self.kinds, self._looked_at if limit > 0 else None)
                    self._looked_at = looked_at
                    if due is not None:
                        timeout = min(timeout, max(due, 0.0) + 0.005)
                except Exception:
                    pass
            free = self._may_claim()
            self._full = free == 0
            self._seats.seated(free > 0)
            self.signals.sleeping.signal(timeout)
            await self._sleep(timeout)

    def _kinds_in_turn(self) -> list[str]:
        """The kinds, each claim starting from the next: claim shares free slots
        among kinds, and the kinds named first get the odd ones."""
        turn, self._turn = self._turn, (self._turn + 1) % len(self.kinds)
        return self.kinds[turn:] + self.kinds[:turn]

    async def _sleep(self, timeout: float) -> None:
        await wait_event(self._wake, timeout)

    def _slot_freed(self) -> None:
        """A job ended, or its outcome was written. Only a loop asleep for want
        of slots has more to claim now (one that slept with slots free found
        nothing due), and a budget run looks again whether it is done."""
        if self._full or self._deadline is not None or self.max_jobs is not None:
            self._wake.set()

    def _on_due(self, _channel: str, payload: str) -> None:
        if self._seats.wakes_me(payload):
            self._wake.set()

    def _on_fenced(self, _channel: str, payload: str) -> None:
        """Attempts someone else ended (a cancel, a replacing duplicate, the
        last requester leaving), as "id:generation,...": ours stop now rather
        than at their next renewal, which would find them lost all the same."""
        for pair in payload.split(","):
            job_id, _, generation = pair.partition(":")
            try:
                key = (uuid.UUID(job_id), int(generation))
            except ValueError:
                continue
            entry = self._running.get(key)
            if entry is not None:
                self._lose(key, entry)

    def _lose(self, key: tuple[uuid.UUID, int], entry: Running) -> None:
        entry.ctx.lost.set()
        self._stop_run(key, entry, "lost")

    async def _on_listen(self) -> None:
        self._wake.set()  # (re)connected: something may have become due meanwhile

    async def _budget_timer(self) -> None:
        assert self._deadline is not None  # started only with a budget
        await asyncio.sleep(max(self._deadline - time.monotonic(), 0))
        log.info("worker %s: time budget used up", self.worker_id)
        self._stop.set()
        self._wake.set()
        self._cancel_all("budget")

    # -------------------------------------------------------------- leases
    async def _heartbeat(self) -> None:
        """Renew each job's lease every third of the lease its claim granted.
        Jobs due within half their interval are renewed together (one call per
        distinct lease); after a failed call, it tries again soon."""
        error_delay = 0.05
        waited_for: float | None = None
        while True:
            self._beat.clear()
            # After a wait that ran its course, act as of the time waited for (a
            # test's timer fires early; in production the two agree).
            now = time.monotonic() if waited_for is None else max(time.monotonic(), waited_for)
            held = [(k, r) for k, r in self._running.items() if r.renewing]
            due: dict[float, list[tuple[tuple[uuid.UUID, int], Running]]] = {}
            for key, entry in held:
                if entry.renew_at - entry.renew_every / 2 <= now:
                    due.setdefault(entry.ctx.lease, []).append((key, entry))
            failed = False
            renewed: list[tuple[uuid.UUID, int]] = []
            lost_ids: set[uuid.UUID] = set()
            for lease, group in due.items():
                try:
                    lost = await self.queue.extend_many([k for k, _ in group], lease)
                except Exception as exc:
                    log.warning("heartbeat failed (%s); trying again in %.2fs", exc, error_delay)
                    failed = True
                    continue
                lost_ids |= set(lost)
                for key, entry in group:
                    renewed.append(key)
                    if key[0] in lost:
                        self._lose(key, entry)
                    else:
                        entry.renew_at = now + entry.renew_every
            if renewed:
                self.signals.renewed.signal((renewed, lost_ids))
            if failed:
                await asyncio.sleep(error_delay)
                error_delay = min(error_delay * 2, 1.0)
                waited_for = None
                continue
            error_delay = 0.05
            next_at = min((r.renew_at for _, r in held if r.renewing), default=now + 1.0)
            # Measured from `now`: a test's fired timer moves time on for the heartbeat.
            waited_for = None if await self._heartbeat_wait(max(next_at - now, 0.01)) else next_at

    async def _heartbeat_wait(self, delay: float) -> bool:
        """Sleep `delay` (through the test hook), or less when a job starts and
        the heartbeat must look at its lease; True when woken early."""
        beat = asyncio.ensure_future(self._beat.wait())
        sleep = asyncio.ensure_future(self.signals.heartbeat.sleep(delay))
        try:
            await asyncio.wait((beat, sleep), return_when=asyncio.FIRST_COMPLETED)
        finally:
            beat.cancel()
            sleep.cancel()
        return beat.done() and not beat.cancelled()

    async def _presence(self) -> None:
        """This worker's row in jobfeed.workers, renewed every third of its
        shortest lease: missing for two leases, it is shown lost."""
        lease = min(lease_of(s) for s in self.specs.values())
        host = socket.gethostname()
        while True:
            try:
                await self.queue.worker_beat(self.worker_id, host, self.kinds, self.concurrency,
                                             len(self._running), lease)
            except Exception as exc:
                log.warning("worker %s: presence beat failed (%s)", self.worker_id, exc)
            await asyncio.sleep(max(lease / 3, 0.05))

    # -------------------------------------------------------------- stopping
    def _cancel_all(self, reason: str) -> None:
        for key, entry in list(self._running.items()):
            self._stop_run(key, entry, reason)
            if reason in ("shutdown", "budget"):  # released: another worker should take it at once
                self._handed_back.add(entry.ctx.job.kind)

    async def _wait_tasks(self, timeout: float) -> None:
        """Until every job's task has ended, or `timeout`. The set changes as
        it waits (a give-up swaps a stuck handler for the write of its
        outcome): looked at again every tenth of a second."""
        until = time.monotonic() + timeout
        while self._tasks and (left := until - time.monotonic()) > 0:
            await asyncio.wait(set(self._tasks), timeout=min(left, 0.1))

    async def _shutdown(self) -> None:
        await self._wait_tasks(self.grace)
        if self._tasks:
            log.info("worker %s: %d jobs still running after %.1fs; releasing them",
                     self.worker_id, len(self._running), self.grace)
            self._cancel_all("shutdown")
            await self._wait_tasks(self.cancel_wait + 10)
        try:  # completions queued by handlers that finished are written before we go
            async with asyncio.timeout(10):
                await self._completions.drained()
        except TimeoutError:
            log.warning("worker %s: completions not written; those jobs will run again", self.worker_id)
        if self._handed_back:
            # A release's notification wakes one seated worker, and the others'
            # view of the seats may still count ours: wake every worker of those kinds.
            try:
                await self.queue.wake_all(sorted(self._handed_back))
            except Exception as exc:  # the poll finds the jobs all the same
                log.warning("worker %s: could not wake the other workers (%s)", self.worker_id, exc)
        if self._stuck:
            log.error("worker %s: %d handlers given up on still run; the process must exit to end them",
                      self.worker_id, len(self._stuck))
