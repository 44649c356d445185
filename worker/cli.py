"""The `jobfeed` command: its arguments, and which command runs. The commands
live in modules named for what they do: processes (migrate, worker, sweeper,
api), up, job_commands (submit, show); startup holds what they share."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from typing import Any, Callable, NoReturn

import asyncpg

from . import db, logs, migrate as migrations
from .flow_commands import cmd_pause, cmd_resume, cmd_schedules
from .job_commands import cmd_cancel, cmd_leave, cmd_retry, cmd_show, cmd_submit
from .processes import cmd_api, cmd_migrate, cmd_sweeper, cmd_worker
from .queue import QueueError
from .settings import (LOG_LEVELS, SettingError, Settings, parse_choice, parse_duration, parse_host,
                       parse_port, parse_positive_int)
from .startup import UsageError, run
from .states import STATES
from .submission import InvalidSubmission
from .top import cmd_top
from .up import cmd_up


def _flag(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """An argparse type from a settings parser: what it refuses is a usage error (exit 2)."""
    def check(text: str) -> Any:
        try:
            return parse(text)
        except SettingError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return check


_duration = _flag(parse_duration)
_count = _flag(lambda text: parse_positive_int(text, "value"))


def _log_level(args) -> str:
    """--log-level, else JOBFEED_LOG_LEVEL, else info; refused naming whichever gave it."""
    if args.log_level is not None:
        return parse_choice(args.log_level, "--log-level", LOG_LEVELS)
    return parse_choice(os.environ.get("JOBFEED_LOG_LEVEL") or "info", "JOBFEED_LOG_LEVEL", LOG_LEVELS)


class _Parser(argparse.ArgumentParser):
    """argparse's usage and error on stderr, or in json mode one fatal JSON
    line like any other bad setting's (subcommands' parsers are of this class too)."""

    def error(self, message: str) -> NoReturn:
        if logs.fatal_lines_are_json():
            print(logs.fatal_line(f"{self.prog}: {message}"), file=sys.stderr)
            sys.exit(2)
        super().error(message)


def parser() -> argparse.ArgumentParser:
    p = _Parser(prog="jobfeed", description="A PostgreSQL job service with live progress.")
    p.add_argument("--log-level", help=f"{', '.join(LOG_LEVELS)} (JOBFEED_LOG_LEVEL, default info)")
    sub = p.add_subparsers(dest="command", required=True)

    sub.add_parser("migrate", help="apply the database migrations")

    def runner_flags(sp):
        sp.add_argument("--kinds", help="comma-separated kinds to run (default: all registered)")
        sp.add_argument("--concurrency", type=_count, default=10, help="handlers running at once")
        sp.add_argument("--grace", type=_duration, default=30.0, help="on stop, wait this long before releasing")
        sp.add_argument("--poll", type=_duration, default=5.0, help="poll interval when no NOTIFY arrives")
        sp.add_argument("--budget", type=_duration, help="run at most this long (cron/serverless; 240s when only --max-jobs is given)")
        sp.add_argument("--reserve", type=_duration,
                        help="stop claiming when less is left (30s, or an eighth of a shorter --budget)")
        sp.add_argument("--max-jobs", type=_count, help="handle at most this many jobs, then exit (3 when only --budget is given)")

    def sweeper_flags(sp):
        sp.add_argument("--sweep-interval", type=_duration, default=60.0, help="time between sweeps")

    def server_flags(sp):
        sp.add_argument("--host", type=_flag(lambda text: parse_host(text, "value")),
                        help="listen address (JOBFEED_HOST, default 127.0.0.1)")
        sp.add_argument("--port", type=_flag(lambda text: parse_port(text, "--port", free=True)),
                        help="listen port (JOBFEED_PORT, default 8000; 0: any free port)")

    worker = sub.add_parser("worker", help="run jobs")
    runner_flags(worker)
    worker.add_argument("--processes", type=_count, default=1,
                        help="worker processes, each with --concurrency slots (one per core uses them all)")
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
    s.add_argument("--after", action="append", default=[], metavar="JOB_ID",
                   help="run after this job completes (repeatable)")
    s.add_argument("--file", action="append", default=[], metavar="NAME=PATH",
                   help="upload a file as the job's input NAME (repeatable; handlers read ctx.open_input(NAME))")
    s.add_argument("--follow", action="store_true", help="show progress until the job finishes")
    s.add_argument("--json", action="store_true", help="print the public view as one JSON line")
    when = s.add_mutually_exclusive_group()
    when.add_argument("--at", help="run at this RFC 3339 time, e.g. 2026-12-01T03:00:00Z")
    when.add_argument("--delay", help="run after this long, e.g. 90s, 5m")
    s.add_argument("--priority", type=int, help="higher runs first (default: the kind's)")
    s.add_argument("--key", help="concurrency key (the kind's max_running_per_key applies per key)")
    s.add_argument("--force", action="store_true", help="a new job even if the kind's reuse_for would reuse one")

    for name, what in (("pause", "stop claiming jobs of a kind (submissions are still taken)"),
                       ("resume", "claim jobs of a paused kind again")):
        sub.add_parser(name, help=what).add_argument("kind")

    sc = sub.add_parser("schedules", help="periodic kinds with their last and next run")
    sc.add_argument("--json", action="store_true", help="one JSON object per schedule")

    lv = sub.add_parser("leave", help="a request leaves its job (the job is canceled when it was the last)")
    lv.add_argument("request_id")
    lv.add_argument("--json", action="store_true", help="print the job's public view as one JSON line")

    for name, what in (("retry", "queue failed or canceled jobs again (attempts anew)"),
                       ("cancel", "cancel unfinished jobs (a running handler is stopped)")):
        a = sub.add_parser(name, help=what, description=f"{what}: one job by its id, or every job matching "
                                                          "the ids and filters given (all must match)")
        a.add_argument("ids", nargs="*", metavar="ID", help="job ids")
        a.add_argument("--state", choices=STATES, help="only jobs in this state")
        a.add_argument("--kind", help="only jobs of this kind")
        a.add_argument("--error-code", help="only jobs whose last error has this code")
        a.add_argument("--json", action="store_true", help="print the job's admin view, or {\"count\": N}")

    sh = sub.add_parser("show", help="show a job as admins see it")
    sh.add_argument("id")
    sh.add_argument("--json", action="store_true")
    sub.add_parser("top", help="a live view of the queue and its workers in the terminal (q quits); "
                               "without a terminal, the view printed once")
    return p


COMMANDS = {"migrate": cmd_migrate, "worker": cmd_worker, "sweeper": cmd_sweeper, "up": cmd_up,
            "submit": cmd_submit, "show": cmd_show, "top": cmd_top, "pause": cmd_pause, "resume": cmd_resume,
            "schedules": cmd_schedules, "leave": cmd_leave, "retry": cmd_retry, "cancel": cmd_cancel}


def _fail(message: str, code: int) -> int:
    print(logs.fatal_line(message), file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parser().parse_args(argv)
    args.argv = argv  # `worker --processes N` starts its children with the same command line
    try:
        level = args.level = _log_level(args)  # also uvicorn's, in `jobfeed api`
        settings = Settings.from_env(host=getattr(args, "host", None), port=getattr(args, "port", None))
        logs.configure(level, settings.log_format)
        if args.command == "api":
            return cmd_api(settings, args)
        return run(COMMANDS[args.command](settings, args))
    except (SettingError, UsageError, migrations.SchemaError) as exc:
        return _fail(str(exc), 2)
    except db.DatabaseUnreachable as exc:
        return _fail(str(exc), 3)
    except (QueueError, InvalidSubmission) as exc:
        return _fail(f"{exc.code}: {exc.message}", 1 if exc.code == "not_found" else 2)
    except (asyncpg.DataError, asyncpg.ProgramLimitExceededError) as exc:
        # e.g. "\u0000" or a lone surrogate in a payload or a name, which the
        # API refuses with 422 for the same reason
        return _fail(f"invalid_input: PostgreSQL cannot store it ({exc})", 2)
    except db.POOLER_ERRORS as exc:
        # asyncpg's own multi-line hint after the message is about its pool, not ours
        return _fail(f"{str(exc).splitlines()[0]}: {db.POOLER_HINT}", 2)
    except asyncpg.InsufficientPrivilegeError as exc:
        return _fail(f"{exc}: the login role of DATABASE_URL may not do this (jobfeed migrate needs the"
                     " schema's owner, jobfeed worker a member of jobfeed_worker, jobfeed sweeper of"
                     " jobfeed_sweeper, the other commands of jobfeed_api)", 2)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return _reader_gone()


def _reader_gone() -> int:
    """The reader of our output left (`jobfeed show ID | head -1`): stop quietly,
    as a shell command killed by SIGPIPE does; stdout goes nowhere, so that
    Python's flush of it at exit raises nothing either."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    return 128 + signal.SIGPIPE


if __name__ == "__main__":
    sys.exit(main())
