"""Flow-control commands: `jobfeed pause KIND` and `jobfeed resume KIND`."""

from __future__ import annotations

import json

from . import db, migrate as migrations
from .queue import Queue
from .settings import Settings


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
