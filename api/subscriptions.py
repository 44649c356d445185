"""What a stream of the live feed holds: the View of a job as PostgreSQL wrote
it (its SSE frame encoded once for all its watchers), one job stream's
subscription, the dashboard's subscription, and the cap that refuses one more
stream. The Feed (api/feed.py) offers views to them; api/jobstream.py,
api/streams.py and api/waiting.py take them."""

from __future__ import annotations

import asyncio
import time
import datetime as dt
import json
from typing import TYPE_CHECKING

from sse_starlette import ServerSentEvent

from jobfeed.worker.states import TERMINAL

from .http_protocol import chunk_of

if TYPE_CHECKING:
    from .feed import Feed


class TooManyStreams(Exception):
    """A stream cap is reached; `scope` is 'client' or 'process'."""

    def __init__(self, scope: str):
        super().__init__(scope)
        self.scope = scope


def changed_at(view: dict) -> float | None:
    """A view's updated_at as epoch seconds (the database's clock): where the
    SSE lag metric starts."""
    updated = view.get("updated_at")
    return dt.datetime.fromisoformat(updated).timestamp() if isinstance(updated, str) else None


class View:
    """A public view as PostgreSQL wrote it, with what the feed needs to know.
    One View is offered to every watcher of its job, so its SSE frame is encoded
    once, by the first stream that sends it, and the others send the same bytes."""

    __slots__ = ("job_id", "version", "terminal", "text", "extra", "changed_at", "queued", "_frame", "_chunk")

    def __init__(self, job_id: str, version: int, terminal: bool, text: str, extra: tuple = (),
                 changed_at: float | None = None, queued: bool = False):
        self.job_id = job_id
        self.version = version
        self.terminal = terminal
        self.text = text
        self.extra = extra  # fields that change without a new version (requesters, position)
        self.changed_at = changed_at  # updated_at as epoch seconds: the SSE lag metric
        self.queued = queued  # public status queued: its position may move
        self._frame: bytes | None = None
        self._chunk: bytes | None = None

    @classmethod
    def parse(cls, text: str) -> "View":
        data = json.loads(text)
        return cls.of_row((text, data["id"], int(data["version"]), data["status"], data.get("requesters"),
                           data.get("position"), changed_at(data)))

    @classmethod
    def of_row(cls, row) -> "View":
        """A view with its fields as the feed's re-read answers them
        (Queue.get_job_rows): the same View as parse(text), without parsing."""
        text, job_id, version, status, requesters, position, changed = row
        return cls(job_id, version, status in TERMINAL, text, (requesters, position), changed, status == "queued")

    @property
    def position(self) -> int | None:
        return self.extra[1] if len(self.extra) > 1 else None

    def with_position(self, position: int) -> "View":
        """The same view (same version) at another place in the line."""
        data = json.loads(self.text)
        data["position"] = position
        data["scheduled_for"] = None  # a job with a place in the line is due now
        return View(self.job_id, self.version, self.terminal, json.dumps(data), (self.extra[0], position),
                    None, self.queued)  # a move in the line: updated_at does not date it

    def newer_than(self, version: int, extra: tuple) -> bool:
        return self.version > version or (self.version == version and self.extra != extra)

    def frame(self, sep: str) -> bytes:
        """The `job` event carrying this view, as bytes on the wire (no retry field)."""
        if self._frame is None:
            self._frame = ServerSentEvent(self.text, event="job", id=str(self.version), sep=sep).encode()
        return self._frame

    def chunk(self, sep: str) -> bytes:
        """frame() as one HTTP/1.1 chunk, for a server that lets a stream write
        its chunks itself (api/http_protocol.py, write_chunk)."""
        if self._chunk is None:
            self._chunk = chunk_of(self.frame(sep))
        return self._chunk


class JobSubscription:
    """One stream's interest in one job: the version it last sent and the newest
    view it has not sent yet. A job stream attaches its writer (api/jobstream.py)
    and is then handed each view as it is offered; a waiter (?wait=) takes them
    with next()."""

    __slots__ = ("job_id", "since", "sent", "sent_extra", "_pending", "_wake", "_closed", "_feed", "_client",
                 "_writer", "ping_slice")

    def __init__(self, feed: "Feed", job_id: str, client: str | None = None):
        self.job_id = job_id
        self.since = time.monotonic()  # its first view carries a position: the next waits a round
        self._client = client
        self.sent = 0
        self.sent_extra: tuple = ()
        self._pending: View | None = None
        self._wake: asyncio.Event | None = None  # made by the first next(): a stream never waits
        self._closed = False
        self._feed = feed
        self._writer = None
        self.ping_slice = 0  # which of the feed's ping slices it is in (Feed.subscribe)

    @property
    def newest(self) -> int:
        return self._pending.version if self._pending is not None else self.sent

    def offer(self, view: View) -> None:
        newest = self._pending if self._pending is not None else None
        version, extra = (newest.version, newest.extra) if newest is not None else (self.sent, self.sent_extra)
        if not self._closed and view.newer_than(version, extra):
            if self._writer is not None:  # written now, from the feed's loop
                self.sent, self.sent_extra = view.version, view.extra
                self._writer.write_view(view)
                return
            self._pending = view  # replaces an older pending view: coalesce
            if self._wake is not None:
                self._wake.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def attach(self, writer) -> View | None:
        """From now on hand every newer view to writer.write_view(view), and
        writer.ping() on each ping; -> the pending view, to write first."""
        view, self._pending = self._pending, None
        if view is not None:
            self.sent, self.sent_extra = view.version, view.extra
        if not self._closed:
            self._writer = writer
        return view

    def ping(self) -> None:
        if self._writer is not None:
            self._writer.ping()

    def skip_to(self, version: int, extra: tuple = ()) -> None:
        """The client already has this version (Last-Event-ID)."""
        if version >= self.sent:
            self.sent, self.sent_extra = version, extra
        if self._pending is not None and self._pending.version <= self.sent:
            self._pending = None

    async def next(self) -> View | None:
        """The next view to send, or None once the subscription is closed."""
        if self._wake is None:
            self._wake = asyncio.Event()
        while self._pending is None:
            if self._closed:
                return None
            self._wake.clear()
            await self._wake.wait()
        view, self._pending = self._pending, None
        self.sent, self.sent_extra = view.version, view.extra
        return view

    def close_soon(self) -> None:
        """Close once the feed's loop lets go (Feed.close_soon)."""
        self._feed.close_soon(self)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            if self._wake is not None:
                self._wake.set()
            self._feed._unsubscribe(self)
            self._feed._release(self._client)
            writer, self._writer = self._writer, None
            if writer is not None:
                writer.end()


class AdminSubscription:
    """The dashboard's stream: true views of every changed job, coalesced per job.
    Past `limit` distinct pending jobs it drops them and asks for a resync (the
    dashboard reloads its list), so its memory stays bounded."""

    def __init__(self, feed: "Feed", limit: int = 1000, client: str | None = None):
        self._feed = feed
        self._client = client
        self._limit = limit
        self._pending: dict[str, tuple[str, float | None]] = {}  # job id: (view, changed_at)
        self._resync = False
        self._wake = asyncio.Event()
        self._closed = False

    def offer(self, job_id: str, text: str, changed: float | None = None) -> None:
        if self._closed or self._resync:
            return
        if job_id not in self._pending and len(self._pending) >= self._limit:
            self.resync()
            return
        self._pending.pop(job_id, None)  # keep the order of the latest change
        self._pending[job_id] = (text, changed)
        self._wake.set()

    def resync(self) -> None:
        self._resync = True
        self._pending.clear()
        self._wake.set()

    async def next(self) -> tuple[bool, list[tuple[str, float | None]]] | None:
        """(resync, [(view, changed_at)]), or None once closed."""
        while not self._pending and not self._resync:
            if self._closed:
                return None
            self._wake.clear()
            await self._wake.wait()
        resync, views = self._resync, list(self._pending.values())
        self._resync = False
        self._pending.clear()
        return resync, views

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._wake.set()
            self._feed._admins.discard(self)
            self._feed._release(self._client)
