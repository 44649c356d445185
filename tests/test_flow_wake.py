"""A capped kind's freed slot wakes the workers waiting for it (jobfeed_due, sent
by notify_freed), so a waiting job starts at once, not at the next poll; and a
worker whose due jobs all sit behind a full concurrency key sleeps instead of
claiming in a loop. The poll interval is far longer than the test's wait; the
test waits on the runner's hooks (worker/testsignal.py), not on the clock."""

from __future__ import annotations

import asyncio
import datetime as dt

import asyncpg
import pytest

from jobfeed.worker.queue import Queue
from jobfeed.worker.runner import Runner
from jobfeed.worker.tasks import TaskSpec
from waiting import eventually, wait_state

POLL = 300.0   # the runner would claim again only after this: never within a test
LEASE = 600.0  # nor does a lease end within it


class Workers:
    """Runners of one capped kind, poll POLL, whose handler reports each job it
    starts (and holds it until the test ends)."""

    def __init__(self, queue, dsn):
        self.queue, self.dsn = queue, dsn
        self.started: asyncio.Queue = asyncio.Queue()
        self.hold = asyncio.Event()
        self.made: list[tuple[Runner, asyncio.Task]] = []
        self.spec: TaskSpec | None = None

    async def handler(self, job, ctx):
        self.started.put_nowait(job.target)
        await self.hold.wait()
        return {}

    async def next_start(self) -> str:
        """The target of the next job started: far sooner than POLL, or fail."""
        return await asyncio.wait_for(self.started.get(), POLL / 10)

    async def register(self, kind: str, **caps) -> None:
        self.spec = TaskSpec(kind, self.handler, max_attempts=3, lease=LEASE, backoff=(1.0,), jitter=0.0, **caps)
        await self.queue.register_kind(kind, max_attempts=3, lease=LEASE, backoff=(1.0,), jitter=0.0, **caps)

    def start(self) -> Runner:
        assert self.spec is not None
        r = Runner(self.queue, self.dsn, [self.spec], poll_interval=POLL, grace=1.0)
        r.signals.sleeping.enable()
        self.made.append((r, asyncio.create_task(r.run())))
        return r


@pytest.fixture
async def workers(queue, dsn):
    w = Workers(queue, dsn)
    yield w
    w.hold.set()
    for r, task in w.made:
        r.stop()
        await asyncio.wait_for(task, 10)


async def other_worker_holds(queue, kind: str, target: str, key: str | None = None):
    """A job of `kind` running under another worker, as if claimed elsewhere."""
    await queue.submit(kind, target, concurrency_key=key)
    (job,) = await queue.claim([kind], 1, "elsewhere", lease=LEASE)
    return job


async def free(queue, how: str, job) -> None:
    if how == "complete":
        assert await queue.complete(job.id, job.generation, {})
    elif how == "fail":
        assert await queue.fail_permanent(job.id, job.generation, "broken", None)
    elif how == "wait":  # its handler returned ctx.wait_for(...): it waits, no longer running
        await queue.register_kind("other", max_attempts=3, lease=LEASE, backoff=(1.0,))
        other = (await queue.submit("other", "x")).id
        assert await queue.wait_for(job.id, job.generation, [], [other])
    else:
        await queue.cancel(job.id)


@pytest.mark.parametrize("how", ["complete", "fail", "cancel", "wait"])
async def test_a_freed_max_running_slot_wakes_a_sleeping_worker(queue, workers, how):
    await workers.register("capped", max_running=1)
    held = await other_worker_holds(queue, "capped", "a")
    await queue.submit("capped", "b")
    r = workers.start()
    # its claim found the kind at its cap: it sleeps the whole poll
    assert await r.signals.sleeping.wait() == POLL
    await free(queue, how, held)
    assert await workers.next_start() == "b"  # well before the poll: the NOTIFY woke it


async def test_a_worker_behind_a_full_key_sleeps_until_the_key_frees(queue, workers):
    await workers.register("tenant", max_running_per_key=1)
    held = await other_worker_holds(queue, "tenant", "a", key="k")
    await queue.submit("tenant", "b", concurrency_key="k")
    r = workers.start()
    # b is due but its key is full: not "due now", or the worker would claim in a
    # loop. (The first claim has no earlier look at the clock to go by: it may
    # take one more claim to know b was left behind.)
    if await r.signals.sleeping.wait() != POLL:
        assert await r.signals.sleeping.wait() == POLL
    assert await queue.next_due(["tenant"]) <= 0  # (what a claim-less look still says)
    await free(queue, "complete", held)
    assert await workers.next_start() == "b"
    assert await r.signals.sleeping.wait() == POLL  # b runs, nothing else is queued
    # a job due later than the last claim still sets the wake-up time
    soon = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=60)
    await queue.submit("tenant", "c", concurrency_key="other", run_after=soon)
    assert 30 < await r.signals.sleeping.wait() <= 61


async def test_freeing_a_slot_notifies_only_for_capped_kinds(queue, dsn):
    await queue.register_kind("plain", max_attempts=3, lease=LEASE, backoff=(1.0,))
    await queue.register_kind("capped", max_attempts=3, lease=LEASE, backoff=(1.0,), max_running=2)
    jobs = {}
    for kind in ("plain", "capped"):
        for target in ("a", "b"):
            await queue.submit(kind, target)
        jobs[kind] = await queue.claim([kind], 2, "w", lease=LEASE)
    seen: asyncio.Queue = asyncio.Queue()
    conn = await asyncpg.connect(dsn)
    try:
        await conn.add_listener("jobfeed_due", lambda *args: seen.put_nowait(args[3]))
        assert await queue.complete_many([(j.id, j.generation, {}) for j in jobs["plain"]]) \
            == {j.id for j in jobs["plain"]}
        assert await queue.complete_many([(j.id, j.generation, {}) for j in jobs["capped"]]) \
            == {j.id for j in jobs["capped"]}
        await conn.execute("select pg_notify('jobfeed_due', 'end')")  # delivered after both commits
        payloads = []
        while (payload := await asyncio.wait_for(seen.get(), 10)) != "end":
            payloads.append(payload)
    finally:
        await conn.close()
    # one notification waking two claimers (count 2), for the capped kind only
    assert [(p.split(":")[0], p.split(":")[2]) for p in payloads] == [("2", "capped")]


async def test_a_worker_with_free_slots_claims_once_per_submit_not_again_after_each_job(pool, dsn):
    # A job's end (and its outcome's write) frees a slot, which matters only to
    # a worker that slept for want of slots: one with slots free found nothing
    # due, and claiming again then would be an empty claim per job.
    queue = Queue(pool)
    ended: asyncio.Queue = asyncio.Queue()

    async def quick(job, ctx):
        ended.put_nowait(job.target)
        return {}

    spec = TaskSpec("quick", quick, max_attempts=3, lease=LEASE, backoff=(1.0,), jitter=0.0)
    await queue.register_kind("quick", max_attempts=3, lease=LEASE, backoff=(1.0,), jitter=0.0)
    r = Runner(queue, dsn, [spec], poll_interval=POLL, grace=1.0, concurrency=4)
    r.signals.sleeping.enable()
    task = asyncio.create_task(r.run())
    try:
        # The start's claim is not this test's business; and a submit while it
        # runs could be taken by it, its notification then waking an empty claim.
        await r.signals.sleeping.wait()
        r.signals.claimed.enable()
        for i in range(6):
            job_id = (await queue.submit("quick", f"t{i}")).id
            assert await asyncio.wait_for(ended.get(), POLL / 10) == f"t{i}"
            await wait_state(pool, job_id, "completed")
        # one claim per submit, each taking its job: none after a job's end
        taken = [await r.signals.claimed.wait() for _ in range(r.signals.claimed.pending())]
        assert taken == [1] * 6
    finally:
        r.stop()
        await asyncio.wait_for(task, 10)


async def test_a_full_worker_claims_when_a_job_ends(queue, workers):
    # the second job's notification comes while the only slot is taken: the
    # first job's end wakes the worker, not the poll
    await workers.register("single")
    r = Runner(queue, workers.dsn, [workers.spec], poll_interval=POLL, grace=1.0, concurrency=1)
    workers.made.append((r, asyncio.create_task(r.run())))
    await queue.submit("single", "a")
    assert await workers.next_start() == "a"
    await queue.submit("single", "b")
    workers.hold.set()  # a ends
    assert await workers.next_start() == "b"


async def test_a_worker_woken_from_full_hears_a_slot_freed_during_its_claim(queue, pool, workers):
    """One slot, one key: each job's end wakes the full worker, whose claim
    finds the key still held (the end not yet written); the write's
    notification then comes during that claim, and must wake it, not be
    judged by the full worker's "not for me". Before, about one job in ten
    waited for the poll."""
    async def quick(job, ctx):
        return {}
    spec = TaskSpec("serial", quick, max_attempts=3, lease=LEASE, backoff=(1.0,), jitter=0.0, max_running_per_key=1)
    await queue.register_kind("serial", max_attempts=3, lease=LEASE, backoff=(1.0,), jitter=0.0,
                              max_running_per_key=1)
    r = Runner(queue, workers.dsn, [spec], poll_interval=POLL, grace=1.0, concurrency=1)
    workers.made.append((r, asyncio.create_task(r.run())))
    ids = [(await queue.submit("serial", f"t{i}", concurrency_key="k")).id for i in range(60)]
    for job_id in ids:  # each well before the poll, or fail
        await wait_state(pool, job_id, "completed", timeout=10)


async def test_a_job_a_stopping_worker_releases_goes_to_another_at_once(queue, workers):
    """Before: the stopping worker kept its seat through its grace period, so the
    release's notification fell to it about as often as not, and the idle
    worker beside it took the job only at its next poll. Four rounds, a kind
    each, two workers each: a held job on A, B idle and seated; A stops."""
    for n in range(4):
        kind = f"handoff{n}"
        await workers.register(kind)
        a = workers.start()
        await queue.submit(kind, "job")
        assert await workers.next_start() == "job"
        b = workers.start()

        async def b_counts_both_seats(b=b, kind=kind) -> bool:  # its view of the seats includes A's
            return b._seats._view.get(kind, (0, 0))[1] == 2
        await eventually(b_counts_both_seats, timeout=5, what="B's view of two seats")
        a.stop()  # the held handler outlasts the grace (1 s) and is released
        assert await asyncio.wait_for(workers.started.get(), 5) == "job"  # B, far before its poll
