"""What the commands share when they start: the database and schema, the
handler modules, the admin token, signals, and the runner and sweeper built
from the flags."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import secrets
import signal
import sys
import tempfile
import weakref
from pathlib import Path

from . import db, migrate as migrations, tasks
from .queue import Queue
from .settings import SettingError, Settings, check_admin_token

log = logging.getLogger("jobfeed")


# The youngest generation is collected every GC_YOUNG allocations net of
# frees (CPython's default is 700). A worker or API process makes and drops a
# handful of objects per job or request, nearly all freed at once; collecting
# after every 700 of them took a large share of its CPU (bench/rounds.md, sixth round).
GC_YOUNG = 50_000


def settle_gc() -> None:
    """For a long-running process, once it has started: what is alive now lives
    as long as the process, so the collector stops walking it (gc.freeze, after
    one last collection), and the youngest generation is collected every
    GC_YOUNG net allocations. Once per process (jobfeed up runs the API and the
    worker in one)."""
    if gc.get_threshold()[0] >= GC_YOUNG:
        return
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, *gc.get_threshold()[1:])


class UsageError(Exception):
    """Bad input on the command line: message to stderr, exit 2."""


# How long the tasks still running when a command's coroutine returns have,
# once canceled, to end before the process leaves without them (those left
# behind already, which ignored a cancel, are not waited for).
LEFTOVER_WAIT = 2.0

_left_behind: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()


def leave_behind(task: asyncio.Task) -> None:
    """A task given up on (a handler that ignored its cancellation, whose
    outcome the worker wrote for it): the process's exit will not wait for it."""
    _left_behind.add(task)


def run(coro):
    """asyncio.run, on uvloop where it is installed (not on Windows). Unlike
    asyncio.run, a task that ignores its cancellation (a handler the worker
    gave up on: attempts._give_up) cannot hold the process open for ever: the
    process exits without it, once everything else is closed."""
    try:
        import uvloop
        factory = uvloop.new_event_loop
    except ImportError:
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        try:
            result = runner.run(coro)
        except BaseException:
            _exit_if_stuck(runner.get_loop(), 1)
            raise
        _exit_if_stuck(runner.get_loop(), result if isinstance(result, int) else 0)
        return result


def _exit_if_stuck(loop: asyncio.AbstractEventLoop, code: int) -> None:
    left = asyncio.all_tasks(loop)
    if not left:
        return
    for task in left:
        task.cancel()
    waited = left - set(_left_behind)
    if waited:
        loop.run_until_complete(asyncio.wait(waited, timeout=LEFTOVER_WAIT))
    stuck = {t for t in left if not t.done()}
    if stuck:
        log.error("%d tasks ignore their cancellation (%s); exiting without them", len(stuck),
                  ", ".join(sorted(t.get_name() for t in stuck)))
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # asyncio's own close would wait on them for ever


async def prepare(settings: Settings, role: str | None = None) -> str:
    """Resolve the database (starting the embedded one if need be), check that
    its schema fits this code and that the login role has the rights of the
    service `role` the command runs as (SchemaError otherwise: exit 2), and
    load the handler modules. Returns the DSN. Each command then registers the
    kinds with its own pool: overwriting their settings only from a process
    that runs them."""
    dsn = await db.resolve_dsn(settings)
    await migrations.require_schema(dsn, role)
    if db.direct(dsn) != dsn:  # JOBFEED_DIRECT_URL: a fault told at start, as DATABASE_URL's
        await (await db.connect_first(dsn, name="jobfeed-direct-check", session=True)).close()
    tasks.load_tasks(settings.tasks)
    if settings.webhook_secret:  # deliveries are signed: without a secret nobody sends them
        from . import webhooks
        webhooks.install()
    return dsn


def warn_unsigned_webhooks(settings: Settings) -> None:
    """A process that runs deliveries says at start when it cannot send them."""
    if settings.webhook_hosts and not settings.webhook_secret:
        log.warning("JOBFEED_WEBHOOK_HOSTS is set but JOBFEED_WEBHOOK_SECRET is not: notify_urls are taken, "
                    "and this process delivers none of them (deliveries wait for a worker that has the secret)")


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


# Budget mode's defaults: a cron or serverless run that passes only one of
# --budget and --max-jobs (and the reserve, for a budget shorter than 240 s,
# scaled down with it: see budget_mode).
BUDGET_SECONDS = 240.0
RESERVE_SECONDS = 30.0
BUDGET_MAX_JOBS = 3


DEMO_KIND = "demo"


async def load_demo_checks(queue: Queue) -> bool:
    """When the database has the demo kind (`jobfeed up` registered it) and this
    process has not loaded it: load it for its payload check, so that its
    bounds (steps, step_ms) refuse a submission here as in `jobfeed up`, rather
    than its worker failing the job. True when it was loaded now."""
    if tasks.registry.get(DEMO_KIND) is not None:
        return False
    if DEMO_KIND not in {k["kind"] for k in await queue.list_kinds()}:
        return False
    import jobfeed.demo  # noqa: F401  (registers the kind here; the database has it already)
    return True


def runner_specs(settings: Settings, args) -> list[tasks.TaskSpec]:
    """The kinds a worker runs: every registered one, or those --kinds names
    (UsageError when it names an unknown kind, or when there is none to run)."""
    specs = tasks.registry.specs(settings)
    if not specs:
        raise UsageError("no kinds to run: set JOBFEED_TASKS to the modules that register handlers "
                         "(e.g. JOBFEED_TASKS=myapp.jobs)")
    if args.kinds:
        wanted = [k.strip() for k in args.kinds.split(",") if k.strip()]
        unknown = sorted(set(wanted) - {s.kind for s in specs})
        if unknown:
            raise UsageError(f"--kinds: no handler registered for {', '.join(unknown)} "
                             f"(known: {', '.join(s.kind for s in specs)}; add modules with JOBFEED_TASKS)")
        specs = [s for s in specs if s.kind in wanted]
    return specs


def budget_mode(args) -> tuple[float | None, float, int | None]:
    """(budget, reserve, max_jobs): the budget and max_jobs both None, or both
    set (what is not given takes the contract's default). The reserve, unless
    given, is RESERVE_SECONDS, or an eighth of a budget shorter than the
    default one (a 20 s budget would otherwise claim nothing). UsageError for a
    reserve given no shorter than the budget (the worker would claim nothing),
    or given alone (a reserve of no budget, which the worker would ignore)."""
    budget, reserve, max_jobs = args.budget, args.reserve, args.max_jobs
    if budget is None and max_jobs is None:
        if reserve is not None:
            raise UsageError("--reserve is part of budget mode: give --budget or --max-jobs with it")
        return None, RESERVE_SECONDS, None
    budget = BUDGET_SECONDS if budget is None else budget
    if reserve is None:
        reserve = min(RESERVE_SECONDS, budget / 8)
    elif reserve >= budget:
        raise UsageError(f"--reserve {reserve:g}s is no shorter than --budget {budget:g}s: the worker would "
                         "claim nothing (claims stop when less than the reserve is left)")
    return budget, reserve, BUDGET_MAX_JOBS if max_jobs is None else max_jobs


def make_runner(queue: Queue, dsn: str, settings: Settings, args):
    from .runner import Runner

    specs = runner_specs(settings, args)
    budget, reserve, max_jobs = budget_mode(args)
    return Runner(queue, dsn, specs, concurrency=args.concurrency, grace=args.grace, poll_interval=args.poll,
                  budget=budget, reserve=reserve, max_jobs=max_jobs)


def make_sweeper(queue: Queue, settings: Settings, args):
    from .sweeper import Sweeper
    return Sweeper(queue, retention=settings.retention, interval=args.sweep_interval)
