"""The feed on its own, on a real database and a real LISTEN connection: views
coalesce per subscriber, unwatched jobs cost no queries, a burst is re-read in
one query, and a dashboard that falls far behind is told to resync."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from jobfeed.api.feed import Feed
from jobfeed.api.subscriptions import View
from waiting import eventually


@pytest.fixture
async def feed(dsn, queue, demo_kind):
    f = Feed(dsn, queue, batch=0.005, health_interval=1.0)
    await f.start()
    yield f
    await f.close()


async def watch(feed, queue, job_id):
    sub = feed.subscribe(str(job_id))
    feed.seed(sub, View.parse(await queue.get_job_json(job_id)))
    return sub


async def test_a_slow_subscriber_holds_only_the_newest_view(feed, queue):
    job_id, _ = await queue.submit("demo", "slow")
    sub = await watch(feed, queue, job_id)
    assert (await sub.next()).version == 1
    (claimed,) = await queue.claim(["demo"], 1, "w")
    for done in range(1, 6):
        await queue.progress(claimed.id, claimed.generation, done, 5, None)
    await eventually(lambda: asyncio.sleep(0, sub.newest == 7), timeout=5, what="version 7 pending")
    view = await sub.next()  # the four views in between were replaced, not queued
    assert view.version == 7 and '"done": 5' in view.text
    assert sub.newest == sub.sent == 7
    sub.close()
    assert await sub.next() is None and feed.watched_jobs == 0


async def test_unwatched_jobs_cost_no_queries_and_bursts_are_read_once(feed, queue):
    ids = [(await queue.submit("demo", f"t{i}"))[0] for i in range(20)]
    await eventually(lambda: asyncio.sleep(0, feed.notifications >= 20), timeout=5, what="notifications")
    assert feed.rereads == 0  # nobody watches: parsed and dropped

    subs = [await watch(feed, queue, job_id) for job_id in ids]
    before = feed.rereads
    await queue.claim(["demo"], 20, "w")  # one statement, one notification for 20 jobs
    await eventually(lambda: asyncio.sleep(0, all(s.newest == 2 for s in subs)), timeout=5, what="all claimed")
    assert feed.rereads == before + 1


async def test_a_dashboard_far_behind_is_asked_to_resync(feed, queue):
    admin = feed.subscribe_admin(limit=3)
    feed.signals.reread.enable()
    heard, started, ended = feed.notifications, feed.rereads, 0
    for i in range(5):
        await queue.submit("demo", f"a{i}")
    # All five heard (one notification each) and re-read, none still underway (a
    # re-read counts itself in `rereads` as it starts and signals as it ends), so
    # no view of them is offered after the resync is read (under load the fifth
    # came in a batch of its own).
    while not (feed.notifications >= heard + 5 and not feed._admin_dirty
               and feed.rereads - started <= ended + feed.signals.reread.pending()):
        await feed.signals.reread.wait()
        ended += 1
    await eventually(lambda: asyncio.sleep(0, admin._resync), timeout=5, what="resync")
    assert await admin.next() == (True, [])
    await queue.submit("demo", "after")
    resync, views = await asyncio.wait_for(admin.next(), 5)
    assert not resync and len(views) == 1 and '"target": "after"' in views[0][0]


async def test_the_dashboard_never_gets_the_same_view_twice(feed, queue, pool):
    """A notification that changed nothing an admin sees (a requesters count's,
    or a second one read in a later window) sends no repeat; a change does."""
    admin = feed.subscribe_admin()
    job_id, _ = await queue.submit("demo", "once")
    resync, views = await asyncio.wait_for(admin.next(), 5)
    assert not resync and len(views) == 1
    feed.signals.reread.enable()
    for _ in range(2):  # each in a window of its own: re-read, and found unchanged
        await pool.execute("select pg_notify('jobfeed_changed', $1)", f"{job_id}:1")
        await feed.signals.reread.wait()
        assert not admin._pending  # nothing offered
    await queue.claim(["demo"], 1, "w")
    resync, views = await asyncio.wait_for(admin.next(), 5)
    assert not resync and len(views) == 1 and '"state": "running"' in views[0][0]


async def test_a_change_after_a_quiet_spell_is_read_at_once_and_a_stream_of_them_gathers(dsn, queue, demo_kind):
    feed = Feed(dsn, queue, batch=30.0, health_interval=1.0)
    window, reread = feed.signals.window.enable(), feed.signals.reread.enable()
    # Watched before the feed listens: no notification of these submissions can
    # reach it, so the only changes it hears are the test's own.
    ids = [(await queue.submit("demo", f"q{i}"))[0] for i in range(3)]
    subs = [await watch(feed, queue, job_id) for job_id in ids]
    await feed.start()
    try:
        assert await window.asked() == 0.0  # the first connect's resync: nothing was read before
        window.fire()
        assert await reread.wait() is True
        before = feed.rereads
        feed.reread_at -= 60.0  # planted: the last re-read was a minute ago, a quiet spell
        (first,) = await queue.claim(["demo"], 1, "w")
        # The window closed long ago: this change goes at once.
        assert await window.asked() == 0.0
        window.fire()
        assert await reread.wait() is False
        assert [s.newest for s in subs] == [2 if j == first.id else 1 for j in ids]
        # Two more changes right after, each its own notification: they wait out
        # what is left of the window, then go in one query together.
        heard = feed.notifications
        for job in await queue.claim(["demo"], 1, "w") + await queue.claim(["demo"], 1, "w"):
            await queue.progress(job.id, job.generation, 1, 2, None)
        left = await window.asked()
        assert 25.0 < left <= 30.0
        await eventually(lambda: asyncio.sleep(0, feed.notifications >= heard + 4), timeout=5, what="notifications")
        assert feed.rereads == before + 1 and [s.newest for s in subs].count(1) == 2
        window.fire()
        assert await reread.wait() is False
        assert feed.rereads == before + 2 and [s.newest for s in subs] == [3 if j != first.id else 2 for j in ids]
    finally:
        await feed.close()


async def test_a_newcomers_newer_snapshot_reaches_the_jobs_other_watchers(dsn, queue, demo_kind):
    """A stream opening just as its job changes reads the change in its
    snapshot before the feed has re-read it; the feed then knows that version
    and skips the change's notification: the job's other streams must get it
    from the snapshot (a final status they missed would hold them open)."""
    feed = Feed(dsn, queue, batch=0.005, health_interval=1.0)
    window = feed.signals.window.enable()
    await feed.start()
    try:
        await window.asked()
        window.fire()  # the first connect's resync
        job_id, _ = await queue.submit("demo", "seen-late")
        old = await watch(feed, queue, job_id)
        assert (await old.next()).version == 1
        await queue.claim(["demo"], 1, "w")  # version 2: heard, its re-read waits for the window
        await window.asked()
        new = await watch(feed, queue, job_id)
        assert (await new.next()).version == 2
        window.fire()
        assert (await asyncio.wait_for(old.next(), 5)).version == 2
    finally:
        await feed.close()


async def test_a_change_updated_at_does_not_date_is_not_timed(feed, queue, pool):
    """jobfeed_sse_lag_seconds starts at a view's updated_at: a change that
    leaves it (a requester joining; for admins a retry's claim) carries no
    time, rather than the age of an older change."""
    await queue.register_kind("other", max_attempts=3, lease=60, backoff=(1,))
    old = (await queue.submit("other", "old")).id  # submitted before the dashboard's stream opened
    job_id = (await queue.submit("demo", "lag", request=True)).id
    sub = await watch(feed, queue, job_id)
    admin = feed.subscribe_admin(limit=100)
    first = await sub.next()
    await queue.submit("demo", "lag", request=True)  # a second requester: the same version
    joined = await asyncio.wait_for(sub.next(), 5)
    assert joined.version == first.version and '"requesters": 2' in joined.text and joined.changed_at is None
    # the dashboard's first view of it: not timed either (what changed, and when, is unknown)
    assert (await admin_view(admin, f'"id": "{job_id}"', '"requesters": 2'))[1] is None

    (claimed,) = await queue.claim(["demo"], 1, "w")  # the first claim: updated_at moves with it
    claim_view = await asyncio.wait_for(sub.next(), 5)
    assert claim_view.version == first.version + 1 and claim_view.changed_at is not None
    assert (await admin_view(admin, '"generation": 1', '"state": "running"'))[1] is not None
    assert await queue.fail_transient(claimed.id, claimed.generation, "flaky", "x")
    await pool.execute("update jobfeed.jobs set run_after = now() where id = $1", job_id)  # its backoff over
    (again,) = await queue.claim(["demo"], 1, "w")
    assert (await admin_view(admin, '"generation": 2', '"state": "running"'))[1] is None
    await queue.submit("other", "old", request=True)  # the dashboard's first view of it: a requester joined
    assert (await admin_view(admin, f'"id": "{old}"'))[1] is None


async def admin_view(admin, *markers: str) -> tuple[str, float | None]:
    """The first view holding every marker the dashboard's stream gets."""
    while True:
        _, views = await asyncio.wait_for(admin.next(), 5)
        for text, changed in views:
            if all(m in text for m in markers):
                return text, changed


class PingTimes:
    """A job stream's writer as the feed sees it, noting when it is pinged."""

    def __init__(self) -> None:
        self.pings: list[float] = []
        self.ended = False

    def ping(self) -> None:
        self.pings.append(asyncio.get_running_loop().time())

    def write_view(self, view: View) -> None:
        pass

    def end(self) -> None:
        self.ended = True


async def test_pings_go_out_a_slice_at_a_time_each_stream_every_interval(dsn, queue, demo_kind):
    """At thousands of streams one round of pings for all held the event loop
    for as long as its writes: each stream is in one of the feed's slices, and
    the slices take turns over the interval."""
    interval = 0.5
    feed = Feed(dsn, queue, health_interval=1.0, ping=interval)
    await feed.start()
    try:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.3 * interval)
        assert feed.ping_turns == 0  # no stream open: the timer rests
        writers = [PingTimes() for _ in range(40)]
        subs = []
        opened = loop.time()
        for i, writer in enumerate(writers):
            sub = feed.subscribe(f"00000000-0000-7000-8000-{i:012d}")
            assert sub.attach(writer) is None
            subs.append(sub)
        await asyncio.sleep(2.6 * interval)
        for writer in writers:
            gaps = [b - a for a, b in zip([opened] + writer.pings, writer.pings)]
            assert len(writer.pings) >= 2 and max(gaps) <= interval + 0.3, gaps  # (a loaded machine's lag)
        firsts = sorted(w.pings[0] for w in writers)
        assert firsts[-1] - firsts[0] >= 0.4 * interval, firsts  # spread over the interval, not all at once
        subs[0].close()
        assert writers[0].ended
        pinged, others = len(writers[0].pings), len(writers[1].pings)
        await asyncio.sleep(1.2 * interval)
        assert len(writers[0].pings) == pinged and len(writers[1].pings) > others
        for sub in subs[1:]:
            sub.close()
        assert feed.watched_jobs == 0 and not any(feed._ping_slices)  # a closed stream leaves its slice
        await asyncio.sleep(0.1)  # the turn under way, if any, ends
        turns = feed.ping_turns
        await asyncio.sleep(interval)
        assert feed.ping_turns == turns  # the last stream closed: it rests again
        sub = feed.subscribe("00000000-0000-7000-8000-999999999999")
        writer = PingTimes()
        assert sub.attach(writer) is None
        await asyncio.sleep(2 * interval)  # (its slice comes round within one interval; a loaded machine lags)
        assert writer.pings and feed.ping_turns > turns  # and wakes for the next stream
        sub.close()
    finally:
        await feed.close()


async def test_the_rereads_fields_are_the_views_own_in_every_state(queue, demo_kind):
    """The feed's re-read answers each view's fields beside its text
    (View.of_row), read by PostgreSQL from the view: they must be what parsing
    the text gives, for every public status, a position, requesters and none."""
    ids = {}
    for target in ("run", "done", "fail"):
        await queue.submit("demo", target)
    running, done, failed = await queue.claim(["demo"], 3, "w")
    for i in range(3):  # queued: the third has two ahead of it
        ids[f"queued{i}"] = (await queue.submit("demo", f"q{i}", request=True, requester=f"r{i}")).id
    await queue.submit("demo", "q0", request=True, requester="another")  # two requesters share it
    ids["processing"] = running.id
    await queue.progress(running.id, running.generation, 1, 4, "a step")
    ids["completed"] = done.id
    assert await queue.complete(done.id, done.generation, {"ok": True})
    ids["failed"] = failed.id
    assert await queue.fail_permanent(failed.id, failed.generation, "bad", "no")
    ids["canceled"] = (await queue.submit("demo", "c")).id
    await queue.cancel(ids["canceled"])
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    ids["scheduled"] = (await queue.submit("demo", "later", run_after=later)).id

    rows = {str(r[1]): r for r in await queue.get_job_rows(list(ids.values()))}
    assert len(rows) == len(ids)
    seen = set()
    for row in rows.values():
        fields, parsed = View.of_row(row), View.parse(row[0])
        assert (fields.job_id, fields.version, fields.terminal, fields.extra, fields.changed_at, fields.queued) == (
            parsed.job_id, parsed.version, parsed.terminal, parsed.extra, parsed.changed_at, parsed.queued)
        seen.add((row[3], fields.extra))
    statuses = {status for status, _ in seen}
    assert statuses == {"queued", "processing", "completed", "failed", "canceled"}, seen
    assert any(extra[1] is not None and extra[1] > 1 for _, extra in seen), seen  # a position behind others
    assert any(extra[0] == 2 for _, extra in seen), seen  # two requesters
