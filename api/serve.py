"""Serving the API with uvicorn: in processes of its own (`jobfeed api`), or in
the caller's event loop beside a worker and a sweeper (`jobfeed up`)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket

import uvicorn
from starlette.applications import Starlette

from jobfeed.worker import logs
from jobfeed.worker.settings import Settings
from jobfeed.worker.startup import UsageError

from .http_protocol import uvicorn_options


class ListenError(Exception):
    """The server could not listen on its address (uvicorn has logged why)."""


class _Stopped(Exception):
    """A stop signal, once uvicorn has shut down."""


def _stopped(signum, frame) -> None:
    raise _Stopped


def check_listen(host: str, port: int) -> None:
    """UsageError (exit 2, one line) when the API could not listen there: a
    host that does not resolve, a port taken or not ours to bind. uvicorn
    would log the error and exit 3, the code for an unreachable database.
    Bound as uvicorn binds, then let go for it (port 0: any free one)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as exc:
        raise UsageError(f"JOBFEED_HOST {host!r}: {exc.strerror}") from None
    with socket.socket(family, kind, proto) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            raise UsageError(f"the API could not listen on {host}:{port} ({exc.strerror})") from None


def serve_processes(settings: Settings, workers: int, log_level: str = "info") -> None:
    """uvicorn's own loop and signal handling; each worker process builds the
    app from the environment. Limits go by name, read from the environment:
    each of uvicorn's worker processes imports the protocol anew.

    Once shut down, uvicorn raises the signal that stopped it again, with the
    handlers it found; SIGTERM's default would end the process without running
    atexit, where the embedded server learns that this process no longer uses
    it (and stops with the last one). Ours makes it a normal return (exit 0,
    as for a worker or sweeper)."""
    stops = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, _stopped) for sig in stops}
    try:
        uvicorn.run("jobfeed.api.app:create_app", factory=True, host=settings.host, port=settings.port,
                    workers=workers, log_level=log_level, timeout_graceful_shutdown=5, **uvicorn_options(),
                    log_config=logs.uvicorn_log_config(settings.log_format, log_level))
    except _Stopped:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


class SharedLoopServer:
    """uvicorn in our event loop, beside the worker and sweeper; our signal
    handlers stop all three together."""

    def __init__(self, app: Starlette, settings: Settings):
        self.app = app

        class Server(uvicorn.Server):
            def capture_signals(self):
                return contextlib.nullcontext()

        # log_config=None: uvicorn's records go to the root logger `jobfeed up` set up
        self.server = Server(uvicorn.Config(app, host=settings.host, port=settings.port, log_level="warning",
                                            log_config=None, timeout_graceful_shutdown=5, lifespan="on",
                                            **uvicorn_options(settings)))

    async def serve(self) -> None:
        try:
            await self.server.serve()
        except SystemExit:  # uvicorn exits when it cannot bind; it has logged why
            config = self.server.config
            raise ListenError(f"the API could not listen on {config.host}:{config.port}") from None

    async def wait_started(self, serving: asyncio.Task) -> bool:
        """True once the server listens; False if it ended first (e.g. port taken)."""
        while not self.server.started and not serving.done():
            await asyncio.sleep(0.02)
        return self.server.started

    def port(self) -> int:
        """The port it listens on: the one asked for, or the one given for port 0."""
        for server in self.server.servers:
            for sock in server.sockets:
                return sock.getsockname()[1]
        return self.server.config.port

    def stop(self) -> None:
        from .app import end_streams

        self.server.should_exit = True
        end_streams(self.app)  # uvicorn would otherwise wait for open event streams
