"""The worker's side of the queue: claiming, and every write about a claimed
job, each fenced by (id, generation): False (or the id among the lost) means
the lease was lost and nothing changed."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Any, Sequence

from .limits import MAX_PAYLOAD_BYTES
from .queue_calls import UNSTORABLE_CODE, QueueCalls, _seconds, payload_text, result_json
from .queue_records import ClaimTimes, Job


class LeaseCalls(QueueCalls):
    """The calls a worker makes (see the module's docstring)."""

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
        return jobs, [ClaimTimes(r[0], r[1], r[6], r[12], r[13], r[14]) for r in rows]

    async def set_traceparent(self, job_id: uuid.UUID, traceparent: str) -> None:
        await self._fetch("set_traceparent", job_id, traceparent)

    async def worker_beat(self, worker_id: str, host: str, kinds: Sequence[str], concurrency: int,
                          running: int, lease: float) -> None:
        await self._fetch("worker_beat", worker_id, host, list(kinds), concurrency, running, _seconds(lease))

    async def worker_stopped(self, worker_id: str) -> None:
        await self._fetch("worker_stopped", worker_id)


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
        return await self._fetchval("checkpoint", job_id, generation, result_json(state))

    async def complete(self, job_id: uuid.UUID, generation: int, result: Any) -> bool:
        return await self._fetchval("complete", job_id, generation, result_json(result))

    async def complete_many(self, jobs: Sequence[tuple[uuid.UUID, int, Any]]) -> set[uuid.UUID]:
        """Complete (id, generation, result) triples in one statement; returns the
        ids completed (the others had lost their lease)."""
        return await self.complete_many_json([(i, g, result_json(r)) for i, g, r in jobs])

    async def complete_many_json(self, jobs: Sequence[tuple[uuid.UUID, int, str]]) -> set[uuid.UUID]:
        """complete_many() with each result already JSON text."""
        done = await self._fetchval("complete_many", [j[0] for j in jobs], [j[1] for j in jobs],
                                    [j[2] for j in jobs])
        return set(done)

    async def child_id(self, parent_id: uuid.UUID, generation: int, kind: str, target: str, payload: dict | None,
                       max_payload: int = MAX_PAYLOAD_BYTES) -> uuid.UUID | None:
        """The id a child of (kind, target) has (or will have once the parent's
        outcome writes it); None when the parent's lease is lost. QueueError for
        a submission submit() would refuse."""
        await self._add_kind(kind)
        return await self._fetchval("child_id", parent_id, generation, kind, target,
                                    payload_text(payload), max_payload)

    async def complete_spawning(self, job_id: uuid.UUID, generation: int, result: Any,
                                children: Sequence[dict]) -> bool:
        """Complete the job and write its children (dicts of id, kind, target,
        payload, priority, concurrency_key) in one fenced transaction."""
        return await self._fetchval("complete_spawning", job_id, generation, result_json(result),
                                    json.dumps(list(children), default=str))

    async def fail_unstorable(self, job_id: uuid.UUID, generation: int, error: Exception) -> bool:
        """The attempt whose result PostgreSQL refused (UNSTORABLE) ends as a
        transient failure, as if its handler had raised."""
        return await self.fail_transient(job_id, generation, UNSTORABLE_CODE, f"the result cannot be stored: {error}")

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

    async def wake_all(self, kinds: Sequence[str]) -> None:
        """Wake every worker of these kinds (jobfeed_due with the kind alone)."""
        await self._fetch("wake_all", list(kinds))

    async def release(self, job_id: uuid.UUID, generation: int, code: str, retry_after: float = 0,
                      message: str | None = None) -> bool:
        return await self._fetchval("release", job_id, generation, code, _seconds(retry_after), message)
