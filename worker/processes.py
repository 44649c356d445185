"""The deploy's commands: `jobfeed migrate`, and the long-running processes
`jobfeed worker`, `jobfeed sweeper` and `jobfeed api`."""

from __future__ import annotations

import json
import os

from . import db, migrate as migrations, tasks
from .queue import Queue
from .settings import Settings
from .startup import admin_token, make_runner, make_sweeper, on_signals, prepare, run


async def cmd_migrate(settings: Settings, args) -> int:
    applied = await migrations.migrate_database(await db.resolve_dsn(settings))
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


async def cmd_worker(settings: Settings, args) -> int:
    dsn = await prepare(settings)
    pool = await db.create_pool(dsn, min_size=1, max_size=max(4, min(args.concurrency + 2, 20)),
                                name="jobfeed-worker")
    try:
        queue = Queue(pool)
        await tasks.register_kinds(queue, settings, overwrite=True)
        runner = make_runner(queue, dsn, settings, args)
        on_signals(runner.stop)
        await runner.run()
    finally:
        await pool.close()
    return 0


async def cmd_sweeper(settings: Settings, args) -> int:
    dsn = await prepare(settings)
    pool = await db.create_pool(dsn, min_size=1, max_size=2, name="jobfeed-sweeper")
    try:
        sweeper = make_sweeper(Queue(pool), settings, args)
        if args.once:
            print(json.dumps(await sweeper.sweep_once()))
            return 0
        on_signals(sweeper.stop)
        await sweeper.run()
    finally:
        await pool.close()
    return 0


def cmd_api(settings: Settings, args) -> int:
    from jobfeed.api.serve import serve_processes

    dsn = run(prepare(settings))
    # Worker processes of uvicorn build the app from the environment (and
    # register the kinds they know, as every API process does).
    os.environ["DATABASE_URL"] = dsn
    os.environ["JOBFEED_ADMIN_TOKEN"] = admin_token(settings)
    serve_processes(settings, workers=args.workers)
    return 0
