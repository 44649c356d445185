"""Connections: the pool, the dedicated LISTEN connection, and the database a
command uses (DATABASE_URL, else the embedded server: worker/embedded.py; with
JOBFEED_DIRECT_URL beside a pooler's DATABASE_URL, the server itself for what
keeps session state)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from typing import Awaitable, Callable
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from . import logs, sql
from .settings import SettingError
from .waits import cancel_and_wait, wait_event

log = logging.getLogger("jobfeed.db")

# Every session reads and writes times in UTC, so JSON views look the same
# whichever process built them.
SERVER_SETTINGS = {"timezone": "UTC"}
# asyncpg's own default: prepared statements a connection keeps
STATEMENT_CACHE = 100

# A DATABASE_URL that goes through a pooler in transaction mode (PgBouncer),
# with JOBFEED_DIRECT_URL naming the server behind it: {pooler's URL: the
# server's}, filled by resolve_dsn. Such a pooler hands each transaction
# whichever server connection is free, so what a session keeps (a LISTEN, an
# advisory lock, a named prepared statement) is not there at its next one.
_DIRECT: dict[str, str] = {}


def direct(dsn: str) -> str:
    """The URL for a connection that keeps session state (LISTEN, a seat's or a
    migration's advisory lock): the server's own when `dsn` is a transaction
    pooler's (JOBFEED_DIRECT_URL), else `dsn` itself."""
    return _DIRECT.get(dsn, dsn)


def _statement_cache(dsn: str) -> int:
    """Through a transaction pooler none: asyncpg then prepares each query
    unnamed and sends its Parse again with the Bind, which any server
    connection takes."""
    return 0 if dsn in _DIRECT else STATEMENT_CACHE


# What a transaction pooler makes of the named statements asyncpg prepares
# when nobody said it was one (JOBFEED_DIRECT_URL unset): another session's
# statement of that name, or none of ours.
POOLER_ERRORS = (asyncpg.DuplicatePreparedStatementError, asyncpg.InvalidSQLStatementNameError)
POOLER_HINT = ("DATABASE_URL seems to reach a pooler in transaction mode: set JOBFEED_DIRECT_URL to the"
               " server itself (README, \"Behind a pooler in transaction mode\")")


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pooled connections hold no session state (LISTEN and migrations use
    connections of their own), so the default reset (RESET ALL, UNLISTEN *, ...:
    one more round trip per query) is skipped. asyncpg still rolls back an open
    transaction on release."""


# How long opening a pooled connection may take (asyncpg's default is a
# minute): a database that takes connections and never answers (a frozen
# host, a stopped proxy) fails a request with 503 in this time, not after 60 s.
CONNECT_TIMEOUT = 10.0
# How long one query of the services may take (asyncpg's default: for ever).
# A host that freezes with our connections open (or a network that silently
# drops packets) answers nothing: past this, the query fails with TimeoutError
# (a 503 from the API; the worker's calls are retried), asyncpg sends the
# server a cancel, bounded by the same time, and drops the connection if that
# fails too. Far above any query of a healthy database; calls known to be
# long (a bulk action on every job of a state, a migration) pass their own.
QUERY_TIMEOUT = 30.0
# How long a connection given back to the pool while it still cancels a query
# that timed out waits for that cancel (and its reset) before it is dropped
# instead. A frozen host takes the cancel's connection and never answers it:
# without this the caller of the timed-out query (an API request, its 503)
# waited QUERY_TIMEOUT again for asyncpg's bound on that cancel.
CANCEL_WAIT = 5.0


class _FloorRetries(logging.Filter):
    """asyncpg reconnects a pool's min_size connections in the background and
    logs each failed try (every few seconds while the database is away) with
    a full traceback; the cause, one line, is what an operator reads."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and str(record.msg).startswith("Failed to restore the pool connection floor"):
            error = record.exc_info[1]
            record.msg = "%s (%s)"
            record.args = ("could not reconnect the pool's standing connections; retrying",
                           f"{type(error).__name__}: {error}" if str(error) else type(error).__name__)
            record.exc_info = record.exc_text = None
        return True


logging.getLogger("asyncpg.pool").addFilter(_FloorRetries())


class _Pool(asyncpg.Pool):
    async def release(self, connection, *, timeout=None):
        # asyncpg's default: the acquire's timeout, else none at all; a
        # connection still cancelling a timed-out query gets CANCEL_WAIT
        con = getattr(connection, "_con", None)
        if con is not None and con._protocol._is_cancelling():
            acquired = getattr(getattr(connection, "_holder", None), "_timeout", None)
            timeout = min(t for t in (timeout, acquired, CANCEL_WAIT) if t is not None)
        return await super().release(connection, timeout=timeout)


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, name: str = "jobfeed",
                      timeout: float = CONNECT_TIMEOUT) -> asyncpg.Pool:
    # asyncpg.create_pool's own defaults, but our Pool class
    return await _Pool(
        dsn, min_size=min_size, max_size=max_size, max_queries=50000, max_inactive_connection_lifetime=300.0,
        connect=None, setup=None, init=None, reset=_keep_session, loop=None,
        connection_class=asyncpg.Connection, record_class=asyncpg.Record, timeout=timeout,
        command_timeout=QUERY_TIMEOUT, statement_cache_size=_statement_cache(dsn),
        server_settings={**SERVER_SETTINGS, "application_name": name})


async def connect(dsn: str, *, name: str = "jobfeed", bounded: bool = True) -> asyncpg.Connection:
    """bounded=False: no QUERY_TIMEOUT (a migration may build an index on a long history)."""
    return await asyncpg.connect(dsn, timeout=CONNECT_TIMEOUT, command_timeout=QUERY_TIMEOUT if bounded else None,
                                 statement_cache_size=_statement_cache(dsn),
                                 server_settings={**SERVER_SETTINGS, "application_name": name})


def with_database(url: str, database: str) -> str:
    """The same server URL, naming another database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(database), parts.query, parts.fragment))


class DatabaseUnreachable(Exception):
    """DATABASE_URL names a database that did not take a connection at start: one
    line naming it, exit 3 (README, "Commands")."""


async def resolve_dsn(settings) -> str:
    """DATABASE_URL if set, else the embedded server (started if need be).
    With JOBFEED_DIRECT_URL beside it, direct() answers that for it from now on."""
    if settings.database_url:
        if settings.direct_url and settings.direct_url != settings.database_url:
            _DIRECT[settings.database_url] = settings.direct_url
        return settings.database_url
    from .embedded import embedded_dsn

    return await embedded_dsn(settings.data_dir)


async def connect_first(dsn: str, *, name: str, bounded: bool = True, session: bool = False) -> asyncpg.Connection:
    """A command's first connection (its schema check, or its migration), so
    every command that starts on a database it cannot use says why in one line
    naming DATABASE_URL: SettingError when the URL is malformed,
    DatabaseUnreachable when the server cannot be reached or refuses (down,
    unknown host, no such database, bad login). Only at start: a long-running
    process that loses the database later retries on its own.
    session: a connection that keeps session state (direct()); a fault of
    JOBFEED_DIRECT_URL's is told as that setting's."""
    url = direct(dsn) if session else dsn
    setting = "JOBFEED_DIRECT_URL" if url != dsn else "DATABASE_URL"
    try:
        urllib.parse.urlsplit(url).port  # noqa: B018  (raises ValueError for a port out of range)
        conn = await connect(url, name=name, bounded=bounded)
    except ValueError as exc:  # asyncpg's ClientConfigurationError is one
        # Other ValueErrors (a port that is no number) may quote a piece of the
        # password: not repeated.
        why = str(exc) if isinstance(exc, asyncpg.ClientConfigurationError) else "its host or port cannot be read"
        raise SettingError(f"{setting}: not a PostgreSQL URL ({why}); "
                           "write postgresql://user:password@host:port/database") from None
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:  # a timeout is an OSError
        raise DatabaseUnreachable(f"{setting}: cannot connect to {logs.without_password(url)}: "
                                  f"{str(exc) or type(exc).__name__}") from None
    if url != dsn:
        try:
            await _same_database(conn, dsn, name=name)
        except BaseException:
            await conn.close()
            raise
    return conn


async def _same_database(conn: asyncpg.Connection, dsn: str, *, name: str) -> None:
    """JOBFEED_DIRECT_URL (conn) reaches the database DATABASE_URL (dsn) does,
    else SettingError: its listeners would hear nothing of the jobs written
    through the pooler, and a migration would go to the other database."""
    other = await connect_first(dsn, name=f"{name}-pooler")
    try:
        query = sql.query("database_identity")
        try:
            direct_one, pooled = await conn.fetchrow(query), await other.fetchrow(query)
        except asyncpg.PostgresError as exc:  # pg_control_system() withheld, on some hosted servers
            log.warning("could not check that JOBFEED_DIRECT_URL reaches DATABASE_URL's database: %s", exc)
            return
    finally:
        await other.close()
    if (direct_one["cluster"], direct_one["database"]) != (pooled["cluster"], pooled["database"]):
        where = "" if direct_one["cluster"] == pooled["cluster"] else " on another server"
        raise SettingError(f"JOBFEED_DIRECT_URL: reaches database {direct_one['name']!r}, not the one DATABASE_URL "
                           f"reaches ({pooled['name']!r}{where}); name the pooler's database, on the server itself")


# ---------------------------------------------------------------- listening

Callback = Callable[[str, str], None]


class Listener:
    """One dedicated connection that LISTENs (a pooled one would be reset with
    UNLISTEN * on release). Reconnects with backoff when the connection dies,
    and calls on_connect after every (re)connect, once LISTEN is in place, so the
    owner can re-read state it may have missed. NOTIFY is only a hint. It goes
    to the server itself when `dsn` is a transaction pooler's (direct()).

    `dsn` may also be a pool someone else owns (a host app's): the connection
    is then taken from it and held until stop(), and given back unlistened."""

    def __init__(self, dsn: str | asyncpg.Pool, channels: dict[str, Callback], *,
                 on_connect: Callable[[], Awaitable[None]] | None = None,
                 health_interval: float = 10.0, name: str = "jobfeed-listener"):
        self.dsn = dsn
        self.channels = channels
        self.on_connect = on_connect
        self.health_interval = health_interval
        self.name = name
        self.connected = asyncio.Event()
        self._conn: asyncpg.Connection | None = None
        self._task: asyncio.Task | None = None
        self._lost = asyncio.Event()
        self._callbacks: dict[str, Callable] = {}

    async def start(self) -> None:
        """Connect once (raising if the database is unreachable), then keep the
        connection alive in the background."""
        await self._connect()
        self._task = asyncio.create_task(self._keep_alive(), name=f"{self.name}-keepalive")

    async def stop(self) -> None:
        if self._task:
            await cancel_and_wait(self._task)
        if self._conn is not None:
            await self._drop(self._conn, graceful=True)

    async def _open(self) -> asyncpg.Connection:
        if isinstance(self.dsn, asyncpg.Pool):
            return await self.dsn.acquire()
        return await connect(direct(self.dsn), name=self.name)

    async def _drop(self, conn: asyncpg.Connection, *, graceful: bool = False) -> None:
        if not isinstance(self.dsn, asyncpg.Pool):
            if conn.is_closed():
                return
            if graceful:
                try:
                    await conn.close(timeout=2)
                    return
                except Exception as exc:  # a host that froze answers no goodbye; asyncpg aborts it
                    log.debug("%s: closed by force (%s)", self.name, type(exc).__name__)
            conn.terminate()
            return
        # A lent connection goes back to its pool, unlistened (the owner's pool
        # may not reset connections). asyncpg detaches a pooled connection that
        # died (InterfaceError from then on): its pool has taken it back already.
        with contextlib.suppress(asyncpg.InterfaceError):
            if graceful:
                try:
                    for channel, callback in self._callbacks.items():
                        await conn.remove_listener(channel, callback)  # the last one UNLISTENs
                except (asyncpg.PostgresError, OSError):
                    conn.terminate()
            else:
                conn.terminate()
            await self.dsn.release(conn, timeout=2)

    @property
    def backend_pid(self) -> int | None:
        if self._conn is not None:
            with contextlib.suppress(asyncpg.InterfaceError):  # a lent connection that died
                return self._conn.get_server_pid()
        return None

    async def _connect(self) -> None:
        conn = await self._open()
        try:
            self._lost.clear()
            conn.add_termination_listener(lambda _c: self._lost.set())
            for channel, callback in self.channels.items():
                self._callbacks[channel] = lambda _c, _pid, ch, payload, cb=callback: cb(ch, payload)
                await conn.add_listener(channel, self._callbacks[channel])
            if self.on_connect is not None:
                await self.on_connect()
        except BaseException:
            await self._drop(conn)  # a half-set-up connection is dropped, never kept
            raise
        self._conn = conn
        self.connected.set()

    async def _keep_alive(self) -> None:
        delay = 0.1
        # Half the interval idle, half for the probe's answer: a connection
        # that went silent is noticed within one health_interval (it was two).
        half = self.health_interval / 2
        while True:
            if not await wait_event(self._lost, half):
                try:  # a silent network loss shows up only when we talk
                    assert self._conn is not None  # kept alive only once connected
                    async with asyncio.timeout(half):
                        await self._conn.fetchval("select 1")
                    continue
                except Exception:
                    pass
            self.connected.clear()
            log.warning("%s: connection lost, reconnecting", self.name)
            if self._conn is not None:
                await self._drop(self._conn)
                self._conn = None
            while True:
                try:
                    await self._connect()
                    delay = 0.1
                    break
                except Exception as exc:  # the database may be restarting
                    log.warning("%s: reconnect failed (%s); retrying in %.1fs", self.name, exc, delay)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 5.0)
