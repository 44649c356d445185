"""Periodic jobs: @task(kind, schedule="0 3 * * *", timezone="Europe/Paris") or
@task(kind, every="5m"). Every worker running a periodic kind runs its
scheduler; the database makes one job per slot (jobfeed.enqueue_slot records
the slot and inserts its job in one transaction), so any number of schedulers
agree. A scheduler only ever enqueues the latest slot that has come: after an
outage, the slots missed before it are skipped."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import math
from typing import Callable, Iterator, Sequence
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError

from .waits import wait_event

log = logging.getLogger("jobfeed.schedules")
UTC = dt.timezone.utc


@dataclasses.dataclass(frozen=True)
class Periodic:
    kind: str
    schedule: str | None = None   # a cron expression, read in `timezone`
    timezone: str = "UTC"
    every: float | None = None    # seconds; slots are multiples of it since the Unix epoch

    def describe(self) -> str:
        return f"cron {self.schedule} ({self.timezone})" if self.schedule else f"every {self.every:g}s"

    def latest(self, now: dt.datetime) -> dt.datetime:
        """The latest slot at or before now (UTC)."""
        if self.every is not None:
            return dt.datetime.fromtimestamp(math.floor(now.timestamp() / self.every) * self.every, UTC)
        assert self.schedule is not None
        zone = ZoneInfo(self.timezone)
        # The second is added in UTC: wall-clock arithmetic would lose `fold`
        # and read the hour a clock goes back through twice as its first pass.
        after = (now.astimezone(UTC).replace(microsecond=0) + dt.timedelta(seconds=1)).astimezone(zone)
        # cronsim, started inside that hour's second pass, reads it as the
        # first: walking back it may skip a slot (never past now), walking
        # forward it may give one from before. So: back, then forward from
        # there, skipping any slot not after the one before it.
        latest = next(CronSim(self.schedule, after, reverse=True)).astimezone(UTC)
        for slot in self._after(latest):
            if slot > now:
                break
            latest = slot
        return latest

    def _after(self, start: dt.datetime) -> Iterator[dt.datetime]:
        """The cron slots after `start` (UTC), in order."""
        assert self.schedule is not None
        last = start
        for slot in CronSim(self.schedule, start.astimezone(ZoneInfo(self.timezone))):
            when = slot.astimezone(UTC)
            if when > last:
                last = when
                yield when

    def next(self, now: dt.datetime) -> dt.datetime:
        """The first slot after now (UTC)."""
        if self.every is not None:
            return self.latest(now) + dt.timedelta(seconds=self.every)
        return next(self._after(now.astimezone(UTC)))


def periodic(kind: str, schedule: str | None, timezone: str | None, every: float | None) -> Periodic | None:
    """Check a kind's schedule when it is declared: ValueError names what is wrong."""
    if schedule is None and every is None:
        if timezone is not None:
            raise ValueError(f"@task({kind!r}): timezone needs a schedule")
        return None
    if schedule is not None and every is not None:
        raise ValueError(f"@task({kind!r}): give schedule or every, not both")
    if every is not None:
        if timezone not in (None, "UTC"):  # (UTC, the contract's default, says what it does)
            raise ValueError(f"@task({kind!r}): every= runs in UTC; timezone is for schedule=")
        # A slot's time is its job's target, written to the second: a slot
        # shorter, or not a whole number of seconds, would share its target.
        if every < 1 or every != int(every):
            raise ValueError(f"@task({kind!r}): every must be a whole number of seconds, at least 1s")
        return Periodic(kind, every=every)
    tz = "UTC" if timezone is None else timezone
    # "" is no zone, not UTC; "localtime" is each host's own, so two workers'
    # slots could differ
    if not isinstance(tz, str) or tz.strip() in ("", "localtime"):
        raise ValueError(f"@task({kind!r}): timezone {str(tz)[:64]!r} is not an IANA zone name "
                         "(write e.g. 'UTC', 'Europe/Berlin')")
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"@task({kind!r}): unknown timezone {tz!r}") from None
    try:
        CronSim(str(schedule), dt.datetime.now(zone))
    except CronSimError as exc:
        raise ValueError(f"@task({kind!r}): schedule {schedule!r} is not a cron expression: {exc}") from None
    return Periodic(kind, schedule=schedule, timezone=tz)


def slot_text(t: dt.datetime | str) -> str:
    """A slot's time as its job's target writes it: RFC 3339 in UTC, with Z."""
    when = dt.datetime.fromisoformat(t) if isinstance(t, str) else t
    return when.astimezone(UTC).isoformat().replace("+00:00", "Z")


def with_slots(row: dict, now: dt.datetime) -> Periodic:
    """A list_schedules row given its next slot, both slots written as targets
    are (jobfeed schedules and GET /api/admin/schedules agree); its Periodic."""
    p = Periodic(row["kind"], row["schedule"], row["timezone"], row["every_seconds"])
    row["next_slot"] = slot_text(p.next(now))
    if row.get("last_slot"):
        row["last_slot"] = slot_text(row["last_slot"])
    return p


async def register(queue, periodics: Sequence[Periodic]) -> None:
    for p in periodics:
        await queue.register_schedule(p.kind, p.schedule, p.timezone, p.every)


async def tick(queue, periodics: Sequence[Periodic], now: dt.datetime) -> list:
    """Enqueue each schedule's latest slot if nobody has; -> the jobs made."""
    made = []
    for p in periodics:
        job_id = await queue.enqueue_slot(p.kind, p.latest(now), now)
        if job_id is not None:
            log.info("schedule %s: slot %s -> job %s", p.kind, p.latest(now).isoformat(), job_id)
            made.append(job_id)
    return made


async def run(queue, periodics: Sequence[Periodic], stop: asyncio.Event,
              clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(UTC)) -> None:
    """Until stop is set: enqueue the latest slots, sleep until the next one.
    A database error is logged and retried; it never stops the worker."""
    if not periodics:
        return
    await register(queue, periodics)
    while not stop.is_set():
        now = clock()
        try:
            await tick(queue, periodics, now)
        except Exception as exc:  # database away: the next turn catches up (latest slot only)
            log.warning("schedules: %s; retrying", exc)
        wait = min((p.next(now) - now).total_seconds() for p in periodics)
        # at most a minute at a time: a clock that jumps is noticed
        await wait_event(stop, min(max(wait, 0.01), 60.0))
