"""One run of a handler, as the runner holds it: the Context handed to the
handler (coalesced progress writes, lease renewal on demand), the runner's
record of the run, and the call itself within the kind's timeout."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from typing import Any

from .context import progress_report
from .queue import Job
from .retrying import RETRYABLE
from .settings import MIN_LEASE
from .tasks import Context, LeaseLost, Permanent, Release, TaskSpec, Transient, WaitFor

log = logging.getLogger("jobfeed.worker")


def lease_of(spec: TaskSpec) -> float:
    assert spec.lease is not None, "the runner gets specs resolved against the settings"
    return spec.lease


class RunContext(Context):
    """The Context the runner hands out. Leases are renewed by the lease the
    claim granted. Progress is coalesced per job: at most one write per
    PROGRESS_INTERVAL (each is an UPDATE and a NOTIFY, and notifying commits
    run one at a time in the whole cluster); reports in between replace each
    other, and the last one is written when the interval is over, or by
    flush() before the outcome, so it always lands. A report the database
    cannot take now (a restart, a lost connection) waits and is tried again,
    later each time: the handler runs on."""

    PROGRESS_INTERVAL = 0.25
    MAX_RETRY_WAIT = 2.0

    def __init__(self, queue, job: Job, lease: float):
        super().__init__(queue, job, lease)
        self._pending: tuple | None = None
        self._last_write = float("-inf")
        self._later: asyncio.Task | None = None
        self._writing: asyncio.Lock | None = None  # writes in the order reported (made at the first)

    async def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        self._held()
        self._pending = progress_report(done, total, message)
        if self._later is not None:
            return  # a write is already planned; it takes this report
        wait = self._last_write + self.PROGRESS_INTERVAL - time.monotonic()
        if wait > 0:
            self._plan(wait)
            return
        try:
            await self.write_pending()
        except RETRYABLE as exc:
            self._not_yet(exc, self.PROGRESS_INTERVAL)

    def _plan(self, wait: float) -> None:
        self._later = asyncio.create_task(self._write_later(wait), name=f"progress-{self.job.id}")

    def _not_yet(self, exc: BaseException, waited: float) -> None:
        """write_pending() kept the report: try again later, twice as late each time."""
        wait = min(waited * 2, self.MAX_RETRY_WAIT)
        log.warning("job %s: could not write progress yet (%s: %s); trying again in %.2fs",
                    self.job.id, type(exc).__name__, exc, wait)
        if self._later is None:
            self._plan(wait)

    async def _write_later(self, wait: float) -> None:
        await asyncio.sleep(wait)
        self._later = None
        try:
            await self.write_pending()
        except LeaseLost:
            pass  # the handler hears of it at its next call, or from the heartbeat
        except RETRYABLE as exc:
            self._not_yet(exc, wait)
        except Exception as exc:
            log.warning("job %s: writing progress failed (%s)", self.job.id, exc)

    @property
    def unwritten(self) -> bool:
        """A report waits, or one is being written."""
        return self._pending is not None or (self._writing is not None and self._writing.locked())

    async def flush(self) -> None:
        """The handler's: write the report that waits now, if any (LeaseLost if
        the job is gone). The database away for a moment, the report is kept and
        tried again later, as progress() does: the handler runs on, and the
        last report is still written before the outcome."""
        self._held()
        try:
            await self.write_pending()
        except RETRYABLE as exc:
            self._not_yet(exc, self.PROGRESS_INTERVAL)

    async def write_pending(self) -> None:
        """Write the report that waits, if any (LeaseLost if the job is gone);
        a database error is raised, the report kept for the next write."""
        if self._writing is None:
            self._writing = asyncio.Lock()
        async with self._writing:
            pending, self._pending = self._pending, None
            if pending is None:
                return
            self._last_write = time.monotonic()
            try:
                ok = await self._queue.progress(self.job.id, self.job.generation, *pending)
            except BaseException:
                if self._pending is None:
                    self._pending = pending  # not written: the next flush takes it
                raise
            if not ok:
                self._lose()

    def close(self) -> None:
        """The handler is over: a planned write goes now through write_pending() or never."""
        if self._later is not None:
            self._later.cancel()
            self._later = None

    async def extend(self) -> None:
        self._held()
        if await self._queue.extend_many([(self.job.id, self.job.generation)], self.lease):
            self._lose()


# How long a canceled handler has to end before the runner gives up on it:
# writes its outcome (timeout, release) and leaves the task behind, for a
# handler that catches CancelledError and goes on can hold neither a slot nor
# the worker's exit for ever.
CANCEL_WAIT = 5.0


@dataclasses.dataclass
class Running:
    ctx: RunContext
    task: asyncio.Task | None = None
    stop_reason: str | None = None  # why we cancelled the handler: lost | shutdown | budget | timeout | exit
    exit: BaseException | None = None  # the SystemExit/KeyboardInterrupt of a task it started (subtasks.py)
    recording: bool = False         # the handler is done; its outcome is being written
    renew_at: float = 0.0           # monotonic time of the next lease renewal
    started: float = 0.0            # monotonic time the attempt started
    abandoned: bool = False         # the runner gave up on the handler and wrote its outcome for it
    ended: bool = False             # the attempt left the runner's books
    timer: asyncio.TimerHandle | None = None  # gives up past the kind's timeout
    deadline: float | None = None   # monotonic time the run's timeout ends (a kind with one)

    @property
    def renewing(self) -> bool:
        """The heartbeat renews its lease: until its outcome is being written,
        also while a stopping worker waits for the handler to end (a lease
        lapsing then would count an attempt the release must not) and while
        an exit cancels it (the failure is still to be written), never once
        the lease is lost."""
        return (self.ctx.heartbeat and not self.recording and not self.abandoned
                and self.stop_reason in (None, "shutdown", "budget", "exit"))

    @property
    def renew_every(self) -> float:
        # a third of the lease, no more often than a third of the shortest one
        return max(self.ctx.lease, MIN_LEASE) / 3

    def stop(self, reason: str) -> bool:
        """Cancel the handler (never the write of its outcome); True if this did."""
        if self.stop_reason is None and not self.recording and self.task is not None:
            self.stop_reason = reason
            self.task.cancel()
            return True
        return False


def timed_out(spec: TaskSpec, job: Job) -> Transient:
    """A run past its kind's timeout, said in the log too: it raised nothing
    (it was canceled), and an operator looks there first."""
    log.warning("job %s (%s): attempt %d of %d ran past its timeout of %gs and was canceled", job.id, job.kind,
                job.attempt, job.max_attempts, spec.timeout)
    return Transient("timeout", f"the run took longer than its timeout of {spec.timeout:g}s")


def stopped(reason: str, spec: TaskSpec, job: Job) -> tuple[str, Any]:
    """The outcome of a run the runner stopped: a stopping worker releases it
    (another takes it at once, no attempt counted); a lost one writes nothing."""
    if reason == "timeout":
        return ("error", timed_out(spec, job))
    if reason in ("shutdown", "budget"):
        return ("error", Release(reason, f"worker {reason}", retry_after=0))
    return ("lost", None)


async def call_handler(spec: TaskSpec, job: Job, ctx: Context):
    """Run the handler, within the kind's timeout if it has one: past it, the
    run is canceled and ends as a transient failure with code "timeout"."""
    if spec.timeout is None:
        return await spec.handler(job, ctx)
    loop = asyncio.get_running_loop()
    window = asyncio.timeout(spec.timeout)

    def past() -> bool:
        deadline = window.when()
        return window.expired() or (deadline is not None and loop.time() > deadline)

    result = None
    try:
        async with window:
            result = await spec.handler(job, ctx)
    except asyncio.CancelledError:
        raise  # the runner's stop (lost, shutdown): its outcome, not a timeout
    except BaseException:  # TimeoutError, or raised while being canceled or after blocking past it
        if not past():
            raise
    # also when the handler caught its cancellation and returned, or blocked the
    # event loop past its deadline (no cancellation could reach it): its
    # outcome came past the timeout
    if past():
        # not the worker's any more (given up on, or its lease lost): lost, and
        # no word of a timeout, which its give-up already wrote and logged
        ctx._held()
        raise timed_out(spec, job) from None
    return result


async def run_again_with_no_children(spec: TaskSpec, ctx: RunContext):
    """After a wait_for naming no job, which has nothing to wait for: the run
    it asks for comes at once, in this attempt, with job.children == []
    (waiting, the job would be due at once, claimed with no children to show,
    and wait again, without end)."""
    ctx.job = dataclasses.replace(ctx.job, children=[])
    result = await call_handler(spec, ctx.job, ctx)
    if isinstance(result, WaitFor) and not result.ids:
        raise Permanent("invalid_wait", "wait_for named no job, again in the run with job.children == []")
    return result
