"""Calling the database again after an error that says the call may simply be
made again (the worker's writes, its claims, the sweeper's rounds)."""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import Awaitable, Callable, TypeVar

import asyncpg

log = logging.getLogger("jobfeed.worker")
_T = TypeVar("_T")

# Errors after which the same call may simply be made again: the transaction was
# rolled back (deadlock, serialization failure), or the connection or the server
# went away, so it either never happened or committed once. The worker's writes
# are fenced by generation, so a repeat of one that did commit answers "lost"
# and changes nothing.
RETRYABLE: tuple[type[BaseException], ...] = (
    asyncpg.TransactionRollbackError, asyncpg.PostgresConnectionError, asyncpg.OperatorInterventionError,
    asyncpg.TooManyConnectionsError, asyncpg.InterfaceError, OSError, asyncio.TimeoutError,
    # a connection whose server went away mid-call ("cannot switch to state")
    asyncpg.exceptions.InternalClientError,
    # new connections turned away for now (pg_hba.conf's reject while an
    # operator works; a wrong password stops a process at start instead)
    asyncpg.InvalidAuthorizationSpecificationError)


async def retrying(call: Callable[[], Awaitable[_T]], *, until: float, what: str,
                   first_delay: float = 0.02, max_delay: float = 1.0) -> _T:
    """Run call(), again after each retryable error, with exponential backoff
    (and jitter, so two workers that collided do not collide again) until the
    monotonic time `until`; then, or on any other error, the error is raised."""
    delay = first_delay
    while True:
        try:
            return await call()
        except RETRYABLE as exc:
            left = until - time.monotonic()
            if left <= 0:
                raise
            pause = min(delay * (0.5 + random.random()), left)
            log.warning("could not %s yet (%s: %s); trying again in %.2fs", what, type(exc).__name__, exc, pause)
            await asyncio.sleep(pause)
            delay = min(delay * 2, max_delay)
