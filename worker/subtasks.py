"""Tasks a handler starts itself (asyncio.create_task, gather, wait_for...).
asyncio lets a SystemExit or KeyboardInterrupt raised in any task out of the
event loop: one in a handler's own task would end the worker, its other jobs
left to wait out their leases. The worker's loop gets a task factory that runs
each task started while a handler runs through _Contained: such an exit ends
that handler's attempt instead (as if the handler had raised it), and the task
as canceled. Where the exit leaves the loop it is too late: asyncio has stopped
the loop, and which job's task raised it is no longer known."""

from __future__ import annotations

import asyncio
import collections.abc
import contextvars
from typing import Any, Callable

# Set in the task that runs a handler, and so inherited by every task it
# starts: what ends the attempt for an exit raised in one of them.
on_exit: contextvars.ContextVar[Callable[[BaseException], None] | None] = contextvars.ContextVar(
    "jobfeed_on_exit", default=None)


def install(loop: asyncio.AbstractEventLoop) -> None:
    """Contain the exits of handlers' tasks on this loop (once per loop; a
    factory set before keeps making the tasks)."""
    previous = loop.get_task_factory()
    if not isinstance(previous, _Factory):
        loop.set_task_factory(_Factory(previous))


class _Factory:
    def __init__(self, previous: Any) -> None:
        self.previous = previous

    def __call__(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task:
        context = kwargs.get("context")  # the task runs in it, or else in a copy of the current one
        handler_exit = on_exit.get() if context is None else context.get(on_exit)
        if handler_exit is not None and asyncio.iscoroutine(coro):
            coro = _Contained(coro, handler_exit)
        if self.previous is None:
            return asyncio.Task(coro, loop=loop, **kwargs)
        return self.previous(loop, coro, **kwargs)


class _Contained(collections.abc.Coroutine):
    """A task's coroutine, driven through it as the task drives any coroutine.
    Not an `async def` wrapper: a task canceled before its first step would
    close that wrapper unstarted and leave the coroutine it holds "never
    awaited" (a RuntimeWarning); here the cancel is thrown into the coroutine."""

    __slots__ = ("_coro", "_on_exit")

    def __init__(self, coro: collections.abc.Coroutine, handler_exit: Callable[[BaseException], None]) -> None:
        self._coro = coro
        self._on_exit = handler_exit

    def send(self, value: Any) -> Any:
        try:
            return self._coro.send(value)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise self._exited(exc) from exc

    def throw(self, *args: Any) -> Any:
        try:
            return self._coro.throw(*args)
        except (SystemExit, KeyboardInterrupt) as exc:
            raise self._exited(exc) from exc

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Any:
        return self._coro.__await__()

    def __getattr__(self, name: str) -> Any:  # __qualname__, cr_frame...: a task's repr and stack show the coroutine
        return getattr(self._coro, name)

    def _exited(self, exc: BaseException) -> asyncio.CancelledError:
        self._on_exit(exc)
        return asyncio.CancelledError(f"{type(exc).__name__} raised in a task the handler started")
