"""Limits uvicorn does not set by itself: the size of a request's head and the
time a client may take to send its request (slowloris).

uvicorn's httptools protocol has no header limit, and no timeout between a
connection's first byte and its complete request: a client that sends one
header byte every few seconds holds its connection and memory forever.
(h11's `h11_max_incomplete_event_size` bounds the head, but h11 has no request
timeout either, and httptools is the faster parser.) This subclass adds both, and a
drain of refused bodies:

- bytes received before the head is complete are counted; past
  JOBFEED_MAX_HEADER_BYTES the answer is 431 and the connection closes;
- from a request's first byte (or the connection's opening) until its body is
  complete, JOBFEED_REQUEST_TIMEOUT runs: past it the connection closes, with a
  408 when no response has started (a stalled body included). Every
  _BODY_PROGRESS bytes of body that arrive start it again, so a large upload on
  a slow but honest link finishes, while a client dribbling bytes never earns
  more time;
- an answer given while the client still sends a body the app refused unread
  (413, 401, 415, ...) is followed by a bounded drain of that body and a
  close, so that clients that read only after sending get the answer, not a
  reset. That answer says `connection: close`: a client that pooled the
  connection would send its next request into the close and read a reset.

Every place that starts uvicorn passes `uvicorn_options(settings)`."""

from __future__ import annotations

import asyncio
import functools
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from jobfeed.worker.settings import Settings

from .headers import HEADERS

_HEAD_END = b"\r\n\r\n"
_LINGER = 1.0  # seconds a refused connection stays half-open so that the answer arrives
_BODY_PROGRESS = 64 * 1024  # body bytes that earn a request another JOBFEED_REQUEST_TIMEOUT
# After refusing a body it has not read (413), the server takes in and drops
# this much more of it, for at most this long, before it hangs up: clients
# that send a whole body before they read an answer (httpx, requests) then
# read the 413 instead of a reset. Beyond that, hanging up is cheaper.
_DRAIN_BYTES = 8 * 1024 * 1024
_DRAIN_SECONDS = 2.0


def _error(status: int, reason: str, code: str, message: str) -> bytes:
    """An answer written below the app, with the headers every answer carries."""
    body = json.dumps({"error": {"code": code, "message": message}}).encode()
    extra = "".join(f"{name}: {value}\r\n" for name, value in HEADERS.items())
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{extra}"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n").encode() + body


class _DrainingTransport:
    """The connection's transport as uvicorn sees it, except that its close()
    after an answer the client has not finished sending its body for drains
    that body first (GuardedHttpToolsProtocol._drain)."""

    def __init__(self, transport: asyncio.Transport, protocol: GuardedHttpToolsProtocol):
        self._raw = transport
        self._protocol = protocol
        self.write = transport.write  # every response's: no look-up through __getattr__

    def __getattr__(self, name: str):
        return getattr(self._raw, name)

    def close(self) -> None:
        if not self._protocol._drain():
            self._raw.close()

    def is_closing(self) -> bool:
        return self._protocol._draining or self._raw.is_closing()


class _ClosingCycle(RequestResponseCycle):
    """uvicorn's request cycle, except that an answer starting while the
    request's body is still coming says `connection: close` (the connection
    will be drained and closed after it, GuardedHttpToolsProtocol._drain)."""

    async def send(self, message) -> None:
        if self.more_body and not self.response_started:
            self.keep_alive = False
        await super().send(message)


def cycle_of(send: Any) -> RequestResponseCycle | None:
    """The request cycle whose ASGI `send` this is, when it is httptools' (this
    protocol's, or uvicorn's own when run without it), for write_chunk; None
    for any other server."""
    cycle = getattr(send, "__self__", None)
    return cycle if isinstance(cycle, RequestResponseCycle) else None


def chunk_of(frame: bytes) -> bytes:
    """`frame` as one HTTP/1.1 chunk (its size, CRLF, the bytes, CRLF), for write_chunk."""
    return b"%x\r\n%b\r\n" % (len(frame), frame)


def write_chunk(cycle: RequestResponseCycle, chunk: bytes) -> bool:
    """One chunk of a started chunked answer, framed by the caller (chunk_of),
    written now as the cycle's send writes a body message with more to come,
    but without an ASGI send's coroutines: the feed's fan-out and its pings
    write one to each of thousands of job streams (api/jobstream.py). False
    when send must write it: its writes are paused (it waits for the client),
    the client is gone, or the answer is not chunked or not under way."""
    if (cycle.flow.write_paused or cycle.disconnected or not cycle.chunked_encoding
            or not cycle.response_started or cycle.response_complete):
        return False
    cycle.transport.write(chunk)
    return True


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    max_header_bytes: int = Settings.max_header_bytes
    request_timeout: float = Settings.request_timeout

    def connection_made(self, transport) -> None:
        self._raw: asyncio.Transport = transport
        self._draining = False
        self._drained = 0
        super().connection_made(_DrainingTransport(transport, self))  # type: ignore[arg-type]  # a stand-in
        self._head_bytes = 0
        self._head_done = False
        self._body_bytes = 0
        self._tail = b""
        self._refused = False
        self._deadline: asyncio.TimerHandle | None = None
        self._arm()  # a connection that sends nothing is a request that never finishes

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    # ------------------------------------------------------------ the deadline
    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete:
            if cycle.response_started:  # too late for a 408: cut the answer short
                self._raw.close()
                return
            # The app waits for the rest of the body: it now reads a disconnect,
            # and whatever it answers to that is dropped, so the 408 is all
            # the client gets.
            cycle.disconnected = True
            cycle.message_event.set()
        self._refuse(_error(408, "Request Timeout", "request_timeout", "the request was not sent in time"))

    def send_400_response(self, msg: str) -> None:
        # uvicorn's answer to bytes that are not HTTP is plain text: the same
        # JSON error shape as everywhere else instead
        self._refuse(_error(400, "Bad Request", "bad_request", "the request is not valid HTTP"))

    def _refuse(self, answer: bytes) -> None:
        """Answer and hang up. The answer goes out before the FIN, and reading
        stops; the socket closes a moment later. Closing at once, with the
        client's bytes still unread, would send a reset that can destroy the
        answer before the client reads it."""
        if self._draining:  # bytes that are not HTTP in a body being dropped: nothing more to say
            self._raw.close()
            return
        self._refused = True
        self._disarm()
        self.transport.write(answer)
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.transport.pause_reading()
        self.loop.call_later(_LINGER, self.transport.close)

    def _drain(self) -> bool:
        """After an answer (uvicorn closing the connection for Connection:
        close, or on_response_complete): if the request's body is still coming
        (the app refused it unread), the answer is followed by a FIN and the
        body is read and dropped, up to _DRAIN_BYTES or _DRAIN_SECONDS, then
        the connection closes: closing with the client's bytes unread sends a
        reset, which a client still sending reads as a broken connection, not
        the answer. True when draining."""
        if self._draining:
            return True
        cycle = self.cycle
        raw = self._raw
        if self._refused or cycle is None or not cycle.more_body or raw.is_closing():
            return False
        self._draining = True
        self._disarm()
        if raw.can_write_eof():
            raw.write_eof()
        raw.resume_reading()  # uvicorn pauses it while the app does not read
        self._deadline = self.loop.call_later(_DRAIN_SECONDS, raw.close)
        return True

    # ------------------------------------------------------------ the head
    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if self._draining:
            self._drained += len(data)
            if self._drained > _DRAIN_BYTES:
                self._raw.close()
                return
            super().data_received(data)  # the parser finds the body's end; uvicorn drops the bytes
            return
        if not self._head_done:
            window = self._tail + data
            end = window.find(_HEAD_END)
            size = self._head_bytes + (len(data) if end < 0 else end + len(_HEAD_END) - len(self._tail))
            if size > self.max_header_bytes:
                self._refuse(_error(431, "Request Header Fields Too Large", "headers_too_large",
                                    f"the request's head is over {self.max_header_bytes} bytes"))
                return
            self._head_bytes = size
            self._tail = window[-3:]
        super().data_received(data)

    def on_message_begin(self) -> None:
        if self._draining:  # a next request on a connection that said close: none is taken
            self._raw.close()
            return
        super().on_message_begin()
        if self._deadline is None:
            self._arm()

    def on_headers_complete(self) -> None:
        self._head_done = True
        self._body_bytes = 0
        super().on_headers_complete()
        if self.cycle is not None:  # None for an upgrade on a new connection
            # its task has not run yet: its answer goes through _ClosingCycle.send
            self.cycle.__class__ = _ClosingCycle

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes >= _BODY_PROGRESS and self._deadline is not None and not self._draining:
            self._body_bytes = 0
            self._arm()
        super().on_body(body)

    def on_message_complete(self) -> None:
        self._disarm()
        if self._draining:  # the refused body is all in: nothing left to drop
            self._raw.close()
            return
        super().on_message_complete()

    def on_response_complete(self) -> None:
        # Answered before the body was all in (a 401, 403, 415 or 400 refuses
        # it unread): uvicorn would read the rest as this connection's next
        # head, past JOBFEED_MAX_HEADER_BYTES a 431 and a reset that hides the
        # answer from a client still sending. The body is drained instead,
        # and the connection closed (is_closing: uvicorn arms no keep-alive).
        if self._drain():
            super().on_response_complete()
            return
        # The next request on this connection starts a new head (its bytes may
        # already be here: pipelining); uvicorn's keep-alive timeout covers the
        # idle time until it comes.
        self._head_done = False
        self._head_bytes = 0
        self._tail = b""
        super().on_response_complete()


class EnvGuardedHttpToolsProtocol(GuardedHttpToolsProtocol):
    """The limits from the environment: for `uvicorn.run` with several worker
    processes, which import the protocol by name."""

    def __init__(self, *args, **kwargs):
        settings = _env_settings()
        self.max_header_bytes = settings.max_header_bytes
        self.request_timeout = settings.request_timeout
        super().__init__(*args, **kwargs)


@functools.cache
def _env_settings() -> Settings:
    return Settings.from_env()


def protocol_for(settings: Settings) -> type[GuardedHttpToolsProtocol]:
    return type("GuardedHttpToolsProtocol", (GuardedHttpToolsProtocol,),
                {"max_header_bytes": settings.max_header_bytes, "request_timeout": settings.request_timeout})


def uvicorn_options(settings: Settings | None = None) -> dict:
    """Keyword arguments for uvicorn.Config / uvicorn.run. Without settings the
    protocol reads them from the environment in each process."""
    http = (protocol_for(settings) if settings is not None
            else "jobfeed.api.http_protocol:EnvGuardedHttpToolsProtocol")
    # h11_max_incomplete_event_size: the same bound, should uvicorn ever pick h11.
    size = (settings or _env_settings()).max_header_bytes
    return {"http": http, "h11_max_incomplete_event_size": size}
