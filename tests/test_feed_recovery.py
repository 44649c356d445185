"""The feed after trouble: a listener that reconnected tells dashboards to
resync and re-reads every watched job; a re-read that failed is tried again
with the same ids. The tests wait on the feed's signals (worker/testsignal.py),
not on the clock."""

from __future__ import annotations

import asyncio

import pytest

from jobfeed.api.feed import Feed
from jobfeed.api.subscriptions import View
from jobfeed.worker.queue import Queue
from waiting import eventually


class FailingReads(Queue):
    """The real queue, whose re-read carrying a job's version `fail_at` (or
    later) fails once, as if the database had gone away during it (an injected
    failure). Keyed on what the read carries, so a stray earlier re-read (a
    late notification of the submit) cannot take the failure instead."""

    fail_at: int | None = None

    async def get_job_rows(self, job_ids):
        rows = await super().get_job_rows(job_ids)
        if self.fail_at is not None and any(View.of_row(r).version >= self.fail_at for r in rows):
            self.fail_at = None
            raise ConnectionError("injected: the database is restarting")
        return rows


@pytest.fixture
async def feed(dsn, pool, demo_kind):
    f = Feed(dsn, FailingReads(pool), batch=0.001, health_interval=60.0)
    f.signals.connected.enable()
    f.signals.reread.enable()
    f.signals.reread_failed.enable()
    f.signals.retry.enable()
    await f.start()
    await f.signals.connected.wait()  # the first connect...
    assert await f.signals.reread.wait()  # ...and its resync (of nothing yet)
    yield f
    await f.close()


async def _true(value: bool) -> bool:
    return value


async def watch(feed, job_id):
    sub = feed.subscribe(str(job_id))
    feed.seed(sub, View.parse(await feed.queue.get_job_json(job_id)))
    assert (await asyncio.wait_for(sub.next(), 5)).version == 1
    return sub


async def test_a_dashboard_is_told_to_resync_after_the_listener_reconnects(feed, pool, queue):
    admin = feed.subscribe_admin()
    job_id, _ = await queue.submit("demo", "seen")
    resync, views = await asyncio.wait_for(admin.next(), 5)
    assert not resync and str(job_id) in views[0][0]
    # The listener's connection dies: notifications sent until it is back are lost.
    await pool.execute("select pg_terminate_backend($1)", feed.listener.backend_pid)
    await feed.signals.connected.wait()
    resync, views = await asyncio.wait_for(admin.next(), 5)
    assert resync  # the dashboard reloads its list: nothing missed stays missed


async def test_watched_jobs_are_re_read_after_the_listener_reconnects(feed, pool, queue):
    job_id, _ = await queue.submit("demo", "w")
    sub = await watch(feed, job_id)
    pid = feed.listener.backend_pid
    # The change happens while the listener is away, so its notification is lost.
    feed.listener.channels.clear()  # (the reconnect listens to nothing more: no hint arrives)
    # The resync's re-read waits until the claim has committed: a reconnect quicker
    # than the claim (a loaded machine) would otherwise read the old version.
    feed.signals.window.enable()
    await pool.execute("select pg_terminate_backend($1)", pid)
    await queue.claim(["demo"], 1, "w")
    await feed.signals.connected.wait()
    await feed.signals.window.asked()
    feed.signals.window.fire()
    assert (await asyncio.wait_for(sub.next(), 5)).version == 2


async def test_a_failed_re_read_is_tried_again_with_the_same_ids(feed, queue):
    heard = feed.notifications
    job_id, _ = await queue.submit("demo", "r")
    # The submit's notification is heard before the job is watched, so it starts
    # no re-read: a late one would read version 2 and take the injected failure,
    # and the claim's own notification would then deliver what the retry must.
    await eventually(lambda: _true(feed.notifications > heard), what="the submit's notification")
    sub = await watch(feed, job_id)
    admin = feed.subscribe_admin()
    feed.queue.fail_at = 2
    await queue.claim(["demo"], 1, "w")  # one notification: the job's version 2
    assert isinstance(await feed.signals.reread_failed.wait(), ConnectionError)
    assert await feed.signals.retry.asked() == 0.5
    feed.signals.retry.fire()
    # No new notification comes: only a retry of the failed ids can deliver these.
    assert (await asyncio.wait_for(sub.next(), 5)).version == 2
    resync, views = await asyncio.wait_for(admin.next(), 5)
    assert not resync and '"state": "running"' in views[0][0]


async def test_a_resync_sends_no_view_a_stream_already_has(feed, pool, queue):
    job_id, _ = await queue.submit("demo", "same")
    sub = await watch(feed, job_id)
    await pool.execute("select pg_terminate_backend($1)", feed.listener.backend_pid)
    await feed.signals.connected.wait()
    while not await feed.signals.reread.wait():  # (a late re-read of the submit's notification may come first)
        pass  # until the resync's re-read was offered
    # Ask for the next view before the change (which would replace a pending repeat).
    following = asyncio.create_task(sub.next())
    await asyncio.sleep(0)
    await queue.claim(["demo"], 1, "w")
    # The next view is the change, never version 1 again.
    assert (await asyncio.wait_for(following, 5)).version == 2
