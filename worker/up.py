"""`jobfeed up`: the all-in-one development command. Database (embedded unless
DATABASE_URL is set), migrations, API, worker and sweeper in one process and
one event loop; a signal or any part ending stops them all."""

from __future__ import annotations

import asyncio
import dataclasses

from . import db, logs, migrate as migrations, tasks
from .queue import Queue
from .settings import Settings
from .startup import UsageError, admin_token, log, make_runner, make_sweeper, on_signals, prepare, warn_unsigned_webhooks

DEMO_TASKS = "jobfeed.demo"


def browsable(host: str) -> str:
    """The host of a URL a person can open: an any-address (0.0.0.0, ::) listens
    on every interface, loopback among them; an IPv6 address in brackets."""
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)
    return f"[{host}]" if ":" in host else host


async def cmd_up(settings: Settings, args) -> int:
    # The all-in-one development command is the one place the demo kind comes
    # with; elsewhere it runs only where JOBFEED_TASKS names it.
    if DEMO_TASKS not in settings.tasks:
        settings = dataclasses.replace(settings, tasks=(DEMO_TASKS, *settings.tasks))
    given_token = settings.admin_token is not None
    from jobfeed.api.serve import ListenError, SharedLoopServer, check_listen
    # A taken port (a second `jobfeed up`, most often) fails here, before the
    # database is started, migrated or worked on.
    check_listen(settings.host, settings.port)
    # The data folder is checked (and refused untouched) with the embedded
    # server before the token is kept in it.
    dsn = await db.resolve_dsn(settings)
    token = admin_token(settings)
    # The development command migrates; deploys run `jobfeed migrate` as a step.
    for applied in await migrations.migrate_database(dsn):
        log.info("migrated: %s", applied)
    settings = dataclasses.replace(settings, database_url=dsn)
    dsn = await prepare(settings)
    warn_unsigned_webhooks(settings)
    settings = dataclasses.replace(settings, database_url=dsn, admin_token=token)
    from jobfeed.api.app import create_app

    pool = await db.create_pool(dsn, min_size=1, max_size=max(4, min(args.concurrency + 2, 20)),
                                name="jobfeed-up")
    try:
        queue = Queue(pool)
        await tasks.register_kinds(queue, settings, overwrite=True)  # this process runs them
        runner = make_runner(queue, dsn, settings, args)
        sweeper = make_sweeper(queue, settings, args)
        server = SharedLoopServer(create_app(settings), settings)
        on_signals(runner.stop, sweeper.stop, server.stop)
        parts = [asyncio.create_task(p) for p in (server.serve(), runner.run(), sweeper.run())]
        if await server.wait_started(parts[0]):
            url = f"http://{browsable(settings.host)}:{server.port()}/"
            # A token from JOBFEED_ADMIN_TOKEN is the operator's already: not repeated here.
            shown = "(JOBFEED_ADMIN_TOKEN)" if given_token else token
            print(f"jobfeed is up: {url}\n  admin: {url}admin  token: {shown}\n"
                  f"  database: {logs.without_password(dsn)}", flush=True)
        done, _ = await asyncio.wait(parts, return_when=asyncio.FIRST_COMPLETED)
        # One part ending (a signal, or the server failing to bind) ends them all.
        runner.stop()
        sweeper.stop()
        server.stop()
        await asyncio.gather(*parts, return_exceptions=True)
        for part in done:
            failure = part.exception()
            if isinstance(failure, ListenError):
                raise UsageError(str(failure)) from None
            if failure:
                raise failure
    finally:
        await pool.close()
    return 0
