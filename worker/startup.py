"""What the commands share when they start: the database and schema, the
handler modules, the admin token, signals, and the runner and sweeper built
from the flags."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
from pathlib import Path

from . import db, migrate as migrations, tasks
from .queue import Queue
from .settings import Settings

log = logging.getLogger("jobfeed")


class UsageError(Exception):
    """Bad input on the command line: message to stderr, exit 2."""


def run(coro):
    """asyncio.run on uvloop where it is installed (not on Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


async def prepare(settings: Settings) -> str:
    """Resolve the database (starting the embedded one if need be), check that
    its schema fits this code (SchemaError otherwise: exit 2) and load the
    handler modules. Returns the DSN. Each command then registers the kinds
    with its own pool: overwriting their settings only from a process that
    runs them."""
    dsn = await db.resolve_dsn(settings)
    await migrations.require_schema(dsn)
    tasks.load_tasks(settings.tasks)
    return dsn


def admin_token(settings: Settings) -> str:
    """JOBFEED_ADMIN_TOKEN, or one generated on first start and kept in the data
    folder, readable by its owner only."""
    if settings.admin_token:
        return settings.admin_token
    path = Path(settings.data_dir) / "admin_token"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return path.read_text().strip()
    with os.fdopen(fd, "w") as f:
        f.write(secrets.token_urlsafe(24))
    return path.read_text().strip()


def on_signals(*callbacks) -> None:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: [cb() for cb in callbacks])


def make_runner(queue: Queue, dsn: str, settings: Settings, args):
    from .runner import Runner

    specs = tasks.registry.specs(settings)
    if args.kinds:
        wanted = [k.strip() for k in args.kinds.split(",") if k.strip()]
        unknown = sorted(set(wanted) - {s.kind for s in specs})
        if unknown:
            raise UsageError(f"--kinds: no handler registered for {', '.join(unknown)} "
                             f"(known: {', '.join(s.kind for s in specs)}; add modules with JOBFEED_TASKS)")
        specs = [s for s in specs if s.kind in wanted]
    return Runner(queue, dsn, specs, concurrency=args.concurrency, grace=args.grace, poll_interval=args.poll,
                  budget=args.budget, reserve=args.reserve, max_jobs=args.max_jobs)


def make_sweeper(queue: Queue, settings: Settings, args):
    from .sweeper import Sweeper
    return Sweeper(queue, retention=settings.retention, interval=args.sweep_interval)
