"""The handler API: register `async def handler(job, ctx)` per kind, raise
Transient / Permanent / Release to say how an attempt ended."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import logging
import os
import traceback
from pathlib import Path
from typing import Any, Awaitable, Callable, Collection, Literal, Sequence, TypeVar, get_args

from .queue import Job  # noqa: F401  (handlers import it from here)
from .limits import INT_MAX
from .schedules import Periodic, periodic
from .settings import (MAX_DURATION, MIN_DURATION, MIN_LEASE, SettingError, Settings, parse_duration,
                       parse_durations, too_short)
# How an attempt ends, and the HTTP helpers that say it for an upstream's
# answer: in modules of their own, importable from here as handlers always have.
from .job_errors import Abandon, JobError, LeaseLost, Permanent, Release, Transient, WaitFor  # noqa: F401
from .http_helpers import check_response, http_errors  # noqa: F401
from .context import Context  # noqa: F401  (the handler's ctx, in a module of its own)


log = logging.getLogger("jobfeed.worker")

Handler = Callable[["Job", "Context"], Awaitable[Any]]
# @task hands back the very function it registered, typed as it was (not Any,
# which mypy --strict reports at every decorated handler)
HandlerT = TypeVar("HandlerT", bound=Handler)


def parse_rate(text: str, name: str = "rate") -> tuple[int, float]:
    """'100/1m' -> (100, 60.0): at most 100 starts per minute. A bare unit
    ('5/s', '100/m') is one of it."""
    count, _, period = str(text).partition("/")
    period = period.strip()
    try:
        n = int(count.strip())
        seconds = parse_duration(f"1{period}" if period.isalpha() else period, name)
    except (ValueError, SettingError):
        raise ValueError(f"{name}: {text!r} is not a rate (write e.g. 100/1m, 5/1s)") from None
    if not 1 <= n <= INT_MAX:
        raise ValueError(f"{name}: {text!r} needs from 1 to {INT_MAX} starts per period")
    if seconds < MIN_DURATION:  # the kinds table's interval would round it to none
        raise too_short(f"{name} period", period, MIN_DURATION)
    return n, seconds


def _whole(value: object, least: int) -> bool:
    """An int (not a bool) from least to INT_MAX: what the kinds table holds."""
    return isinstance(value, int) and not isinstance(value, bool) and least <= value <= INT_MAX


# A kind's choices, as the kinds table's CHECKs allow them (GET /api/kinds shows them);
# as types, a type checker refuses a misspelt one in @task.
OnAbandon = Literal["cancel", "keep"]
Dedupe = Literal["global", "requester"]
OnDuplicate = Literal["join", "reject_different", "rerun", "replace"]
ON_ABANDON: tuple[str, ...] = get_args(OnAbandon)
DEDUPE: tuple[str, ...] = get_args(Dedupe)
ON_DUPLICATE: tuple[str, ...] = get_args(OnDuplicate)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    kind: str
    handler: Handler
    max_attempts: int | None = None
    lease: float | None = None
    backoff: tuple[float, ...] | None = None
    jitter: float = 0.1
    description: str = ""
    validate: Callable[[dict], None] | None = None  # raises ValueError for a payload it refuses
    on_abandon: str = "cancel"  # when its last requester leaves: "cancel" or "keep"
    on_duplicate: str = "join"  # a duplicate of an unfinished job: join, reject_different, rerun, replace
    reuse_for: float | None = None  # seconds a completion answers new submissions of its target
    # flow control (README "Scheduling and flow control"), enforced by the claim
    priority: int = 0                        # submissions' default; higher is claimed first
    max_running: int | None = None           # running jobs of the kind, across workers
    max_running_per_key: int | None = None   # running jobs per concurrency_key
    rate: tuple[int, float] | None = None    # (starts, per seconds), across workers
    periodic: Periodic | None = None         # schedule= or every=: one job per slot
    timeout: float | None = None             # seconds a run may take; past it: transient, code timeout
    dedupe: str = "global"  # who shares an unfinished job: everyone, or one requester identity

    def resolved(self, settings: Settings) -> "TaskSpec":
        """Fill what the kind leaves open from the settings (JOBFEED_LEASE, ...)."""
        return dataclasses.replace(
            self,
            max_attempts=self.max_attempts or settings.max_attempts,
            lease=self.lease or settings.lease,
            backoff=self.backoff or settings.backoff)


class Registry:
    def __init__(self):
        self._specs: dict[str, TaskSpec] = {}

    def task(self, kind: str, *, max_attempts: int | None = None, lease: float | str | None = None,
             backoff: Sequence[float | str] | str | None = None, jitter: float = 0.1, description: str = "",
             validate: Callable[[dict], None] | None = None, on_abandon: OnAbandon = "cancel",
             on_duplicate: OnDuplicate = "join", reuse_for: float | str | None = None, priority: int = 0,
             max_running: int | None = None, max_running_per_key: int | None = None, rate: str | None = None,
             schedule: str | None = None, timezone: str | None = None, every: str | float | None = None,
             timeout: str | float | None = None, dedupe: Dedupe = "global") -> Callable[[HandlerT], HandlerT]:
        """Decorator: @task("fetch_email", max_attempts=5, lease=300, backoff=(60, 300)).
        `validate(payload)` raising ValueError makes a submission a 422.
        `on_abandon`: what happens to an unfinished job when its last requester
        leaves: "cancel" (the default) or "keep" (it runs to the end).
        `on_duplicate`: "join" (share the unfinished job), "reject_different"
        (409 payload_conflict when the payload differs), "rerun" (a running job
        runs once more afterwards with the newest payload) or "replace" (the
        running attempt is fenced out and the job starts over with it).
        `dedupe`: "global" (every submission of a target shares its unfinished
        job) or "requester" (only those of one requester identity; a
        submission without one never shares).
        `reuse_for` ("10m", or seconds): a submission that soon after the
        target's last completion gets that completed job. priority is
        the submissions' default; max_running, max_running_per_key and rate
        ("100/1m") are enforced by the claim across all workers. `timeout`
        ("10m", or seconds): a run that takes longer is canceled and counts as
        a transient failure with code "timeout". `lease` and `backoff` take
        seconds or durations ("5m"; backoff also "1m,5m,15m")."""
        lease, backoff = _check_retries(kind, max_attempts, lease, backoff, jitter)
        for name, choice, choices in (("on_abandon", on_abandon, ON_ABANDON), ("dedupe", dedupe, DEDUPE),
                                      ("on_duplicate", on_duplicate, ON_DUPLICATE)):
            if choice not in choices:
                raise ValueError(f"@task({kind!r}): {name} must be one of {', '.join(map(repr, choices))}, "
                                 f"not {choice!r}")
        reuse_seconds = None if reuse_for is None else _seconds(reuse_for, f"@task({kind!r}) reuse_for")
        if reuse_seconds is not None and reuse_seconds <= 0:
            raise ValueError(f"@task({kind!r}): reuse_for must be longer than zero")
        if not _whole(priority, -INT_MAX):
            raise ValueError(f"@task({kind!r}): priority must be a whole number from {-INT_MAX} to {INT_MAX}")
        for name, value in (("max_running", max_running), ("max_running_per_key", max_running_per_key)):
            if value is not None and not _whole(value, 1):
                raise ValueError(f"@task({kind!r}): {name} must be a whole number from 1 to {INT_MAX}")
        parsed_rate = parse_rate(rate, f"@task({kind!r}) rate") if rate is not None else None
        when = periodic(kind, schedule, timezone, None if every is None else _seconds(every, f"@task({kind!r}) every"))
        timeout_seconds = None if timeout is None else _seconds(timeout, f"@task({kind!r}) timeout")
        if timeout_seconds is not None and timeout_seconds <= 0:
            raise ValueError(f"@task({kind!r}): timeout must be longer than zero")

        def register(handler: HandlerT) -> HandlerT:
            _check_handler(kind, handler)
            earlier = self._specs.get(kind)
            if earlier is not None and earlier.handler is not handler:
                log.warning("@task(%r) registered again: %s replaces %s", kind,
                            _name_of(handler), _name_of(earlier.handler))
            self._specs[kind] = TaskSpec(kind, handler, max_attempts, lease,
                                         tuple(backoff) if backoff else None, jitter, description, validate,
                                         on_abandon, on_duplicate, reuse_seconds,
                                         priority, max_running, max_running_per_key, parsed_rate, when,
                                         timeout_seconds, dedupe)
            return handler
        return register

    def add(self, spec: TaskSpec) -> None:
        """Register a spec made elsewhere (a built-in kind such as jobfeed.webhook)."""
        self._specs[spec.kind] = spec

    def get(self, kind: str) -> TaskSpec | None:
        return self._specs.get(kind)

    def kinds(self) -> list[str]:
        return sorted(self._specs)

    def specs(self, settings: Settings) -> list[TaskSpec]:
        return [self._specs[k].resolved(settings) for k in self.kinds()]


def _check_retries(kind: object, max_attempts: object, lease: object, backoff: Sequence[float | str] | str | None,
                   jitter: object) -> tuple[float | None, tuple[float, ...] | None]:
    """@task's name and retry options, refused at decoration rather than when
    a worker registers the kind or a job first runs; -> (lease, backoff) in
    seconds."""
    if not isinstance(kind, str):  # also a bare @task, which hands over the function
        raise TypeError('@task needs the kind\'s name first: @task("fetch_email", ...)')
    # a kind is a path segment of /api/admin/kinds/{kind}/pause; jobfeed.* are jobfeed's own
    if kind != kind.strip() or not kind or "/" in kind or "\x00" in kind or kind.startswith("jobfeed."):
        raise ValueError(f"@task({kind!r}): a kind's name is not empty, has no '/' and no spaces around it, "
                         "and does not start with 'jobfeed.'")
    if max_attempts is not None and not _whole(max_attempts, 1):
        raise ValueError(f"@task({kind!r}): max_attempts must be a whole number from 1 to {INT_MAX}")
    if not (isinstance(jitter, (int, float)) and not isinstance(jitter, bool) and 0 <= jitter <= 1):
        raise ValueError(f"@task({kind!r}): jitter must be a number from 0 to 1")
    # at least what the heartbeat renews in time
    seconds = None if lease is None else _seconds(lease, f"@task({kind!r}) lease", least=MIN_LEASE)
    if seconds is not None and seconds <= 0:
        raise ValueError(f"@task({kind!r}): lease must be longer than zero")
    if backoff is None:
        return seconds, None
    if isinstance(backoff, str):
        delays = parse_durations(backoff, f"@task({kind!r}) backoff")
    elif isinstance(backoff, (list, tuple)):
        delays = tuple(_seconds(d, f"@task({kind!r}) backoff") for d in backoff)
    else:
        raise ValueError(f"@task({kind!r}): backoff is a list of delays or a string such as \"1m,5m\"")
    if not delays or any(d < 0 for d in delays):
        raise ValueError(f"@task({kind!r}): backoff needs at least one delay, none below zero")
    return seconds, delays


def _seconds(value: object, name: str, least: float = MIN_DURATION) -> float:
    """An @task option given in seconds or as a duration ("5m"), at least
    `least` unless zero or less; ValueError naming the option otherwise.
    Whether zero or less will do is the caller's."""
    if isinstance(value, str):
        seconds = parse_duration(value, name, zero=True)  # a SettingError is a ValueError
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name}: {value!r} is neither seconds nor a duration such as \"5m\"")
    else:
        seconds = float(value)
    # what an interval in the kinds table holds (microseconds, up to the longest duration)
    if not (seconds <= MAX_DURATION):
        raise ValueError(f"{name}: {value!r} must be from {least * 1000:g} ms to {MAX_DURATION:,} seconds")
    if 0 < seconds < least:
        raise too_short(name, value, least)
    return seconds


def _check_handler(kind: str, handler: object) -> None:
    """A handler is awaited as handler(job, ctx): anything else would fail each
    of a job's attempts, found only when the last has failed."""
    if not (inspect.iscoroutinefunction(handler)
            or callable(handler) and inspect.iscoroutinefunction(type(handler).__call__)):  # async __call__
        raise TypeError(f"@task({kind!r}): {_name_of(handler)} must be an async function: "
                        "async def handler(job, ctx)")
    try:
        inspect.signature(handler).bind(None, None)
    except TypeError:
        raise TypeError(f"@task({kind!r}): {_name_of(handler)} is called with two arguments, (job, ctx)") from None
    except ValueError:
        pass  # no signature to read (a builtin): trusted


def _name_of(handler: object) -> str:
    return f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', repr(handler))}"


registry = Registry()
task = registry.task


# jobfeed's own code, which a task module's frames are told apart from
_OUR_CODE = tuple(str(Path(__file__).parent.parent / part) + os.sep for part in ("worker", "api"))


def load_tasks(modules: Sequence[str]) -> Registry:
    """Import every module named in JOBFEED_TASKS (the built-in demo kind is
    `jobfeed.demo`); their @task decorators fill the registry. One that is
    missing, or fails to import, is a SettingError naming JOBFEED_TASKS: what
    failed and where, in one line."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            if isinstance(exc, ModuleNotFoundError) and exc.name and f"{name}.".startswith(f"{exc.name}."):
                raise SettingError(f"JOBFEED_TASKS: no module named {name!r} "
                                   "(is its folder on the Python path?)") from None
            # The innermost frame of the module's own code: not the import
            # machinery's, nor jobfeed's checks of what @task was given (a
            # SyntaxError says where itself).
            frames = [f for f in traceback.extract_tb(exc.__traceback__)
                      if f.filename != importlib.__file__ and not f.filename.startswith(("<frozen", *_OUR_CODE))]
            where = f" (at {frames[-1].filename}:{frames[-1].lineno})" if frames else ""
            raise SettingError(f"JOBFEED_TASKS: importing {name} failed: {type(exc).__name__}: {exc}{where}") from exc
    return registry


async def register_kinds(queue, settings: Settings, *, overwrite: bool,
                         running: Collection[str] | None = None) -> list[TaskSpec]:
    """Record every registered kind's settings in the database, where the queue's
    functions apply them. Workers overwrite the kinds they run (`running`, when
    they run only some: `--kinds`); every other kind, and every kind of other
    processes, is only added when nobody registered it yet."""
    specs = registry.specs(settings)
    for spec in specs:
        await register_kind(queue, spec, overwrite=overwrite and (running is None or spec.kind in running))
    return specs


async def register_kind(queue, spec: TaskSpec, *, overwrite: bool) -> None:
    """Record one resolved kind's settings (see register_kinds)."""
    await queue.register_kind(spec.kind, max_attempts=spec.max_attempts, lease=spec.lease,
                              backoff=spec.backoff, jitter=spec.jitter, description=spec.description,
                              overwrite=overwrite, priority=spec.priority, max_running=spec.max_running,
                              max_running_per_key=spec.max_running_per_key, rate=spec.rate)
    if overwrite:  # workers run the kind: they say what abandoning it does, and whether it is periodic
        await queue.set_kind_request_policy(spec.kind, on_abandon=spec.on_abandon, on_duplicate=spec.on_duplicate,
                                            reuse_for=spec.reuse_for, dedupe=spec.dedupe)
        if spec.periodic is None:
            await queue.drop_schedule(spec.kind)
