"""The live feed: one LISTEN connection per API process, fanned out to any number
of SSE streams.

A notification on `jobfeed_changed` carries "id:version,..."; it is only a hint.
A version marked "7r" says that only who waits changed (requesters): the view
is re-read and sent again under the same version (SSE id), which never moves
for such changes. So is a queued job's `position`, refreshed every
`position_interval` seconds for all watched queued jobs with one query.
Ids nobody here watches are dropped after parsing. Watched ids whose version is
newer than what was last offered are re-read in one get_jobs query: at once
after a quiet spell, and under a stream of changes at most once per `batch`
seconds, each query taking what gathered meanwhile. Each subscriber holds at
most one pending view, the newest, so a slow client costs one view, not a
queue. After every (re)connect of the listener every watched job is re-read,
so a notification lost while disconnected costs latency, never a change."""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
import time

import anyio
import asyncpg
from sse_starlette import EventSourceResponse

from jobfeed.worker.db import Listener
from jobfeed.worker.queue import Queue
from jobfeed.worker.testsignal import Signal, Timer
from jobfeed.worker.waits import cancel_and_wait

from .parse import digits
from .subscriptions import AdminSubscription, JobSubscription, TooManyStreams, View, changed_at

log = logging.getLogger("jobfeed.feed")

CHANNEL = "jobfeed_changed"
REREAD_CHUNK = 5000  # ids per get_jobs query (a resync may re-read every watched job)
# Any role may NOTIFY on the channel: an item that is not "uuid:version", as
# notify_changed() writes it, is skipped (it would fail the re-read forever).
_JOB_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_BAD_LOG_EVERY = 10.0  # seconds between log lines about skipped notifications
ADMIN_SENT_KEPT = 10_000  # jobs whose last admin view the feed remembers (a hash each), to send no repeat
END_LINGER = 0.25  # seconds between a stream's final view and the end of its response (close_soon)
# Pings go out a slice of the job streams at a time, the slices spread over the
# interval, each stream in one of them: at thousands of streams one round for
# all held the event loop, and every other request, for as long as its writes.
PING_SLICES = 150
PING_TICK = 0.1  # seconds, at least, between two slices: a shorter interval gets fewer


def ping_slices(interval: float) -> int:
    return max(1, min(PING_SLICES, int(interval / PING_TICK)))


class FeedSignals:
    """Test hooks (worker/testsignal.py), inert unless a test enables them."""

    __slots__ = ("connected", "reread", "reread_failed", "retry", "window")

    def __init__(self) -> None:
        self.window = Timer()          # the wait before a re-read (0 after a quiet spell)
        self.connected = Signal()      # the listener (re)connected and the resync is asked for
        self.reread = Signal()         # a re-read was offered to the streams (True: a resync)
        self.reread_failed = Signal()  # a re-read failed (the exception); it will be retried...
        self.retry = Timer()           # ...after this wait


class Feed:
    def __init__(self, dsn: str | asyncpg.Pool, queue: Queue, *, batch: float = 0.01, health_interval: float = 10.0,
                 name: str = "jobfeed-api-feed", position_interval: float = 2.0, ping: float = 0.0):
        self.queue = queue
        self.ping_interval = ping  # seconds between pings on every job stream; 0: none
        self._ping_task: asyncio.Task | None = None
        self._ping_slices: list[set[JobSubscription]] = [set() for _ in range(ping_slices(ping))]
        self._ping_turn = 0  # the slice the next stream joins
        self._watching = asyncio.Event()  # a job stream is open: the ping timer runs only then
        self.ping_turns = 0  # slices' turns taken (the timer's wake-ups)
        self.batch = batch
        self.reread_at = float("-inf")  # when the last re-read began (the loop's clock)
        self.position_interval = position_interval
        self._positions_task: asyncio.Task | None = None
        # the newest view offered of each watched job whose public status is queued
        self._queued: dict[str, View] = {}
        self.position_rounds = 0
        self._position_owed: set[str] = set()  # jobs with a stream too young for their last move
        self.listener = Listener(dsn, {CHANNEL: self._on_notify}, on_connect=self._on_connect,
                                 health_interval=health_interval, name=name)
        self._watch: dict[str, set[JobSubscription]] = {}
        # newest (version, extra) offered to the watchers of a job
        self._known: dict[str, tuple[int, tuple]] = {}
        self._admins: set[AdminSubscription] = set()
        # hash of the admin view last offered of each job (newest last): a
        # notification that changed nothing an admin sees (a requesters
        # count's, a second one read in a later window) sends no repeat
        self._admin_sent: dict[str, tuple[int, float | None]] = {}  # job id: (view's hash, updated_at)
        self._closing: list[JobSubscription] = []  # see close_soon
        self._dirty: set[str] = set()
        self._admin_dirty: set[str] = set()
        self._resync = False
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._shutdown_task: asyncio.Task | None = None
        self.shutdown: anyio.Event | None = None
        self._streams = 0
        self._ending = False  # the server is stopping: no stream stays open
        self._per_client: dict[str, int] = {}
        self.notifications = 0  # for /metrics
        self.bad_notifications = 0
        self._bad_logged = 0.0
        self.rereads = 0
        self.reconnects = 0
        self.signals = FeedSignals()

    # ---------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        # One event for every stream of this process, set when the server starts
        # shutting down (sse-starlette's watch of uvicorn, or an admin stream's
        # response): one task then ends all streams cleanly (rather than a task
        # and an event per stream).
        self.shutdown = anyio.Event()
        self._task = asyncio.create_task(self._run(), name="jobfeed-feed")
        self._positions_task = asyncio.create_task(self._refresh_positions(), name="jobfeed-feed-positions")
        self._shutdown_task = asyncio.create_task(self._end_on_shutdown(self.shutdown), name="jobfeed-feed-shutdown")
        if self.ping_interval > 0:
            self._ping_task = asyncio.create_task(self._ping(), name="jobfeed-feed-ping")
        await self.listener.start()

    async def _end_on_shutdown(self, shutdown: anyio.Event) -> None:
        async with anyio.create_task_group() as tg:
            async def signalled() -> None:
                await EventSourceResponse._listen_for_exit_signal()
                shutdown.set()
            tg.start_soon(signalled)
            await shutdown.wait()
            tg.cancel_scope.cancel()
        self.end_streams()

    async def _ping(self) -> None:
        """A comment on every job stream each ping_interval, one slice of them
        at a time: one timer for all of them, not a task per stream. A
        stream's slice comes round every ping_interval (on the loop's clock,
        not after each slice's writes). With no job stream open it rests."""
        loop = asyncio.get_running_loop()
        tick = self.ping_interval / len(self._ping_slices)
        due = loop.time()
        for turn in itertools.cycle(range(len(self._ping_slices))):
            if not self._watching.is_set():
                await self._watching.wait()
                due = loop.time()
            due += tick
            self.ping_turns += 1
            await asyncio.sleep(max(due - loop.time(), 0.0))
            for sub in list(self._ping_slices[turn]):
                sub.ping()

    def end_streams(self) -> None:
        """End every open stream now (the server is stopping): each one sends
        what it has pending and finishes, so nothing holds the server open.
        A stream opened after this (a client reconnecting on its keep-alive
        connection before the server closes it) ends at once, asking it to
        come back in `retry` milliseconds."""
        self._ending = True
        for subs in list(self._watch.values()):
            for sub in list(subs):
                sub.close()
        for admin in list(self._admins):
            admin.close()

    async def close(self) -> None:
        """End every stream and stop listening."""
        self.end_streams()
        for task in (self._shutdown_task, self._ping_task):
            if task is not None:
                task.cancel()
        for task in (self._positions_task, self._task):
            if task is not None:
                await cancel_and_wait(task)
        await self.listener.stop()

    @property
    def connected(self) -> bool:
        return self.listener.connected.is_set()

    @property
    def watched_jobs(self) -> int:
        return len(self._watch)

    @property
    def open_streams(self) -> int:
        return self._streams

    @property
    def behind_streams(self) -> int:
        """Job streams whose client is not taking what is written (a write waits
        on its socket): each holds at most one more view until it catches up."""
        return sum(1 for subs in self._watch.values() for sub in subs
                   if sub._writer is not None and sub._writer.behind)

    # ---------------------------------------------------------------- subscribing
    def _admit(self, client: str | None, per_client: int | None, total: int | None) -> None:
        if total is not None and self._streams >= total:
            raise TooManyStreams("process")
        held = self._per_client.get(client, 0) if client is not None else 0
        if per_client is not None and client is not None and held >= per_client:
            raise TooManyStreams("client")
        self._streams += 1
        if client is not None:
            self._per_client[client] = held + 1

    def _release(self, client: str | None) -> None:
        self._streams -= 1
        if client is not None:
            left = self._per_client.get(client, 1) - 1
            if left > 0:
                self._per_client[client] = left
            else:
                self._per_client.pop(client, None)

    def subscribe(self, job_id: str, client: str | None = None, *, per_client: int | None = None,
                  total: int | None = None) -> JobSubscription:
        """Register before reading the snapshot (see seed), so no change falls
        between the two. Counts against the caps until closed (TooManyStreams)."""
        self._admit(client, per_client, total)
        sub = JobSubscription(self, job_id, client)
        self._watch.setdefault(job_id, set()).add(sub)
        sub.ping_slice, self._ping_turn = self._ping_turn, (self._ping_turn + 1) % len(self._ping_slices)
        self._ping_slices[sub.ping_slice].add(sub)
        self._watching.set()
        if self._ending:
            sub.close()
        return sub

    def seed(self, sub: JobSubscription, view: View) -> None:
        """Offer the snapshot read after subscribing. A snapshot newer than
        what the feed knows is offered to every watcher of the job: once it is
        known, the change's notification and re-read are skipped as old news,
        so the job's other streams would otherwise never get it (a final
        status among them)."""
        known = self._known.get(view.job_id)
        if known is None or view.newer_than(*known):
            self._known[view.job_id] = (view.version, view.extra)
            self._note_queued(view)
            for watcher in list(self._watch.get(view.job_id, ())):
                if watcher is not sub:
                    watcher.offer(view)
        sub.offer(view)

    def _note_queued(self, view: View) -> None:
        if view.queued:
            self._queued[view.job_id] = view
        else:
            self._queued.pop(view.job_id, None)

    def subscribe_admin(self, limit: int = 1000, client: str | None = None, *, per_client: int | None = None,
                        total: int | None = None) -> AdminSubscription:
        self._admit(client, per_client, total)
        sub = AdminSubscription(self, limit, client)
        self._admins.add(sub)
        if self._ending:
            sub.close()
        return sub

    def close_soon(self, sub: JobSubscription) -> None:
        """Close `sub` shortly after the current fan-out: its stream has its last
        view. Streams end together, END_LINGER seconds after the first of them
        got its final view: ending thousands of responses (a write each, the
        connection's bookkeeping, the client closing) then does not compete
        with delivering the final views of the same burst."""
        if not self._closing:
            asyncio.get_running_loop().call_later(END_LINGER, self._close_pending)
        self._closing.append(sub)

    def _close_pending(self) -> None:
        closing, self._closing = self._closing, []
        for sub in closing:
            sub.close()

    def _unsubscribe(self, sub: JobSubscription) -> None:
        self._ping_slices[sub.ping_slice].discard(sub)
        subs = self._watch.get(sub.job_id)
        if subs is None:
            return
        subs.discard(sub)
        if not subs:
            del self._watch[sub.job_id]
            if not self._watch:
                self._watching.clear()
            self._known.pop(sub.job_id, None)
            self._queued.pop(sub.job_id, None)

    # ---------------------------------------------------------------- listening
    def _on_notify(self, _channel: str, payload: str) -> None:
        self.notifications += 1
        admins = bool(self._admins)
        for item in payload.split(","):
            job_id, _, version_text = item.partition(":")
            who_only = version_text.endswith("r")  # requesters changed, the version did not
            version = digits(version_text[:-1] if who_only else version_text, 19)
            if version is None or not _JOB_ID.match(job_id):
                self._skip(payload)
                continue
            if admins:
                self._admin_dirty.add(job_id)
            if job_id not in self._watch:
                continue
            # A version no newer than what was offered means the public view did
            # not change (a retry's private bookkeeping): nothing to send.
            if not who_only and version <= self._known.get(job_id, (0, ()))[0]:
                continue
            self._dirty.add(job_id)
        if self._dirty or self._admin_dirty:
            self._wake.set()

    def _skip(self, payload: str) -> None:
        self.bad_notifications += 1
        now = time.monotonic()
        if now - self._bad_logged >= _BAD_LOG_EVERY:  # a flood of them must not flood the log
            self._bad_logged = now
            log.warning("feed: skipped a malformed notification on %s (%d so far): %r",
                        CHANNEL, self.bad_notifications, payload[:80])

    async def _on_connect(self) -> None:
        # Anything may have changed while we were not listening.
        self.reconnects += 1
        self._resync = True
        self._admin_sent.clear()
        for admin in self._admins:
            admin.resync()
        self._wake.set()
        self.signals.connected.signal(self.reconnects)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await self._wake.wait()
            # At most one re-read per `batch` seconds, each taking what gathered
            # meanwhile; a change after a quiet spell is re-read at once (sleep(0):
            # the notifications read with it are parsed first).
            await self.signals.window.sleep(max(self.reread_at + self.batch - loop.time(), 0.0))
            self._wake.clear()
            self.reread_at = loop.time()
            resync, self._resync = self._resync, False
            ids = set(self._watch) if resync else self._dirty
            self._dirty = set()
            admin_ids, self._admin_dirty = self._admin_dirty, set()
            try:
                await self._reread(ids, admin_ids)
                self.signals.reread.signal(resync)
            except Exception as exc:  # the database may be restarting: try again
                log.warning("feed: re-reading %d jobs failed (%s); retrying", len(ids) + len(admin_ids), exc)
                self._resync = self._resync or resync
                self._dirty |= ids
                self._admin_dirty |= admin_ids
                self.signals.reread_failed.signal(exc)
                await self.signals.retry.sleep(0.5)
                self._wake.set()

    async def _reread(self, ids: set[str], admin_ids: set[str]) -> None:
        watched = list(ids & self._watch.keys())  # streams may have ended meanwhile
        for start in range(0, len(watched), REREAD_CHUNK):
            self.rereads += 1
            for row in await self.queue.get_job_rows(watched[start:start + REREAD_CHUNK]):
                view = View.of_row(row)
                known = self._known.get(view.job_id)
                if known is not None and not view.newer_than(*known):
                    continue
                if known is not None and view.version == known[0]:
                    view.changed_at = None  # requesters moved: when is not updated_at, so not timed
                self._known[view.job_id] = (view.version, view.extra)
                self._note_queued(view)
                for sub in list(self._watch.get(view.job_id, ())):
                    sub.offer(view)
        admin_list = list(admin_ids) if self._admins else []
        for start in range(0, len(admin_list), REREAD_CHUNK):
            self.rereads += 1
            for text in await self.queue.admin_get_jobs_json(admin_list[start:start + REREAD_CHUNK]):
                data = json.loads(text)
                job_id, changed = data["id"], changed_at(data)
                sent = hash(text)
                last = self._admin_sent.pop(job_id, None)
                self._admin_sent[job_id] = (sent, changed)  # newest last
                repeat = last is not None and last[0] == sent
                # Timed only when updated_at dates this change: not a retry's claim or a
                # release (they leave it), nor the first view of a job here (what
                # changed, and when, is unknown: a requester may have joined)
                dated = last is not None and changed != last[1]
                if not dated:
                    changed = None  # its commit time is unknown: the lag metric leaves it out
                if len(self._admin_sent) > ADMIN_SENT_KEPT:
                    del self._admin_sent[next(iter(self._admin_sent))]  # the longest unchanged
                if repeat:
                    continue
                for admin in list(self._admins):
                    admin.offer(job_id, text, changed)

    # ---------------------------------------------------------------- positions
    async def _refresh_positions(self) -> None:
        """Every position_interval seconds, the positions of all watched queued
        jobs in one query (per REREAD_CHUNK ids); a moved one is offered under
        its version, like a requesters change. Never per stream."""
        while True:
            await asyncio.sleep(self.position_interval)
            try:
                await self.refresh_positions()
            except Exception as exc:  # the database may be restarting: next round
                log.warning("feed: refreshing queue positions failed (%s)", exc)

    async def refresh_positions(self) -> None:
        """A stream gets a moved position at most every position_interval: one
        that opened less than that ago (its first view had a position) is owed
        the move, and gets it at the next round."""
        ids = list(self._queued)
        owed, self._position_owed = self._position_owed, set()
        for start in range(0, len(ids), REREAD_CHUNK):
            chunk = ids[start:start + REREAD_CHUNK]
            self.position_rounds += 1
            positions = await self.queue.positions(chunk)
            young = time.monotonic() - self.position_interval
            for job_id in chunk:
                view = self._queued.get(job_id)  # (the newest: a re-read may have run meanwhile)
                position = positions.get(job_id)
                # None: started, or not due yet; a started job's new version says so itself
                if view is None or position is None:
                    continue
                if position != view.position:
                    view = view.with_position(position)
                    self._known[job_id] = (view.version, view.extra)
                    self._queued[job_id] = view
                elif job_id not in owed:
                    continue
                for sub in list(self._watch.get(job_id, ())):
                    if sub.since > young:
                        self._position_owed.add(job_id)
                    else:
                        sub.offer(view)  # (nothing written to a stream that has it)
