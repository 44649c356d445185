"""Real servers for API tests: uvicorn in a thread (the app object stays at hand)
or as a subprocess (a separate API process, as deployed), an in-process client
for plain requests, and a small server-sent events reader.

httpx's ASGI transport buffers whole bodies, so streams are only ever tested
against a real server."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import AsyncIterator

import httpx
import pytest
import uvicorn

from jobfeed.api.app import create_app, end_streams
from jobfeed.api.http_protocol import uvicorn_options
from jobfeed.worker.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
ADMIN_TOKEN = "admin-token-for-tests"
# A well-formed job id no test database holds. A constant, not uuid4(): test ids
# built from it must be the same in every pytest process (pytest-xdist).
UNKNOWN_JOB_ID = "0190c7d2-0000-7000-8000-000000000000"

# Short intervals, and the demo kind's timing as tests/conftest.py's demo_kind
# registers it (the API registers kinds from these settings at start).
FAST = dict(sse_ping=0.2, sse_retry=0.5, feed_batch=0.005, listener_health=1.0)
# A test client keeps an idle connection well under uvicorn's keep-alive timeout
# (5 s, httpx's own default too): at the same 5 s, a request sent as the server
# closes the connection reads "Server disconnected without sending a response".
CLIENT_LIMITS = httpx.Limits(keepalive_expiry=2.0)


def free_port() -> int:
    """A port nothing listens on now (for a server in a subprocess)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def oldest_server_bin() -> tuple[int, str] | None:
    """(major version, folder of its programs) of the oldest PostgreSQL Debian's
    packages installed, or None: the server CI's older-server run uses
    (JOBFEED_TEST_PG_BIN=oldest, tests/conftest.py)."""
    found = sorted((int(p.parent.parent.name), str(p.parent)) for p in Path("/usr/lib/postgresql").glob("*/bin/initdb")
                   if p.parent.parent.name.isdigit())
    return found[0] if found else None


def make_settings(dsn: str, **overrides) -> Settings:
    values = dict(database_url=dsn, admin_token=ADMIN_TOKEN, lease=1.0, backoff=(0.2,), max_attempts=5,
                  tasks=("jobfeed.demo",), **FAST)
    values.update(overrides)
    return Settings(**values)


def api_env(dsn: str, **extra: str) -> dict[str, str]:
    """Environment for an API subprocess on the test database."""
    env = dict(os.environ)
    env.update({"DATABASE_URL": dsn, "JOBFEED_ADMIN_TOKEN": ADMIN_TOKEN, "JOBFEED_TASKS": "jobfeed.demo",
                "JOBFEED_LEASE": "1s",
                "JOBFEED_BACKOFF": "200ms", "JOBFEED_SSE_PING": "200ms", "JOBFEED_SSE_RETRY": "500ms",
                "JOBFEED_FEED_BATCH": "5ms", "JOBFEED_LISTENER_HEALTH": "1s", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env


# uvicorn's command line with jobfeed's server-level limits, read from the environment.
UVICORN_HTTP = ["--http", "jobfeed.api.http_protocol:EnvGuardedHttpToolsProtocol"]


@contextlib.asynccontextmanager
async def asgi_client(app) -> AsyncIterator[httpx.AsyncClient]:
    """The app with its lifespan running, called in-process (not for streams)."""
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://jobfeed.test") as client:
            yield client


class ThreadServer:
    """uvicorn serving an app object on a free port, in a thread of its own with
    its own event loop."""

    def __init__(self, app, *, graceful: float = 2.0, settings: Settings | None = None):
        self.app = app
        # the server-level limits (head size, request timeout) as jobfeed applies them
        # (a host app that mounts jobfeed passes jobfeed's settings)
        settings = settings or app.state.services.settings
        config = uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="on",
                                timeout_graceful_shutdown=graceful, **uvicorn_options(settings))
        self.server = uvicorn.Server(config)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread = threading.Thread(target=self._run, name="uvicorn-test", daemon=True)
        self.url = ""

    def _run(self) -> None:
        # asyncio.Runner cancels what is left at the end (sse-starlette's
        # shutdown watcher polls forever), as asyncio.run does.
        with asyncio.Runner() as runner:
            self.loop = runner.get_loop()
            runner.run(self.server.serve())

    async def __aenter__(self) -> "ThreadServer":
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("uvicorn did not start")
            await asyncio.sleep(0.02)
        port = self.server.servers[0].sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    def call(self, fn, *args) -> None:
        """Run fn(*args) on the server's event loop."""
        self.loop.call_soon_threadsafe(fn, *args)

    async def __aexit__(self, *exc) -> None:
        # No signal reaches a server in a thread, so end its streams the way an
        # embedding process would, then stop it.
        if self.loop is not None and self.loop.is_running():
            self.call(end_streams, self.app)
        self.server.should_exit = True
        await asyncio.to_thread(self.thread.join, 15)
        if self.thread.is_alive():  # where it hangs, for whoever reads the failure
            frame = sys._current_frames().get(self.thread.ident)
            print("uvicorn's thread:\n" + "".join(traceback.format_stack(frame)), file=sys.stderr)
            for task in asyncio.all_tasks(self.loop):
                task.print_stack(file=sys.stderr)
        assert not self.thread.is_alive(), "uvicorn did not stop"


@contextlib.asynccontextmanager
async def serve(dsn: str, **settings) -> AsyncIterator[ThreadServer]:
    async with ThreadServer(create_app(make_settings(dsn, **settings))) as server:
        yield server


# Fixtures for test modules that import them: the API with the default
# settings on the test database, and a client of it.
@pytest.fixture
async def server(dsn):
    async with serve(dsn) as s:
        yield s


@pytest.fixture
async def http(server):
    async with httpx.AsyncClient(base_url=server.url, timeout=10, limits=CLIENT_LIMITS) as client:
        yield client


class Process:
    """A jobfeed process (API or worker) as a subprocess; its output is kept for
    failure messages."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.args = args
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.output: list[str] = []
        self._reader: asyncio.Task | None = None
        self._seen = asyncio.Event()
        self._pattern: re.Pattern | None = None
        self.match: re.Match | None = None

    async def start(self, ready: str | None = None, timeout: float = 30) -> "Process":
        """Start; with `ready`, wait until a line of output matches that regex."""
        self._pattern = re.compile(ready) if ready else None
        self.proc = await asyncio.create_subprocess_exec(
            *self.args, env=self.env, cwd=ROOT, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        self._reader = asyncio.create_task(self._read())
        if self._pattern is not None:
            try:
                await asyncio.wait_for(self._seen.wait(), timeout)
            except asyncio.TimeoutError:
                await self.kill()
                raise RuntimeError(f"{self.args} did not get ready:\n{self.log}") from None
        return self

    async def _read(self) -> None:
        async for raw in self.proc.stdout:
            line = raw.decode(errors="replace").rstrip()
            self.output.append(line)
            if self._pattern is not None and not self._seen.is_set():
                self.match = self._pattern.search(line)
                if self.match:
                    self._seen.set()

    @property
    def log(self) -> str:
        return "\n".join(self.output[-60:])

    async def stop(self, timeout: float = 10) -> int:
        """SIGTERM, then wait; returns the exit code (-9 when it had to be killed)."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), timeout)
            except asyncio.TimeoutError:
                await self.kill()
                return -9
        if self._reader is not None:
            await self._reader
        return self.proc.returncode

    async def kill(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def __aenter__(self) -> "Process":
        return self

    async def __aexit__(self, *exc) -> None:
        await self.stop()


async def start_api_process(dsn: str, **env: str) -> tuple[Process, str]:
    """`uvicorn jobfeed.api.app:create_app --factory` on a free port; -> (process, base url)."""
    proc = Process([sys.executable, "-m", "uvicorn", "jobfeed.api.app:create_app", "--factory",
                    "--host", "127.0.0.1", "--port", "0", "--timeout-graceful-shutdown", "5", *UVICORN_HTTP],
                   api_env(dsn, **env))
    await proc.start(ready=r"Uvicorn running on (http://127\.0\.0\.1:\d+)")
    return proc, proc.match.group(1)


# ---------------------------------------------------------------- server-sent events

@dataclasses.dataclass
class Event:
    event: str | None = None
    id: str | None = None
    data: str | None = None
    retry: int | None = None
    comment: str | None = None

    def json(self):
        return json.loads(self.data)


class EventParser:
    """Turns lines of a text/event-stream into events; comment lines come out
    as events of their own (comment set)."""

    def __init__(self):
        self.current = Event()
        self.data: list[str] = []

    def line(self, line: str) -> Event | None:
        if line == "":
            current, data = self.current, self.data
            self.current, self.data = Event(), []
            if data or current.event or current.id or current.retry is not None:
                current.data = "\n".join(data) if data else None
                return current
            return None
        if line.startswith(":"):
            return Event(comment=line[1:].strip())
        field, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if field == "data":
            self.data.append(value)
        elif field == "event":
            self.current.event = value
        elif field == "id":
            self.current.id = value
        elif field == "retry":
            self.current.retry = int(value)
        return None


async def read_events(response: httpx.Response) -> AsyncIterator[Event]:
    parser = EventParser()
    async for line in response.aiter_lines():
        event = parser.line(line)
        if event is not None:
            yield event


async def stream_statuses(http: httpx.AsyncClient, job_id: str) -> list[str]:
    """The statuses a job's stream sends, read until the server ends it."""
    async with http.stream("GET", f"/api/jobs/{job_id}/events") as response:
        return [event.json()["status"] async for event in read_events(response) if event.event == "job"]


class Watcher:
    """One client watching a job's stream until it ends."""

    def __init__(self, client: httpx.AsyncClient, url: str, headers: dict[str, str] | None = None):
        self.client = client
        self.url = url
        self.headers = headers or {}
        self.events: list[Event] = []
        self.comments: list[str] = []
        self.status: int | None = None
        self.opened = asyncio.Event()
        self.ended = False

    @property
    def views(self) -> list[dict]:
        return [e.json() for e in self.events if e.event == "job"]

    async def run(self) -> "Watcher":
        async with self.client.stream("GET", self.url, headers=self.headers) as response:
            self.status = response.status_code
            self.opened.set()
            if response.status_code != 200:
                await response.aread()
                return self
            async for event in read_events(response):
                if event.comment is not None:
                    self.comments.append(event.comment)
                else:
                    self.events.append(event)
            self.ended = True
        return self


class RawWatcher(Watcher):
    """The same, over a bare socket: for hundreds of streams at once, where
    httpx's connection pool costs more than the server under test."""

    def __init__(self, base_url: str, path: str):
        super().__init__(None, path)
        host, port = base_url.removeprefix("http://").split(":")
        self.host, self.port = host, int(port)

    async def run(self) -> "RawWatcher":
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(f"GET {self.url} HTTP/1.1\r\nHost: {self.host}\r\nConnection: close\r\n\r\n".encode())
            head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
            self.status = int(head.split(" ", 2)[1])
            self.opened.set()
            assert "transfer-encoding: chunked" in head.lower(), head
            parser, pending = EventParser(), ""
            while True:  # chunked transfer coding: size line, data, CRLF; size 0 ends
                size = int((await reader.readuntil(b"\r\n")).strip(), 16)
                chunk = await reader.readexactly(size + 2)
                if size == 0:
                    break
                pending += chunk[:-2].decode()
                *lines, pending = pending.split("\n")
                for line in lines:
                    event = parser.line(line.rstrip("\r"))
                    if event is not None:
                        (self.comments.append(event.comment) if event.comment is not None
                         else self.events.append(event))
            self.ended = True
        finally:
            writer.close()
        return self
