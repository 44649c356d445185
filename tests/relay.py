"""A TCP (or Unix socket) relay to the test database that a test shuts, as a
network failure or a stopped server would: the API behind it loses its
database while the test, the browser and the API process stay up."""

from __future__ import annotations

import asyncio
import pathlib
import urllib.parse


class Relay:
    """127.0.0.1:<port>, or a Unix socket in `socket_dir` (as the embedded
    server is reached), relayed to the database; shut() refuses new
    connections (the socket file is gone, as when its server stops) and cuts
    the open ones, open() serves again at the same address."""

    def __init__(self, dsn: str, socket_dir: str | None = None):
        url = urllib.parse.urlsplit(dsn)
        host = urllib.parse.parse_qs(url.query).get("host", [url.hostname or "127.0.0.1"])[0]
        self.upstream = host, url.port or 5432  # a directory: the server's Unix socket there
        self.user, self.database = url.username, url.path
        self.socket_dir = socket_dir
        self.port = 0 if socket_dir is None else 5433
        self.server: asyncio.Server | None = None
        self.writers: list[asyncio.StreamWriter] = []
        self.hanging = False
        self._flowing = asyncio.Event()  # cleared by freeze(): bytes stop on open connections
        self._flowing.set()

    @property
    def dsn(self) -> str:
        if self.socket_dir is None:
            return f"postgresql://{self.user}@127.0.0.1:{self.port}{self.database}"
        return f"postgresql://{self.user}@{self.database}?host={self.socket_dir}&port={self.port}"

    async def open(self) -> None:
        self.hanging = False
        self._flowing.set()
        if self.server is not None and self.server.is_serving():  # after hang(): serving already
            return
        if self.socket_dir is not None:
            path = f"{self.socket_dir}/.s.PGSQL.{self.port}"
            self.server = await asyncio.start_unix_server(self._serve, path)
            return
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", self.port, reuse_address=True)
        self.port = self.server.sockets[0].getsockname()[1]

    async def shut(self) -> None:
        assert self.server is not None
        self.server.close()
        if self.socket_dir is not None:  # a stopped PostgreSQL removes its socket file
            pathlib.Path(self.socket_dir, f".s.PGSQL.{self.port}").unlink(missing_ok=True)
        for w in self.writers:
            w.close()
        self.writers.clear()

    def hang(self) -> None:
        """Cut the open connections and take new ones without ever answering,
        as a frozen host or a stopped proxy does; open() ends it."""
        self.hanging = True
        for w in self.writers:
            w.close()
        self.writers.clear()

    def freeze(self) -> None:
        """Keep the open connections open but carry nothing on them, and take
        new ones without ever answering, as a host that froze (or a network
        that silently drops packets) does; open() lets everything flow again."""
        self.hanging = True
        self._flowing.clear()

    def failover(self) -> None:
        """New connections flow again (to a new primary at the same address);
        the frozen ones stay open and carry nothing for ever, as connections
        to a host that is gone do until TCP gives up on them, hours later."""
        self.hanging = False
        self._flowing = asyncio.Event()
        self._flowing.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        flowing = self._flowing  # this connection's: failover() leaves it frozen
        if self.hanging:
            self.writers.append(writer)
            await reader.read()  # until the client gives up
            return
        host, port = self.upstream
        up_reader, up_writer = await (asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}") if host.startswith("/")
                                      else asyncio.open_connection(host, port))
        self.writers += [writer, up_writer]

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    await flowing.wait()
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
