"""History (jobfeed): submit, claim and drain on an empty jobs table and on one
holding a long history of finished jobs; then drain and latency while the
sweeper deletes the expired part of that history.

The history is planted with one INSERT ... SELECT: finished jobs (completed,
with a result) whose ids are uuid v7 of their finish time, as the real ones
are. `expired` of them finished before the retention window, the rest within
it. Then ANALYZE and VACUUM, as autovacuum would have done over a week."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import asyncpg

from jobfeed.worker import db
from jobfeed.worker.queue import Queue

from . import pg
from .queue_scenarios import latency_on
from .systems import JOBFEED, ROOT, WorkerProcess, run_driver
from .trials import median_of

RETENTION_DAYS = 7
# Expired rows finished 8+ days ago; the rest within the last ~2 days.
PLANT = """
insert into jobfeed.jobs (id, kind, target, payload, state, attempts, generation, version, result,
                          run_after, created_at, updated_at, started_at, claimed_at, finished_at)
select jobfeed.uuid_v7(f), 'noop', 'h' || g, jsonb_build_object('i', g), 'completed', 1, 1, 3, '{"ok": true}',
       f, f, f, f, f, f
  from generate_series(1, $1::int) g,
       lateral (select case when g <= $2::int then now() - interval '8 days' - g * interval '1 ms'
                            else now() - interval '1 day' - g * interval '10 ms' end as f) t
"""
# The claim's extra jobs (targets c...), loaded beside the submitted ones.
CLAIM_MORE = 3
LOAD_MORE = """
insert into jobfeed.jobs (kind, target, payload, max_attempts)
select 'noop', 'c' || g, jsonb_build_object('i', g), 5 from generate_series(1, $1::int) g
"""
# This run's jobs (targets t...), not the history's. Each probe reads a range
# of an index that leaves the history out: these are polled while a worker
# drains, and a probe that reads the history (a parallel scan of the whole
# table each time) takes the drain's cores on the history's side only. The
# unfinished jobs by jobs_unfinished_target (its predicate written as it is):
OPEN_SQL = ("select count(*) from jobfeed.jobs where kind = 'noop' and target >= 't' and target < 'u' "
            "and state not in ('completed', 'failed', 'canceled')")
# Completions since an epoch on the database's clock (jobs_finished_at).
DONE_SINCE = "from jobfeed.jobs where state = 'completed' and finished_at >= to_timestamp({:f}) and target like 't%'"
LAST_DONE_SQL = "select extract(epoch from max(finished_at))::float8 " + DONE_SINCE
NOW_SQL = "select extract(epoch from clock_timestamp())::float8"
HISTORY_LEFT_SQL = "select count(*) from jobfeed.jobs where target like 'h%'"


async def plant(url: str, n: int, expired: int) -> float:
    """n finished jobs, `expired` of them past the retention, vacuumed and
    checkpointed; the seconds it took."""
    conn = await asyncpg.connect(url)
    t0 = time.perf_counter()
    try:
        await conn.execute(PLANT, n, expired)
        await conn.execute("vacuum analyze jobfeed.jobs")
        await conn.execute("checkpoint")  # the plant's WAL: see pg.Server.new_database
    finally:
        await conn.close()
    return time.perf_counter() - t0


async def _submit_and_claim(url: str, n: int) -> dict:
    """n jobs submitted one at a time (timed), then claimed 100 at a time (timed)
    with CLAIM_MORE times as many loaded in one statement beside them: a claim
    of n alone took a quarter of a second, too short to time on a shared machine."""
    sub = await run_driver(JOBFEED, url, "enqueue", "--mode", "single", "--n", str(n))
    conn = await db.connect(url, name="bench-claim")
    try:
        queue = Queue(conn)
        await conn.execute(LOAD_MORE, CLAIM_MORE * n)
        claimed = []
        t0 = time.perf_counter()
        while batch := await queue.claim(["noop"], 100, "bench-claim"):
            claimed += batch
        seconds = time.perf_counter() - t0
        # Finished (untimed), so the drain's load may reuse the targets.
        for i in range(0, len(claimed), 1000):
            await queue.complete_many([(c.id, c.generation, None) for c in claimed[i:i + 1000]])
    finally:
        await conn.close()
    return {"submit": {"n": n, "rate": sub.get("rate"), "ok": sub.get("n", n) == n},
            "claim": {"n": len(claimed), "seconds": seconds, "rate": len(claimed) / seconds if seconds else None,
                      "ok": len(claimed) == (1 + CLAIM_MORE) * n}}


async def _wait_open(url: str, timeout: float) -> int:
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + timeout
        while (left := await conn.fetchval(OPEN_SQL)) and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        return left
    finally:
        await conn.close()


async def _drain(url: str, n: int, settings: dict[str, str] | None) -> dict:
    async with WorkerProcess(JOBFEED, url, settings=settings) as worker:
        await asyncio.sleep(0.5)
        since = await pg.fetchval(url, NOW_SQL)
        loaded = await run_driver(JOBFEED, url, "load", "--n", str(n))
        left = await _wait_open(url, max(120.0, n / 150))
        last = await pg.fetchval(url, LAST_DONE_SQL.format(since))
        await worker.stop()
    seconds = last - loaded["committed_at"] if last else None
    return {"n": n, "left": left, "ok": left == 0, "seconds": seconds,
            "rate": n / seconds if seconds and left == 0 else None}


async def _latency(url: str, rate: float, seconds: float, settings: dict[str, str] | None) -> dict:
    since = await pg.fetchval(url, NOW_SQL)
    return await latency_on(url, JOBFEED, rate, seconds, settings, completed_sql="select count(*) " + DONE_SINCE.format(since))


class Sweeper:
    """`jobfeed sweeper` as a process of its own, sweeping every 0.5 s."""

    def __init__(self, url: str):
        self.url = url
        self.proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> "Sweeper":
        env = {**os.environ, "DATABASE_URL": self.url, "JOBFEED_RETENTION": f"{RETENTION_DAYS}d"}
        self.proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "jobfeed.worker.cli", "sweeper", "--sweep-interval", "500ms", cwd=ROOT,
            env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.DEVNULL)
        return self

    async def __aexit__(self, *exc) -> None:
        if self.proc.returncode is not None:
            raise RuntimeError(f"the sweeper exited early ({self.proc.returncode}); see its stderr above")
        self.proc.terminate()
        try:
            await asyncio.wait_for(self.proc.wait(), 20)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()


async def history(server: pg.Server, *, history_n: int, expired: int, submit_n: int, drain_n: int,
                  latency_rate: float, latency_seconds: float, settings: dict[str, str] | None = None,
                  trials: int = 3) -> dict:
    """Each figure is the median of `trials` interleaved trials (empty, history,
    empty, ...; latency without, then with, the sweeper), so a slow spell of the
    machine falls on both sides of a ratio. The empty table is one database for
    every trial, as the history's is, so both carry the jobs of the trials
    before them (each trial's claimed jobs stay in the queue's indexes, dead,
    until a vacuum); each trial starts with a warm-up (200 jobs submitted,
    claimed and completed) on both sides."""
    trials = max(trials, 1)
    out: dict = {"history_n": history_n, "expired": expired, "trials": trials}
    url = await server.new_database("history")
    await run_driver(JOBFEED, url, "setup")
    plant_seconds = await plant(url, history_n, expired)
    runs: dict[str, dict[str, list[dict]]] = {c: {"submit": [], "claim": [], "drain": []} for c in ("empty", "history")}
    empty_url = await server.new_database("history_empty")
    await run_driver(JOBFEED, empty_url, "setup")
    for _ in range(trials):
        for case, case_url in (("empty", empty_url), ("history", url)):
            await _submit_and_claim(case_url, min(submit_n, 200))  # warm-up, both sides
            got = await _submit_and_claim(case_url, submit_n)
            got["drain"] = await _drain(case_url, drain_n, settings)
            for part in ("submit", "claim", "drain"):
                runs[case][part].append(got[part])
    await server.drop_database(empty_url)
    for case in ("empty", "history"):
        out[case] = {part: median_of(runs[case][part], ("rate",)) for part in ("submit", "claim", "drain")}
    out["history"]["plant_seconds"] = plant_seconds

    # The same database: latency without the sweeper, then with it deleting the
    # expired history (a drain too while it sweeps), in turns.
    quiet: list[dict] = []
    swept: dict[str, list] = {"drain": [], "latency": [], "deleted": []}
    before = await pg.fetchval(url, HISTORY_LEFT_SQL)
    for _ in range(trials):
        quiet.append(await _latency(url, latency_rate, latency_seconds, settings))
        async with Sweeper(url):
            await asyncio.sleep(1.0)  # it has started deleting
            swept["drain"].append(await _drain(url, drain_n, settings))
            swept["latency"].append(await _latency(url, latency_rate, latency_seconds, settings))
    out["history"]["latency"] = median_of(quiet, ("p99_ms",))
    deleted = before - await pg.fetchval(url, HISTORY_LEFT_SQL)
    out["sweeping"] = {"drain": median_of(swept["drain"], ("rate",)),
                       "latency": median_of(swept["latency"], ("p99_ms",)), "deleted_by_end": deleted}
    out["sweeping"]["ok"] = (out["sweeping"]["drain"]["ok"] and out["sweeping"]["latency"]["ok"]
                             and 0 < deleted <= expired)
    await server.drop_database(url)
    out["ok"] = all(v.get("ok", True) for c in ("empty", "history") for v in out[c].values() if isinstance(v, dict)) \
        and out["sweeping"]["ok"]
    return out
