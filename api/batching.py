"""Group commit for POST /api/jobs.

Each submission is a durable commit: alone, a request pays a round trip, a
function call and a WAL flush of its own, and PostgreSQL's CPU per request is
what limits how many a process answers. Submissions that arrive while earlier
ones are being written wait in `pending`; the next flush writes them all with
one `submit_many_requests` per kind and schedule (one statement, one commit) and answers each
request from its row. Each submission is also a request (who waits for the
job): its row is written by the same statement. A request that finds nothing in flight is written at the
next turn of the event loop, so a lone request waits no longer than before.

One flush at a time: commits that NOTIFY take turns in PostgreSQL anyway (one
lock for all of them, held through the WAL flush), so flushes side by side
only made each batch smaller, and a batch's fixed cost is most of a small
one's. A flush that takes longer than STALL (waiting for a row lock, say) is
no reason for everyone else to wait: another starts beside it, up to
max_flushes.

Nothing about a submission changes: the answer is sent only after its commit,
dedupe works across and within batches (the first of two requests for one
target creates the job, the second shares it), and one bad item does not cost
its neighbours: the batch is refused as a whole, then each of its items is
submitted alone and gets its own answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

import asyncpg

from jobfeed.worker.queue import Queue, QueueError
from jobfeed.worker.submission import Schedule

# (job id, created, public view as JSON text, request id, reused)
Answer = tuple[uuid.UUID, bool, str, uuid.UUID, bool]
NOW = Schedule()  # due now, the kind's priority, no concurrency key
STALL = 0.05  # seconds a flush runs before another may start beside it


@dataclasses.dataclass
class _Item:
    kind: str
    target: str
    payload: dict
    schedule: Schedule
    answer: asyncio.Future
    requester: str | None = None
    notify_url: str | None = None
    force: bool = False


class SubmitBatcher:
    def __init__(self, queue: Queue, *, max_payload: int, max_batch: int = 256, max_flushes: int = 4,
                 max_active: int | None = None):
        self.queue = queue
        self.max_payload = max_payload
        self.max_active = max_active  # per requester (JOBFEED_MAX_ACTIVE_PER_REQUESTER)
        self.max_batch = max(1, max_batch)
        self.max_flushes = max(1, max_flushes)  # statements in flight at once (pool connections)
        self._pending: list[_Item] = []
        self._flushing = 0
        self._scheduled = False
        self._stall: asyncio.TimerHandle | None = None  # armed while pending items wait for a flush
        self._tasks: set[asyncio.Task] = set()
        self.batches = 0  # statements written (for /metrics)
        self.items = 0

    async def submit(self, kind: str, target: str, payload: dict, schedule: Schedule = NOW, *,
                     requester: str | None = None, notify_url: str | None = None, force: bool = False) -> Answer:
        item = _Item(kind, target, payload, schedule, asyncio.get_running_loop().create_future(), requester,
                     notify_url, force)
        self._pending.append(item)
        self._schedule()
        return await item.answer

    def _schedule(self) -> None:
        if not self._pending or self._scheduled:
            return
        if self._flushing == 0:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._start_flush)
        elif self._flushing < self.max_flushes and self._stall is None:
            self._stall = asyncio.get_running_loop().call_later(STALL, self._stalled)

    def _stalled(self) -> None:
        """The flush in flight took STALL: the waiting items go beside it."""
        self._stall = None
        if self._pending and not self._scheduled and self._flushing < self.max_flushes:
            self._start_flush()
        self._schedule()  # more than one batch waits: the rest after the next STALL

    def _start_flush(self) -> None:
        self._scheduled = False
        if self._stall is not None:
            self._stall.cancel()
            self._stall = None
        batch, self._pending = self._pending[:self.max_batch], self._pending[self.max_batch:]
        self._flushing += 1
        task = asyncio.create_task(self._flush(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _flush(self, batch: list[_Item]) -> None:
        try:
            # one statement per kind and schedule (most submissions have none)
            by_kind: dict[tuple[str, Schedule], list[_Item]] = {}
            for item in batch:
                by_kind.setdefault((item.kind, item.schedule), []).append(item)
            for (kind, schedule), items in by_kind.items():
                await self._write(kind, schedule, items)
        finally:
            self._flushing -= 1
            self._schedule()

    async def _write(self, kind: str, schedule: Schedule, items: list[_Item]) -> None:
        self.batches += 1
        self.items += len(items)
        if len(items) == 1:
            await self._alone(items[0])
            return
        try:
            answers = await self.queue.submit_many_requests_json(
                kind, [(i.target, i.payload) for i in items], requesters=[i.requester for i in items],
                notify_urls=[i.notify_url for i in items], max_payload=self.max_payload,
                max_active=self.max_active, forces=[i.force for i in items], **schedule.kwargs())
        except QueueError as exc:
            if exc.code == "unknown_kind":  # true of every item alike
                for item in items:
                    _settle(item.answer, exc=exc)
                return
            answers = None  # one item's fault
        except (asyncpg.DataError, asyncpg.ProgramLimitExceededError):
            answers = None  # e.g. "\u0000" in one payload
        except asyncio.CancelledError:  # shutting down
            for item in items:
                item.answer.cancel()
            raise
        except Exception as exc:  # the database is away: every request hears so
            for item in items:
                _settle(item.answer, exc=exc)
            return
        if answers is None or len(answers) != len(items):  # (fewer: a job swept already)
            # Each on its own: the bad item gets its refusal, the others their jobs.
            await asyncio.gather(*(self._alone(i) for i in items))
            return
        for item, answer in zip(items, answers):
            _settle(item.answer, answer)

    async def _alone(self, item: _Item) -> None:
        try:
            answer = await self.queue.submit_request_json(
                item.kind, item.target, item.payload, max_payload=self.max_payload,
                requester=item.requester, notify_url=item.notify_url, max_active=self.max_active,
                force=item.force, **item.schedule.kwargs())
        except Exception as exc:
            _settle(item.answer, exc=exc)
        else:
            _settle(item.answer, answer)


def _settle(future: asyncio.Future, answer: Answer | None = None, *, exc: BaseException | None = None) -> None:
    if future.done():  # its request went away (the client hung up)
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(answer)
