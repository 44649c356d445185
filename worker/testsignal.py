"""Points in the worker and the feed that tests wait on instead of the clock.

A `Signal` does nothing until a test calls `enable()` on it: in production
`signal()` is one attribute check. Enabled, every `signal(value)` is queued, and
the test awaits `wait()`, which returns the next value (failing after a generous
timeout, which only a broken test reaches). A `Timer` stands where a component
would call asyncio.sleep: enabled, each wait is reported (with its delay) and
lasts until the test calls `fire()`, so a test runs a heartbeat as fast as it
likes and sees the cadence the component asked for."""

from __future__ import annotations

import asyncio
from typing import Any


async def _next(queue: asyncio.Queue, timeout: float, missing: str) -> Any:
    """The queue's next value; a test that waited `timeout` for it fails with `missing`."""
    try:
        async with asyncio.timeout(timeout):
            return await queue.get()
    except TimeoutError:
        raise AssertionError(f"{missing} within {timeout}s") from None


class Signal:
    __slots__ = ("_queue",)

    def __init__(self) -> None:
        self._queue: asyncio.Queue | None = None

    def enable(self) -> "Signal":
        self._queue = asyncio.Queue()
        return self

    def signal(self, value: Any = None) -> None:
        if self._queue is not None:
            self._queue.put_nowait(value)

    async def wait(self, timeout: float = 10.0) -> Any:
        if self._queue is None:
            raise RuntimeError("wait() on a signal that was not enabled")
        return await _next(self._queue, timeout, "no signal")

    def pending(self) -> int:
        return self._queue.qsize() if self._queue is not None else 0


class Timer:
    """asyncio.sleep, unless a test enabled it; then a wait lasts until fire()."""

    __slots__ = ("_asked", "_go")

    def __init__(self) -> None:
        self._asked: asyncio.Queue | None = None
        self._go: asyncio.Event | None = None

    def enable(self) -> "Timer":
        self._asked = asyncio.Queue()
        self._go = asyncio.Event()
        return self

    async def sleep(self, delay: float) -> None:
        if self._asked is None or self._go is None:
            await asyncio.sleep(delay)
            return
        self._asked.put_nowait(delay)
        await self._go.wait()
        self._go.clear()

    async def asked(self, timeout: float = 10.0) -> float:
        """The delay of the next wait the component started."""
        if self._asked is None:
            raise RuntimeError("asked() on a timer that was not enabled")
        return await _next(self._asked, timeout, "no wait started")

    def fire(self) -> None:
        """End the wait under way (as if its delay had passed)."""
        if self._go is None:
            raise RuntimeError("fire() on a timer that was not enabled")
        self._go.set()
