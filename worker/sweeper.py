"""The sweeper: on an interval, fails running jobs whose lease expired with no
attempts left, applies deferred leaves that are due (a closed job page's),
and deletes finished jobs past the retention period in bounded batches, and
periodic slots past it (each kind's newest kept). Never deletes an unfinished
job; several sweepers may run at once."""

from __future__ import annotations

import asyncio
import logging
import time

from . import metrics
from .queue import Queue
from .waits import wait_event

log = logging.getLogger("jobfeed.sweeper")


class Sweeper:
    # A backlog of history is background work. Between two batches the sweeper
    # rests REST times as long as the last one took, so deleting takes at most
    # a quarter of one database core from the claims and completions; batches of
    # BATCH keep each burst of deletes (and the commits waiting behind its WAL)
    # short. bench/rounds.md has what that costs the drain and latency.
    BATCH = 200
    REST = 3.0
    SIGNAL_LOOK = 1.0
    SIGNAL_SLACK = 0.05  # wake just after a signal deadline, so it is past when checked

    def __init__(self, queue: Queue, *, retention: float, interval: float = 60.0, batch: int = BATCH):
        self.queue = queue
        self.retention = retention
        self.interval = interval
        self.batch = batch
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def sweep_once(self) -> dict[str, int]:
        expired = await self.queue.sweep_expired()
        left = await self._apply_leaves()
        deleted = 0
        after = None  # each batch goes on where the last ended
        while not self._stop.is_set():
            # Each batch is its own short transaction, so a big backlog never
            # holds locks for long; a short batch means we are done.
            started = time.perf_counter()
            n, after = await self.queue.delete_finished_after(self.retention, self.batch, after)
            deleted += n
            if n < self.batch:
                break
            await self._rest(self.REST * (time.perf_counter() - started))
        slots = await self.queue.delete_old_slots(self.retention)
        await self.queue.sample_depth()  # the dashboard's depth chart
        metrics.SWEPT.labels("expired").inc(expired)
        metrics.SWEPT.labels("deleted").inc(deleted)
        if expired or deleted or slots or left:
            log.info("sweeper: %d expired leases failed, %d deferred leaves applied, %d finished jobs deleted, "
                     "%d periodic slots deleted", expired, left, deleted, slots)
        return {"expired": expired, "left": left, "deleted": deleted}

    async def _apply_leaves(self) -> int:
        """Deferred leaves past due (leave_due), a batch at a time until a short one."""
        left = 0
        while not self._stop.is_set():
            n = await self.queue.leave_due(self.batch)
            left += n
            metrics.LEAVES.inc(n)
            if n < self.batch:
                break
        return left

    async def _rest(self, seconds: float) -> None:
        await wait_event(self._stop, seconds)

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.sweep_once()
            except Exception as exc:  # the database may be restarting: try again next round
                log.warning("sweeper: round failed (%s)", exc)
            await self._until_next_round()

    async def _until_next_round(self) -> None:
        """Rest for the interval, looking every SIGNAL_LOOK seconds for a signal
        deadline or a deferred leave about to fall due and waking for it
        (failing just those jobs and applying those leaves, as a round would): a
        signal_timeout, or a closed page's leave, is kept to within a second
        whatever --sweep-interval says, for two index probes a second."""
        next_round = time.monotonic() + self.interval
        while not self._stop.is_set() and (left := next_round - time.monotonic()) > 0:
            try:
                due = await self.queue.next_deadline()
            except Exception as exc:  # the round says it (a warning); here, once a second, quieter
                log.debug("sweeper: reading the next deadline failed (%s)", exc)
                due = None
            if due is None or due >= min(left, self.SIGNAL_LOOK):
                await self._rest(min(left, self.SIGNAL_LOOK))
                continue
            await self._rest(max(due, 0.0) + self.SIGNAL_SLACK)
            try:
                metrics.SWEPT.labels("expired").inc(await self.queue.sweep_expired())
                await self._apply_leaves()
            except Exception as exc:
                log.warning("sweeper: failing overdue signals or applying due leaves failed (%s)", exc)
                await self._rest(self.SIGNAL_LOOK)  # a due leave stays due until this works: not at once
