"""The Context a handler is given with its job: progress, checkpoints,
children, lease renewal and files, every write fenced by the job's generation."""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from typing import Any, AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Sequence

from . import files
from .job_errors import LeaseLost, Permanent, WaitFor
from .queue import Job
from .redact import MAX_MESSAGE, fit_to_store
from .retrying import retrying


def _amount(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"progress {name} is a number, not {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        number = float("inf")
    if not 0 <= number < float("inf"):  # NaN fails this too
        raise ValueError(f"progress {name} must be finite and not negative, not {value!r}"[:200])
    return number


def progress_report(done: object, total: object, message: object) -> tuple[float, float | None, str | None]:
    """A progress report checked where the handler makes it (a coalesced one is
    written later, where an error would reach nobody): done, and total when
    given, finite numbers from 0; the message a string, stored as an error's
    message is (cut at MAX_MESSAGE, NUL and lone surrogates as U+FFFD: every
    watcher receives it with every change)."""
    if message is not None and not isinstance(message, str):
        raise TypeError(f"a progress message is a string, not {type(message).__name__}")
    return (_amount("done", done), None if total is None else _amount("total", total),
            None if message is None else fit_to_store(message, MAX_MESSAGE))


class Context:
    """What a handler may do while it holds a job. Every call is fenced by the
    job's generation; LeaseLost means stop now."""

    def __init__(self, queue, job: Job, lease: float):
        self._queue = queue
        self.job = job
        self.lease = lease
        self.lost = asyncio.Event()
        self.heartbeat = True  # the runner renews this job's lease while True
        self.children: list[dict] = []  # submitted by submit(): written with the outcome

    async def submit(self, kind: str, target: str, payload: dict | None = None, *,
                     priority: int | None = None, concurrency_key: str | None = None) -> uuid.UUID:
        """Submit a child job; answers its id at once. The child is written
        only with this attempt's outcome (a completion, or a wait_for), in the
        same fenced transaction: an attempt that fails, is released or lost
        writes none, and every attempt names the same children, so a retry
        never makes a second set. A target an unfinished job already holds
        joins that job (its id is answered). A submission submit() would
        refuse raises Permanent."""
        self._held()
        from .queue import QueueError
        from .submission import InvalidSubmission, check_schedule, check_submission
        try:
            kind, target, payload = check_submission(kind, target, {} if payload is None else payload)
            check_schedule(priority=priority, concurrency_key=concurrency_key)
            child = await self._through_blips(
                lambda: self._queue.child_id(self.job.id, self.job.generation, kind, target, payload),
                f"name job {self.job.id}'s child")
        except (InvalidSubmission, QueueError) as exc:
            raise Permanent(exc.code, f"ctx.submit({kind!r}, {target!r}): {exc.message}") from None
        if child is None:
            self._lose()
        if all(c["id"] != str(child) for c in self.children):
            # a copy: the handler may change its dict before the outcome writes it
            self.children.append({"id": str(child), "kind": kind, "target": target, "payload": copy.deepcopy(payload),
                                  "priority": priority, "concurrency_key": concurrency_key})
        return child

    def wait_for(self, ids: Sequence[uuid.UUID | str]) -> WaitFor:
        """`return ctx.wait_for(ids)`: this attempt ends without a result and
        without counting; the job runs again once every job named (children of
        ctx.submit or any others) is completed, failed or canceled, with them
        in job.children."""
        if isinstance(ids, (str, uuid.UUID)):
            ids = [ids]
        try:
            return WaitFor([i if isinstance(i, uuid.UUID) else uuid.UUID(str(i)) for i in ids])
        except ValueError:
            raise Permanent("unknown_dependency", "ctx.wait_for takes job ids") from None

    async def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        self._held()
        report = progress_report(done, total, message)
        if not await self._queue.progress(self.job.id, self.job.generation, *report):
            self._lose()

    async def checkpoint(self, state: Any) -> None:
        """Save state the next attempt receives as job.checkpoint."""
        self._held()
        if not await self._through_blips(lambda: self._queue.checkpoint(self.job.id, self.job.generation, state),
                                         f"save job {self.job.id}'s checkpoint"):
            self._lose()

    async def _through_blips(self, call: Callable[[], Awaitable[Any]], what: str) -> Any:
        """A call made again while the database is away for a moment (fenced by
        generation, so a repeat is safe), for up to a lease: a blip must not
        cost the handler its attempt."""
        return await retrying(call, until=time.monotonic() + self.lease, what=what)

    async def extend(self) -> None:
        """Renew the lease now (the runner also does it in the background)."""
        self._held()
        lost = await self._queue.extend_many([(self.job.id, self.job.generation)])
        if lost:
            self._lose()

    # Files (worker/files.py): read chunk by chunk, never whole.
    def open_input(self, name: str, start: int = 0, end: int | None = None, *,
                   job_id: uuid.UUID | str | None = None) -> AsyncIterator[bytes]:
        """`async for chunk in ctx.open_input("video")`: the uploaded file's bytes
        (start..end-1 when given); job_id: another job's input (a child reading
        its parent's). FileNotFound when the job has no such input."""
        self._held()
        return files.open_file(self._queue.pool, _job_id(job_id, self.job.id), "in", name, start, end)

    def open_output(self, job_id: uuid.UUID | str, name: str, start: int = 0,
                    end: int | None = None) -> AsyncIterator[bytes]:
        """Another job's output (a parent merging its children's), chunk by chunk."""
        self._held()
        return files.open_file(self._queue.pool, _job_id(job_id, self.job.id), "out", name, start, end)

    async def list_inputs(self, job_id: uuid.UUID | str | None = None) -> list[dict]:
        """The job's inputs: [{"name", "size", "content_type"}], by name."""
        self._held()
        return [f.public() for f in await files.files_of(self._queue.pool, _job_id(job_id, self.job.id), "in")]

    async def save_output(self, name: str, chunks: bytes | Iterable[bytes] | AsyncIterable[bytes],
                          content_type: str = files.DEFAULT_CONTENT_TYPE) -> None:
        """Store a file for GET /api/jobs/{id}/outputs/{name}, replacing one of
        that name; LeaseLost (and nothing visible) when this attempt lost the job."""
        self._held()
        if not await files.save_output(self._queue.pool, self.job.id, self.job.generation, name, chunks,
                                       content_type):
            self._lose()

    def _held(self) -> None:
        """LeaseLost, no call made, once the job is known lost: a fenced call
        said so, or the runner did (its heartbeat, a cancel's notification, or
        its give-up on a handler that ignored its cancellation). A handler
        left behind does no useless writes, nor calls on a closed pool."""
        if self.lost.is_set():
            self._lose()

    def _lose(self) -> None:
        self.lost.set()
        raise LeaseLost(f"job {self.job.id} generation {self.job.generation}: lease lost")


def _job_id(given: uuid.UUID | str | None, own: uuid.UUID) -> uuid.UUID:
    return own if given is None else given if isinstance(given, uuid.UUID) else uuid.UUID(str(given))
