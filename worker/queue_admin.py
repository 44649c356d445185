"""The operator's side of the queue: admin reads and actions, statistics and
charts, the worker list, periodic schedules and the sweeper's deletes."""

from __future__ import annotations

import datetime as dt
import json
import uuid
from typing import Sequence

from .queue_calls import QueueCalls, _seconds

THROUGHPUT_MINUTES = 15  # the stats' throughput window: finishes per minute of the last 15


class AdminCalls(QueueCalls):
    """The calls the admin API, the CLI, the scheduler and the sweeper make."""

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

    async def stats(self, minutes: int = THROUGHPUT_MINUTES, max_age: float = 5.0) -> dict:
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
        changed, _skipped = await self.bulk_outcome(action, state=state, kind=kind, error_code=error_code,
                                                    ids=ids, batch=batch)
        return changed

    async def bulk_outcome(self, action: str, *, state: str | None = None, kind: str | None = None,
                           error_code: str | None = None, ids: Sequence[uuid.UUID] | None = None,
                           batch: int = 500) -> tuple[int, int]:
        """As bulk, answering (changed, skipped): the jobs the filter matched
        that the SQL left as they were (a retry whose target an unfinished job
        holds again, or a job that changed meanwhile)."""
        if action not in ("retry", "cancel"):
            raise ValueError(f"unknown bulk action {action!r}")
        ids = None if ids is None else list(ids)
        total, skipped, after = 0, 0, None
        while True:
            rows = await self._fetch(f"bulk_{action}", state, kind, error_code, ids, after, batch)
            changed, picked, after = rows[0]
            total += changed
            skipped += picked - changed
            if picked < batch:
                return total, skipped

    # -- periodic jobs (worker/schedules.py)
    async def register_schedule(self, kind: str, schedule: str | None, timezone: str, every: float | None) -> None:
        await self._fetch("register_schedule", kind, schedule, timezone, _seconds(every))

    async def drop_schedule(self, kind: str) -> None:
        await self._fetch("drop_schedule", kind)

    async def enqueue_slot(self, kind: str, slot: dt.datetime, now: dt.datetime | None = None) -> uuid.UUID | None:
        """The slot's new job, or None when the slot was taken already."""
        return await self._fetchval("enqueue_slot", kind, slot, now)

    async def list_schedules(self) -> list[dict]:
        return [json.loads(r[0]) for r in await self._fetch("list_schedules")]

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

    # -- sweeper
    async def sweep_expired(self) -> int:
        return await self._fetchval("sweep_expired")

    async def next_deadline(self) -> float | None:
        """Seconds until the next signal_timeout or deferred leave falls due
        (below 0: a leave is overdue), None when none is pending."""
        return await self._fetchval("next_deadline")

    async def leave_due(self, limit: int) -> int:
        """Apply up to `limit` deferred leaves that are due; how many were."""
        return await self._fetchval("leave_due", limit)

    async def delete_finished(self, retention: float, limit: int = 1000) -> int:
        return (await self.delete_finished_after(retention, limit))[0]

    async def delete_finished_after(self, retention: float, limit: int = 1000,
                                    after: dt.datetime | None = None) -> tuple[int, dt.datetime | None]:
        """Up to `limit` jobs finished before `retention` ago deleted, from
        `after` on (a finished_at: where the sweep's last batch ended); how
        many went and the latest finished_at among them."""
        row = (await self._fetch("delete_finished_v2", _seconds(retention), limit, after))[0]
        return row["deleted"], row["last_finished_at"]

    async def delete_old_slots(self, retention: float) -> int:
        """Periodic slots past retention, each kind's newest kept (one bounded batch)."""
        return await self._fetchval("delete_old_slots", _seconds(retention))
