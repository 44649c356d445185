"""The claim loop's own connection (see ClaimConnection)."""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from . import db
from .queue import Queue

log = logging.getLogger("jobfeed.worker")


class ClaimConnection:
    """A worker's claims, and its look at what is due next, go over one
    connection of their own. The claim loop makes one call at a time, so one
    connection serves it; on it a claim neither waits for the pool, which the
    handlers' progress, checkpoints and outcomes share, nor lands on a pooled
    backend that sat idle while the others served (through the pool, a lone
    job's claim measured markedly slower: bench/rounds.md, fifteenth round).
    It holds no session state. A connection that closed (the server
    restarted, the network broke) is replaced at the next call; until the
    database answers again the call fails, and the claim loop retries it as
    before."""

    NAME = "jobfeed-worker-claim"

    def __init__(self, dsn: str):
        self.dsn = dsn
        self._conn: asyncpg.Connection | None = None
        self._queue: Queue | None = None  # on _conn

    async def queue(self) -> Queue:
        """A Queue on the open connection, connecting first when there is none."""
        if self._conn is None or self._queue is None or self._conn.is_closed():
            self._conn = await db.connect(self.dsn, name=self.NAME)
            self._queue = Queue(self._conn)
        return self._queue

    async def close(self) -> None:
        conn, self._conn, self._queue = self._conn, None, None
        if conn is None or conn.is_closed():
            return
        try:
            async with asyncio.timeout(5):
                await conn.close()
        except (Exception, asyncio.CancelledError) as exc:
            log.debug("claim connection: closed by force (%s)", exc)
            conn.terminate()
