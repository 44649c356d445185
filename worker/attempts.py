"""One job's run, the runner's part that holds it from claim to written
outcome: its task runs the handler (within the kind's timeout), turns what the
handler did into an outcome, and writes it (a completion through the batch
writer, any other outcome at once, its slot freed first). A handler stopped
(lost lease, a stopping worker, its timeout) that does not end within
cancel_wait is given up on: its outcome is written for it and its task left
behind."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from typing import Any

from . import logs, metrics, redact, subtasks, tracing
from .completions import Completions
from .outcomes import LOST, Outcome, as_raised, outcome_label, record_outcome
from .queue import Job, Queue
from .queue_calls import UNSTORABLE_CODE, result_json
from .retrying import retrying
from .startup import leave_behind
from .run_context import Running, RunContext, call_handler, lease_of, run_again_with_no_children, stopped
from .tasks import Abandon, JobError, LeaseLost, TaskSpec, Transient, WaitFor

log = logging.getLogger("jobfeed.worker")


class Attempts:
    """Mixed into Runner, which holds the state named here."""
    queue: Queue
    specs: dict[str, TaskSpec]
    worker_id: str
    cancel_wait: float
    claimed_count: int
    _running: dict[tuple[uuid.UUID, int], Running]
    _tasks: set[asyncio.Task]
    _stuck: set[asyncio.Task]  # handlers given up on that still run
    _beat: asyncio.Event
    _completions: Completions
    _recording: int
    _ages: metrics.Ages

    def _slot_freed(self) -> None:
        raise NotImplementedError  # Runner's

    def _start(self, job: Job, traceparent: str | None = None) -> None:
        spec = self.specs[job.kind]
        key = (job.id, job.generation)
        # The lease the claim granted, which may differ from ours (the kind's
        # settings in the database are the last registering worker's).
        entry = Running(RunContext(self.queue, job, job.lease or lease_of(spec)), started=time.monotonic())
        entry.renew_at = entry.started + entry.renew_every
        self._arm_timeout(key, entry, spec)
        self._running[key] = entry
        self._beat.set()
        self.claimed_count += 1
        metrics.CLAIMS.labels(job.kind).inc()
        metrics.RUNNING.labels(job.kind).inc()
        # One task per job runs the handler, then queues or writes its outcome.
        # Everything logged while it runs (the handler's own lines too) names the job.
        job_id = str(job.id)
        context = logs.job_context(job_id=job_id, kind=job.kind, attempt=job.attempt,
                                   generation=job.generation, worker=self.worker_id)
        entry.task = asyncio.create_task(self._run_job(key, entry, spec, traceparent),
                                         name=f"job-{job_id}-{job.generation}",
                                         context=context)
        self._tasks.add(entry.task)
        entry.task.add_done_callback(self._tasks.discard)

    async def _run_job(self, key: tuple[uuid.UUID, int], entry: Running, spec: TaskSpec,
                       traceparent: str | None) -> None:
        if not tracing.active():
            return await self._run_attempt(key, entry, spec)
        job = entry.ctx.job
        attributes = {"jobfeed.job_id": str(job.id), "jobfeed.kind": job.kind, "jobfeed.attempt": job.attempt,
                      "jobfeed.generation": job.generation, "jobfeed.worker": self.worker_id}
        with tracing.span(f"jobfeed run {job.kind}", parent=traceparent, attributes=attributes):
            await self._run_attempt(key, entry, spec)

    def _arm_timeout(self, key: tuple[uuid.UUID, int], entry: Running, spec: TaskSpec) -> None:
        """A run of a kind with a timeout: its deadline, and a give-up
        cancel_wait past it for a handler that ignores the timeout's cancel."""
        if spec.timeout is None:
            return
        if entry.timer is not None:
            entry.timer.cancel()
        entry.deadline = time.monotonic() + spec.timeout
        entry.timer = asyncio.get_running_loop().call_later(spec.timeout + self.cancel_wait, self._give_up,
                                                            key, entry, "timeout")

    async def _run_attempt(self, key: tuple[uuid.UUID, int], entry: Running, spec: TaskSpec) -> None:
        # For the tasks the handler starts. Taken back when the run ends: the
        # task's context holding the entry, which holds the task, is a cycle
        # that only the garbage collector would free, a job's worth of objects
        # per job.
        token = subtasks.on_exit.set(functools.partial(self._exited, key, entry))
        try:
            outcome = await self._outcome(key, entry, spec)
            if outcome is not None and not entry.abandoned:
                await self._record(key, entry, outcome)
        finally:
            subtasks.on_exit.reset(token)
            if not entry.abandoned:  # else the give-up's task ends it
                self._end(key, entry)

    async def _outcome(self, key: tuple[uuid.UUID, int], entry: Running, spec: TaskSpec) -> tuple[str, Any] | None:
        """The handler's run as an outcome to write; None when its completion
        went to the batch writer, or the runner gave up on it meanwhile."""
        job = entry.ctx.job
        try:
            result = await call_handler(spec, job, entry.ctx)
            if isinstance(result, WaitFor) and not result.ids:
                self._arm_timeout(key, entry, spec)  # the run again has a timeout of its own
                result = await run_again_with_no_children(spec, entry.ctx)
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            assert task is not None  # we run in a task
            if entry.stop_reason is not None:
                task.uncancel()
                return self._stopped(entry, spec)
            if task.cancelling():
                raise  # not ours: the runner itself is being torn down
            # the handler's own: a task it awaited was canceled
            self._log_raised(entry)
            return ("error", redact.unexpected(exc))
        except LeaseLost as exc:
            if entry.ctx.lost.is_set():  # its context said so: the job is another's now
                return ("lost", None)
            # raised by the handler itself while the lease holds: an error like
            # any other (as "lost", nothing would be written until the lease ran out)
            self._log_raised(entry)
            return ("error", redact.unexpected(exc))
        except Abandon:
            return ("abandoned", None)
        except JobError as exc:
            return ("error", as_raised(redact.redacted(exc), spec))
        except BaseException as exc:
            # a bug or an unclassified error: worth retrying; a library's
            # sys.exit() too (or GeneratorExit, KeyboardInterrupt): it ends this
            # attempt, not the worker and its other jobs
            self._log_raised(entry)
            return ("error", redact.unexpected(exc))
        if entry.abandoned:
            return None
        if entry.stop_reason == "exit":  # it returned from the cancel: the exit stands
            return self._stopped(entry, spec)
        if isinstance(result, WaitFor):
            return ("wait", result)  # with its children, in one call of its own (not the batch)
        try:
            text = result_json(result)
        except (TypeError, ValueError, RecursionError) as exc:  # a set, NaN, a cycle
            return ("error", Transient(UNSTORABLE_CODE, f"the result is not JSON: {exc}"))
        if entry.ctx.children:
            return ("spawn", result)  # with its children, in one call of its own
        seconds = time.monotonic() - entry.started
        tracing.annotate({"jobfeed.outcome": metrics.COMPLETED, "jobfeed.code": ""})
        entry.recording = True  # from here on, a stop() must not cancel it
        await self._flush_progress(entry)
        with tracing.span("jobfeed outcome", attributes={"jobfeed.outcome": metrics.COMPLETED}):
            self._completions.add(job.id, job.generation, text, entry.ctx.lease,  # in a batch
                                  functools.partial(self._count_end, job, seconds))
        return None

    @staticmethod
    def _log_raised(entry: Running) -> None:
        """The traceback of what the handler raised (within an except block),
        unless the runner gave up on it: its outcome is written, and a handler
        left behind hitting the closed pool at shutdown is no news."""
        if not entry.abandoned:
            log.exception("job %s (%s) raised", entry.ctx.job.id, entry.ctx.job.kind)

    async def _record(self, key: tuple[uuid.UUID, int], entry: Running, outcome: tuple[str, Any]) -> None:
        """Write an outcome other than a completion, its slot freed first."""
        job = entry.ctx.job
        try:
            seconds = time.monotonic() - entry.started
            label, code = outcome_label(job, outcome)
            tracing.annotate({"jobfeed.outcome": label, "jobfeed.code": code})
            entry.recording = True
            if outcome[0] in ("error", "wait", "spawn"):
                await self._flush_progress(entry)
            entry.ctx.close()
            self._running.pop(key, None)
            self._recording += 1
            self._slot_freed()
            written = LOST  # unless its write says otherwise
            try:
                with tracing.span("jobfeed outcome", attributes={"jobfeed.outcome": label, "jobfeed.code": code}):
                    written = await record_outcome(self.queue, job, outcome[0], outcome[1], entry.ctx.lease,
                                                   entry.ctx.children)
            finally:
                self._count_end(job, seconds, written)
                self._recording -= 1
                self._slot_freed()
        except Exception:
            log.exception("job %s: recording the outcome failed; the lease will expire and it runs again", job.id)

    def _end(self, key: tuple[uuid.UUID, int], entry: Running) -> None:
        if entry.ended:
            return
        entry.ended = True
        if entry.timer is not None:
            entry.timer.cancel()
        entry.ctx.close()
        self._running.pop(key, None)
        metrics.RUNNING.labels(entry.ctx.job.kind).dec()
        self._slot_freed()

    def _stop_run(self, key: tuple[uuid.UUID, int], entry: Running, reason: str) -> None:
        """Cancel a handler; one that has not ended cancel_wait later is given up on."""
        if entry.stop(reason):
            asyncio.get_running_loop().call_later(self.cancel_wait, self._give_up, key, entry, reason)

    def _exited(self, key: tuple[uuid.UUID, int], entry: Running, exc: BaseException) -> None:
        """A task the handler started raised SystemExit or KeyboardInterrupt
        (caught by subtasks.py before it could end the worker): the attempt
        ends as if the handler had raised it, a transient internal_error."""
        if entry.abandoned:
            return  # given up on: what its tasks do now is dropped, quietly
        job = entry.ctx.job
        log.error("job %s (%s): %s raised in a task its handler started; the attempt ends, not the worker",
                  job.id, job.kind, type(exc).__name__, exc_info=exc)
        if not entry.ended:
            entry.exit = entry.exit or exc
            self._stop_run(key, entry, "exit")

    def _give_up(self, key: tuple[uuid.UUID, int], entry: Running, reason: str) -> None:
        """The handler ignored its cancellation (caught CancelledError and went
        on): write the outcome its stop meant, free its slot and leave the task
        behind, out of the runner's books. Whatever it does later is dropped,
        quietly: its context is lost (its ctx calls raise LeaseLost, no call
        made), and what it raises is not logged."""
        if entry.ended or entry.recording or entry.task is None or entry.task.done():
            return
        if entry.stop_reason is None:  # past the kind's timeout, whose cancel it ignored
            entry.stop_reason = reason  # no more renewals
            entry.task.cancel()
        entry.abandoned = True
        entry.ctx.lost.set()
        job = entry.ctx.job
        log.error("job %s (%s): the handler did not end %gs after being canceled (%s); leaving it behind",
                  job.id, job.kind, self.cancel_wait, entry.stop_reason)
        self._tasks.discard(entry.task)
        leave_behind(entry.task)  # nor will the process wait for it at its exit
        self._stuck.add(entry.task)
        entry.task.add_done_callback(self._stuck.discard)
        spec = self.specs[job.kind]
        task = asyncio.create_task(self._record_given_up(key, entry, self._stopped(entry, spec)),
                                   name=f"job-{job.id}-{job.generation}-given-up")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    def _stopped(entry: Running, spec: TaskSpec) -> tuple[str, Any]:
        """The outcome of a run the runner stopped. A worker's stop that came
        after the run's timeout had passed finds it timed out: released, it
        would never use up its attempts."""
        assert entry.stop_reason is not None
        reason = entry.stop_reason
        if reason == "exit":
            assert entry.exit is not None
            return ("error", redact.unexpected(entry.exit))
        if reason in ("shutdown", "budget") and entry.deadline is not None and time.monotonic() >= entry.deadline:
            reason = "timeout"
        return stopped(reason, spec, entry.ctx.job)

    async def _record_given_up(self, key: tuple[uuid.UUID, int], entry: Running, outcome: tuple[str, Any]) -> None:
        try:
            await self._record(key, entry, outcome)
        finally:
            self._end(key, entry)

    def _count_end(self, job: Job, seconds: float, written: Outcome) -> None:
        """An attempt's outcome in the metrics, as written (LOST when its write
        found the lease gone: what the worker saw, not what it meant to write)."""
        label, code = outcome_label(job, written)
        metrics.attempt_ended(job.kind, label, code, seconds)
        self._ages.ended(job.id, job.generation, job.kind, label)

    async def _flush_progress(self, entry: Running) -> None:
        """The last progress report before the outcome lands first."""
        entry.ctx.close()
        if not entry.ctx.unwritten:
            return  # most jobs: nothing reported, or all of it written
        try:
            await retrying(entry.ctx.write_pending, until=time.monotonic() + entry.ctx.lease,
                           what=f"write job {entry.ctx.job.id}'s last progress")
        except LeaseLost:
            pass  # the outcome's write, fenced too, will say so
        except Exception as exc:
            log.warning("job %s: writing its last progress failed (%s)", entry.ctx.job.id, exc)
