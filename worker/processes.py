"""The deploy's commands: `jobfeed migrate`, and the long-running processes
`jobfeed worker`, `jobfeed sweeper` and `jobfeed api`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
import tempfile
from typing import Any, AsyncIterator

import asyncpg

from . import db, logs, migrate as migrations, tasks
from .queue import Queue
from .settings import FLAG_SETTINGS, Settings
from .startup import (admin_token, budget_mode, make_runner, make_sweeper, on_signals, prepare, run, runner_specs,
                      settle_gc, warn_unsigned_webhooks)
from .supervisor import supervise


@contextlib.asynccontextmanager
async def metrics_port(settings: Settings) -> AsyncIterator:
    """/metrics on JOBFEED_METRICS_PORT while the block runs (when it is set);
    yields what stops it."""
    if settings.metrics_port is None:
        yield lambda: None
        return
    from .metrics import MetricsServer

    server = MetricsServer(settings.host, settings.metrics_port, settings.metrics_token)
    serving = asyncio.create_task(server.serve(), name="jobfeed-metrics")
    try:
        yield server.stop
    finally:
        server.stop()
        await asyncio.gather(serving, return_exceptions=True)


async def cmd_migrate(settings: Settings, args) -> int:
    try:
        applied = await migrations.migrate_database(await db.resolve_dsn(settings))
    except asyncpg.InsufficientPrivilegeError:
        raise  # the command's usual line: which role may migrate
    except asyncpg.PostgresError as exc:  # a deadlock every time, a lock timeout, a migration refused
        first = str(exc).splitlines()[0] if str(exc) else ""
        print(logs.fatal_line(f"migrate failed ({type(exc).__name__}: {first}); its transaction was undone, so "
                              "the database is as it was (README, Versions): run it again"), file=sys.stderr)
        return 1
    print("applied: " + ", ".join(applied) if applied else "schema is up to date")
    return 0


@contextlib.asynccontextmanager
async def prepared_pool(settings: Settings, max_size: int, name: str, role: str) -> AsyncIterator[tuple[str, Any]]:
    """(dsn, pool) of the prepared database while the block runs."""
    dsn = await prepare(settings, role)
    pool = await db.create_pool(dsn, min_size=1, max_size=max_size, name=name)
    try:
        yield dsn, pool
    finally:
        await pool.close()


async def run_until_stopped(settings: Settings, part) -> None:
    """part.run(), with /metrics on JOBFEED_METRICS_PORT; a signal stops both."""
    async with metrics_port(settings) as stop_metrics:
        on_signals(part.stop, stop_metrics)
        settle_gc()
        await part.run()


async def cmd_worker(settings: Settings, args) -> int:
    budget_mode(args)  # refused before the database is looked at
    warn_unsigned_webhooks(settings)
    if args.processes > 1:
        dsn = await prepare(settings, migrations.WORKER_ROLE)
        runner_specs(settings, args)  # refused here once, not by every child
        return await supervise(settings, args, dsn)
    async with prepared_pool(settings, max(4, min(args.concurrency + 2, 20)), "jobfeed-worker",
                             migrations.WORKER_ROLE) as (dsn, pool):
        queue = Queue(pool)
        runner = make_runner(queue, dsn, settings, args)
        await tasks.register_kinds(queue, settings, overwrite=True, running=runner.kinds)
        await run_until_stopped(settings, runner)
    return 0


async def cmd_sweeper(settings: Settings, args) -> int:
    async with prepared_pool(settings, 2, "jobfeed-sweeper", migrations.SWEEPER_ROLE) as (_, pool):
        sweeper = make_sweeper(Queue(pool), settings, args)
        if args.once:
            print(json.dumps(await sweeper.sweep_once()))
            return 0
        await run_until_stopped(settings, sweeper)
    return 0


def cmd_api(settings: Settings, args) -> int:
    from jobfeed.api.serve import check_listen, serve_processes

    check_listen(settings.host, settings.port)
    dsn = run(prepare(settings, migrations.API_ROLE))
    # Worker processes of uvicorn build the app from the environment (and
    # register the kinds they know, as every API process does).
    os.environ["DATABASE_URL"] = dsn
    os.environ["JOBFEED_ADMIN_TOKEN"] = admin_token(settings)
    for field, key in FLAG_SETTINGS.items():
        if getattr(args, field) is not None:
            os.environ.pop(key, None)
    # Several processes behind one port: each keeps its metrics in files of a
    # directory they share, so any of them answers /metrics for all (see
    # api/metrics.py). Set before uvicorn starts them; removed when they end.
    own_dir = None
    if args.workers > 1 and not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        own_dir = os.environ["PROMETHEUS_MULTIPROC_DIR"] = tempfile.mkdtemp(prefix="jobfeed-metrics-")
    try:
        serve_processes(settings, workers=args.workers, log_level=args.level)
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
    return 0
