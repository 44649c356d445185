"""The database goes away under a running API: its answers say so with a 503
(retry shortly), not a 500 that reads as a bug, and it serves again once the
database is back. The API reaches the test database through a TCP relay the
test shuts, as a network failure or a restarting server would."""

from __future__ import annotations

import asyncio
import pathlib
import urllib.parse
import uuid

import pytest

from jobfeed import create_pool
from jobfeed.api.app import create_app
from servers import asgi_client, make_settings
from waiting import eventually


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

    @property
    def dsn(self) -> str:
        if self.socket_dir is None:
            return f"postgresql://{self.user}@127.0.0.1:{self.port}{self.database}"
        return f"postgresql://{self.user}@{self.database}?host={self.socket_dir}&port={self.port}"

    async def open(self) -> None:
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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        host, port = self.upstream
        up_reader, up_writer = await (asyncio.open_unix_connection(f"{host}/.s.PGSQL.{port}") if host.startswith("/")
                                      else asyncio.open_connection(host, port))
        self.writers += [writer, up_writer]

        async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            try:
                while data := await r.read(65536):
                    w.write(data)
                    await w.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                w.close()
        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@pytest.mark.parametrize("over", ["tcp", "unix"])
async def test_a_lost_database_answers_503_and_the_api_recovers(dsn, tmp_path, over):
    relay = Relay(dsn, str(tmp_path) if over == "unix" else None)
    await relay.open()
    pool = await create_pool(relay.dsn, min_size=1, max_size=4, name="jobfeed-test-relayed")
    try:
        async with asgi_client(create_app(make_settings(dsn), pool=pool)) as client:
            unknown = f"/api/jobs/{uuid.uuid4()}"
            assert (await client.get(unknown)).status_code == 404
            assert (await client.get("/readyz")).status_code == 200

            await relay.shut()
            for r in (await client.get(unknown),
                      await asyncio.wait_for(client.post("/api/jobs", json={"kind": "demo", "target": "t"}), 10)):
                assert r.status_code == 503, r.text
                assert r.json()["error"]["code"] == "database_unavailable"
                assert r.headers["retry-after"] == "1"
            assert (await client.get("/readyz")).status_code == 503
            # the process's own metrics are what an operator needs now (before: a 503 too)
            scraped = await client.get("/metrics")
            assert scraped.status_code == 200 and "jobfeed_http_requests_total{" in scraped.text, scraped.text[:300]
            assert "jobfeed_kind_paused{" not in scraped.text  # not shown stale
            assert "jobfeed_oldest_due_seconds " not in scraped.text  # nor as 0, an all-clear

            await relay.open()

            async def served() -> bool:
                return (await client.get(unknown)).status_code == 404
            await eventually(served, timeout=10, what="the API serves again")
            assert (await client.post("/api/jobs", json={"kind": "demo", "target": "t"})).status_code == 201
    finally:
        await relay.shut()
        await pool.close()
