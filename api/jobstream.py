"""The response of a job's event stream, written by the feed itself.

With sse-starlette every stream is a task (four, with its ping, disconnect and
shutdown watchers) woken once per event: at thousands of watchers the wake-ups
and anyio's cancel scopes cost more than the writes. Here the feed's loop writes
each view to each stream when it offers it, the frame encoded once per view
(View.frame): as an HTTP chunk straight to uvicorn's request cycle when the
server is httptools' (api/http_protocol.py, write_chunk), else through the
stream's ASGI `send`. A send that completes without waiting (the client's
socket takes the bytes: the common case) costs no task at all. A send
that must wait (the client does not read and its socket is full) is finished in
a task of its own; meanwhile the stream holds at most one more frame, the
newest view, so a slow client costs one view and never holds up the others.

The request's own task only waits on `receive()`: it returns when the client
disconnects or when the response is complete, and the subscription is then
closed. Pings come from one timer for all streams (Feed.ping)."""

from __future__ import annotations

import asyncio
import logging
import types
from typing import TYPE_CHECKING, Any, Awaitable, Coroutine, cast

from sse_starlette import ServerSentEvent
from starlette.applications import Starlette
from starlette.types import Message, Receive, Scope, Send

from .http_protocol import chunk_of, cycle_of, write_chunk
from .subscriptions import JobSubscription, View

if TYPE_CHECKING:
    from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

log = logging.getLogger("jobfeed.streams")

SEP = "\n"
PING = ServerSentEvent(comment="ping", sep=SEP).encode()
PING_CHUNK = chunk_of(PING)
HEADERS = [(b"content-type", b"text/event-stream; charset=utf-8"), (b"cache-control", b"no-store"),
           (b"connection", b"keep-alive"), (b"x-accel-buffering", b"no")]
START: Message = {"type": "http.response.start", "status": 200, "headers": HEADERS}


async def _resume(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    """Run to its end a coroutine that was started outside any task and then
    suspended on `waiting` (what it yielded: a future, or None for a bare
    yield), as a task would have (Python 3.12's eager tasks do the same)."""
    try:
        while True:
            try:
                if waiting is None:
                    await asyncio.sleep(0)
                else:
                    await asyncio.wait((waiting,))
            except BaseException as exc:  # cancelled: the coroutine gets to clean up
                waiting = coro.throw(exc)
                continue
            waiting = coro.send(None)
    except StopIteration:
        return


BODY_SEND = "jobfeed.body_send"


class App(Starlette):
    """jobfeed's Starlette app: it lends a job stream the `send` it was given,
    so the stream's body messages skip the layers inside it (Starlette's error
    and exception handlers, metrics, security headers, CORS), which act on the
    response's start only; the start itself goes through all of them. Each
    layer is a coroutine per message, and a fan-out sends one per watcher."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)
        scope[BODY_SEND] = send
        try:
            await super().__call__(scope, receive, send)
        finally:
            # The server's send is a method of the object that holds the scope:
            # left in it, every request would be a reference cycle, freed only
            # by the garbage collector.
            scope.pop(BODY_SEND, None)


class JobStream:
    """ASGI response: `first` frames, then every view the feed offers to `sub`
    until a final one (the stream then ends) or until the subscription is
    closed (server shutdown) or the client goes away."""

    __slots__ = ("_sub", "_metrics", "_retry", "_send", "_cycle", "_busy", "_next", "_closing", "_ended")

    def __init__(self, sub: JobSubscription, metrics, retry_ms: int):
        self._sub = sub
        self._metrics = metrics
        self._retry = retry_ms
        self._send: Send | None = None
        # the server's request cycle, when its chunks can be written without send (see write_view)
        self._cycle: RequestResponseCycle | None = None
        self._busy: asyncio.Task | None = None  # finishing a send the client's socket held up
        self._next: tuple[bytes, bool] | None = None  # the newest frame to write after it
        self._closing = False  # nothing more to write but the end of the response
        self._ended = False  # the end of the response is written (or the client is gone)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await send(START)
            if scope.get("method") == "HEAD":  # headers only: the stream never starts
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            with self._metrics.stream("job"):
                self._send = scope.get(BODY_SEND, send)
                self._cycle = cycle_of(self._send)
                self._first(self._sub.attach(self))
                if self._sub.closed:  # closed before it could attach (the server is stopping)
                    self.end()
                while True:  # returns once the response is complete or the client is gone
                    if (await receive())["type"] == "http.disconnect":
                        break
        finally:
            self._closing = self._ended = True
            if self._busy is not None:
                self._busy.cancel()
            self._sub.close()

    def _first(self, view: View | None) -> None:
        """The snapshot read at subscribing (or newer) says how soon to reconnect;
        after Last-Event-ID matched it, retry: goes alone."""
        if view is None:
            self._write(ServerSentEvent(retry=self._retry, sep=SEP).encode(), True)
            return
        self._write(ServerSentEvent(view.text, event="job", id=str(view.version), retry=self._retry,
                                    sep=SEP).encode(), not view.terminal)
        if view.terminal:  # written with the end of the response
            self._closing = self._ended = True
            self._sub.close()

    @property
    def behind(self) -> bool:
        return self._busy is not None

    # ---------------------------------------------------------------- called by the feed
    def write_view(self, view: View) -> None:
        if self._closing:
            return
        self._emit(view.frame(SEP), view.chunk(SEP))
        self._metrics.delivered_soon("job", view.changed_at)
        if view.terminal:
            # Nothing follows a final status. The response ends once the feed
            # has written this view to every watcher: ending one costs more
            # than the write (the connection's bookkeeping, its close).
            self._closing = True
            self._sub.close_soon()

    def ping(self) -> None:
        if not self._closing and self._busy is None:  # a stream that is still writing needs no ping
            self._emit(PING, PING_CHUNK)

    def end(self) -> None:
        """The subscription was closed: end the response."""
        if not self._ended:
            self._closing = self._ended = True
            if self._send is not None:
                self._write(b"", False)

    # ---------------------------------------------------------------- writing
    def _emit(self, frame: bytes, chunk: bytes) -> None:
        """A frame (`chunk`: the same as an HTTP chunk), written straight to the
        server's request cycle when it can be (api/http_protocol.py,
        write_chunk): an ASGI send costs a coroutine or two per watcher, and
        the feed writes the same bytes to every watcher of a view, and a ping
        to every stream."""
        if self._busy is not None or self._cycle is None or not write_chunk(self._cycle, chunk):
            self._write(frame, True)

    def _write(self, body: bytes, more: bool) -> None:
        if self._busy is not None:  # the client is behind: keep only the newest frame
            if self._next is None:
                self._next = (body, more)
            elif self._next[1]:  # a frame, not yet the end: a newer one replaces it, the end follows it
                self._next = (body, more) if body else (self._next[0], more)
            return
        assert self._send is not None
        sending = self._send({"type": "http.response.body", "body": body, "more_body": more})
        if not isinstance(sending, types.CoroutineType):  # a server whose send is no coroutine
            self._busy = asyncio.get_running_loop().create_task(self._drain(sending, None, started=False))
            return
        coro = cast(Coroutine[Any, Any, None], sending)
        try:
            waiting = coro.send(None)
        except StopIteration:
            return  # written, no task involved
        except Exception:  # a send that fails outright: the client's cleanup is the server's
            log.exception("stream: writing to a client failed")
            self._closing = self._ended = True
            return
        self._busy = asyncio.get_running_loop().create_task(self._drain(coro, waiting))

    async def _drain(self, sending: Awaitable[None], waiting: Any, started: bool = True) -> None:
        try:
            if started:
                await _resume(cast(Coroutine[Any, Any, None], sending), waiting)
            else:
                await sending
            while self._next is not None:
                body, more = self._next
                self._next = None
                assert self._send is not None
                await self._send({"type": "http.response.body", "body": body, "more_body": more})
        except Exception:
            log.exception("stream: writing to a slow client failed")
        finally:
            self._busy = None
