"""The worker's completion writer: results of many handlers written in
batches by one task (see Completions)."""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from typing import Callable

from .outcomes import LOST, Outcome
from .queue import Queue
from .queue_calls import UNSTORABLE, UNSTORABLE_CODE
from .retrying import retrying
from .tasks import Transient

log = logging.getLogger("jobfeed.worker")

DONE: Outcome = ("done", None)


class Completions:
    """Completions from many handlers, written with one complete_many call by one
    task: while a call is in flight the next batch gathers, so a busy worker
    writes in batches and an idle one at once. A handler's task ends as soon as
    its result is queued here; `unwritten` counts what waits (the runner caps
    it), and drained() waits for all of it (shutdown). Each completion's
    `ended` hears what its write turned out to be (a completion, LOST, or the
    failure of a result PostgreSQL refused): the metrics count that.

    A batch that fails for a passing reason (deadlock, lost connection, server
    restart) is written again, with backoff, for as long as its leases can
    still hold: the call is fenced, so a repeat is safe, and dropping it would
    run those jobs again."""

    MAX_BATCH = 1000

    def __init__(self, queue: Queue, on_written):
        self.queue = queue
        self.on_written = on_written
        self.unwritten = 0
        # id, generation, result, lease, ended
        self._pending: list[tuple[uuid.UUID, int, str, float, Callable[[Outcome], None]]] = []
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()

    def add(self, job_id: uuid.UUID, generation: int, result: str, lease: float,
            ended: Callable[[Outcome], None]) -> None:
        """`result`: the handler's result as JSON text (result_json)."""
        self._pending.append((job_id, generation, result, lease, ended))
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
                triples = [(job_id, generation, result) for job_id, generation, result, *_ in batch]
                # No heartbeat renews these leases any more: past the longest, the
                # jobs are someone else's and a write could only answer "lost".
                until = time.monotonic() + max(item[3] for item in batch) + 1.0
                refused: dict[uuid.UUID, Outcome] = {}
                try:
                    try:
                        completed = await retrying(functools.partial(self.queue.complete_many_json, triples),
                                                   until=until, what=f"write {len(batch)} completions")
                    except UNSTORABLE:
                        completed = await self._one_by_one(triples, until, refused)
                    for job_id, generation, *_ in batch:
                        if job_id not in completed:
                            log.info("job %s gen %d: lease lost before its completion was recorded",
                                     job_id, generation)
                except Exception:
                    # Those jobs stay running until their leases expire, then run again.
                    log.exception("recording %d completions failed", len(batch))
                    completed = set()
                for job_id, _, _, _, ended in batch:
                    ended(refused.get(job_id, DONE) if job_id in completed else LOST)
                self.unwritten -= len(batch)
                self.on_written()
            self._idle.set()

    async def _one_by_one(self, triples: list[tuple[uuid.UUID, int, str]], until: float,
                          refused: dict[uuid.UUID, Outcome]) -> set[uuid.UUID]:
        """A result PostgreSQL refuses (a NUL or a lone surrogate in a string)
        fails its batch: the others are written alone, and that attempt ends as
        a transient failure, as if its handler had raised (in `refused`)."""
        completed: set[uuid.UUID] = set()
        for job_id, generation, text in triples:
            try:
                completed |= await retrying(functools.partial(self.queue.complete_many_json,
                                                              [(job_id, generation, text)]),
                                            until=until, what=f"write job {job_id}'s completion")
            except UNSTORABLE as exc:
                log.warning("job %s: its result cannot be stored (%s)", job_id, exc)
                if await retrying(functools.partial(self.queue.fail_unstorable, job_id, generation, exc),
                                  until=until, what=f"write job {job_id}'s failure"):
                    completed.add(job_id)  # its attempt is recorded, as a failure
                    refused[job_id] = ("error", Transient(UNSTORABLE_CODE, str(exc)))
        return completed
