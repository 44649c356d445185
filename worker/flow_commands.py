"""Flow-control commands: `jobfeed pause KIND` and `jobfeed resume KIND`."""

from __future__ import annotations

import json

from . import db, migrate as migrations
from .queue import Queue
from .settings import Settings
from .terminal import shown


async def _set_paused(settings: Settings, kind: str, paused: bool) -> int:
    dsn = await db.resolve_dsn(settings)
    await migrations.require_schema(dsn)
    pool = await db.create_pool(dsn, min_size=1, max_size=1, name="jobfeed-pause")
    try:
        view = await Queue(pool).set_kind_paused(kind, paused)
    finally:
        await pool.close()
    print(json.dumps(view))
    return 0


async def cmd_pause(settings: Settings, args) -> int:
    return await _set_paused(settings, args.kind, True)


async def cmd_resume(settings: Settings, args) -> int:
    return await _set_paused(settings, args.kind, False)


async def cmd_schedules(settings: Settings, args) -> int:
    """Each periodic kind with its last run (slot, job, status) and its next run."""
    import datetime as dt

    from .schedules import with_slots

    dsn = await db.resolve_dsn(settings)
    await migrations.require_schema(dsn)
    pool = await db.create_pool(dsn, min_size=1, max_size=1, name="jobfeed-schedules")
    try:
        rows = await Queue(pool).list_schedules()
    finally:
        await pool.close()
    now = dt.datetime.now(dt.timezone.utc)
    for row in rows:
        p = with_slots(row, now)
        if args.json:
            print(json.dumps(row))
        else:
            status = row["last_status"] or "its job since deleted by the sweeper"
            last = f"{row['last_slot']} ({status})" if row["last_slot"] else "never"
            # a paused kind's slots still get their jobs; none of them runs until it resumes
            held = " (paused: its jobs wait)" if row.get("paused") else ""
            if not row.get("workers"):  # a schedule outlives its workers: say nothing will come
                held += " (no live worker runs it: no job comes until one does)"
            print(shown(f"{row['kind']}: {p.describe()}; last {last}; next {row['next_slot']}{held}"))
    if not rows and not args.json:
        print("no periodic kinds registered (a worker registers them when it starts)")
    return 0
