"""Queue scenarios, the same for every system: enqueue, drain, latency (and
jobfeed's depth). Each runs on a fresh database of the bench's server; counts
come from the database."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import statistics
import tempfile
import time

import asyncpg

from . import pg
from .systems import JOBFEED, System, WorkerProcess, run_driver

log = logging.getLogger("bench")


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100)."""
    if not values:
        return None
    ordered = sorted(values)
    k = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[k]


async def wait_count(url: str, sql: str, n: int, timeout: float, interval: float = 0.1) -> tuple[int, float]:
    """Poll a count until it reaches n (or the timeout); -> (count, time.time() when seen)."""
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + timeout
        while True:
            count = await conn.fetchval(sql)
            if count >= n or time.monotonic() > deadline:
                return count, time.time()
            await asyncio.sleep(interval)
    finally:
        await conn.close()


async def _fresh(server: pg.Server, system: System, label: str) -> str:
    url = await server.new_database(f"{label}_{system.name}")
    await run_driver(system, url, "setup", timeout=300)
    return url


# ---------------------------------------------------------------- enqueue

async def enqueue(server: pg.Server, system: System, n: int, batch: int) -> dict:
    """n jobs one await at a time on one connection, then n in batches, each on
    a fresh database; the database must then hold n queued jobs."""
    out = {}
    for mode in ("single", "batch"):
        url = await _fresh(server, system, f"enq_{mode}")
        res = await run_driver(system, url, "enqueue", "--mode", mode, "--n", str(n), "--batch", str(batch))
        res["queued_in_db"] = await pg.fetchval(url, system.queued_sql)
        res["ok"] = res["queued_in_db"] == n
        out[mode] = res
        await server.drop_database(url)
    return out


# ---------------------------------------------------------------- drain

async def drain(server: pg.Server, system: System, n: int, settings: dict[str, str] | None = None,
                timeout: float | None = None, processes: int = 1) -> dict:
    """Idle workers (`processes` of them); n no-op jobs committed in one statement;
    the time from that commit to the last completion, both on the database's clock."""
    url = await _fresh(server, system, "drain")
    timeout = timeout or max(120.0, n / 150)
    if system.spawns_processes and processes > 1:
        settings, commands = {**(settings or {}), "processes": str(processes)}, 1
    else:
        commands = processes
    async with contextlib.AsyncExitStack() as stack:
        workers = [await stack.enter_async_context(WorkerProcess(system, url, settings=settings))
                   for _ in range(commands)]
        await asyncio.sleep(0.5)  # let them settle into waiting
        loaded = await run_driver(system, url, "load", "--n", str(n))
        count, seen = await wait_count(url, system.completed_sql, n, timeout)
        last = await pg.fetchval(url, system.last_done_sql)
        stopped = [await worker.stop() for worker in workers]
    elapsed = (last - loaded["committed_at"]) if last else None
    res = {
        "n": n, "completed_in_db": count, "ok": count == n,
        "seconds": elapsed, "rate": n / elapsed if elapsed and count == n else None,
        "seconds_polled": seen - loaded["committed_at"], "processes": processes,
        "settings": workers[0].ready.get("settings", {}), "worker_exit": stopped[0] if commands == 1 else stopped,
    }
    await server.drop_database(url)
    return res


# ---------------------------------------------------------------- latency

async def latency(server: pg.Server, system: System, rate: float, seconds: float,
                  settings: dict[str, str] | None = None) -> dict:
    """Idle workers; a producer submits one job every 1/rate s; each handler notes
    when it started. Enqueue-to-start = handler start - the producer's clock just
    before its enqueue call (same machine, same clock)."""
    url = await _fresh(server, system, "latency")
    res = await latency_on(url, system, rate, seconds, settings)
    await server.drop_database(url)
    return res


async def latency_on(url: str, system: System, rate: float, seconds: float,
                     settings: dict[str, str] | None = None, completed_sql: str | None = None) -> dict:
    """latency() on a database made beforehand (completed_sql counts this run's jobs)."""
    with tempfile.TemporaryDirectory(prefix="bench-lat-") as tmp:
        starts_file = os.path.join(tmp, "starts.json")
        enq_file = os.path.join(tmp, "enqueued.json")
        async with WorkerProcess(system, url, starts=starts_file, settings=settings) as worker:
            await asyncio.sleep(1.0)
            produced = await run_driver(system, url, "produce", "--rate", str(rate), "--seconds", str(seconds),
                                        "--out", enq_file)
            count, _ = await wait_count(url, completed_sql or system.completed_sql, produced["n"], 30)
            await asyncio.sleep(0.2)
            stopped = await worker.stop()
        with open(enq_file) as f:
            enqueued = json.load(f)
        try:
            with open(starts_file) as f:
                started = json.load(f)
        except FileNotFoundError:
            started = {}
    lat = [(started[k] - t) * 1000 for k, t in enqueued.items() if k in started]
    res = {
        "n": produced["n"], "completed_in_db": count, "matched": len(lat),
        "ok": count == produced["n"] and len(lat) == produced["n"],
        "rate": rate, "late_enqueues": produced.get("late", 0),
        "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95), "p99_ms": percentile(lat, 99),
        "max_ms": max(lat) if lat else None, "mean_ms": statistics.fmean(lat) if lat else None,
        "settings": worker.ready.get("settings", {}), "worker_exit": stopped,
    }
    return res


# ---------------------------------------------------------------- depth (jobfeed)

BACKLOG = """
insert into jobfeed.jobs (kind, target, payload, max_attempts, run_after)
select 'noop', $1 || g, jsonb_build_object('i', g), 5, now() + $2::interval
  from generate_series(1, $3) g
"""


async def _depth_case(server: pg.Server, label: str, due: int, future: int, drain_n: int,
                      settings: dict[str, str] | None) -> dict:
    """A warm, idle worker; the backlog committed in one transaction (rows, ANALYZE,
    a wake-up); the time from that commit to the drain_n-th completion of a due
    job, on the database's clock, as in drain()."""
    url = await _fresh(server, JOBFEED, f"depth_{label}")
    warm = min(2_000, drain_n)
    async with WorkerProcess(JOBFEED, url, settings=settings) as worker:
        # Warm-up: the worker's connections opened and statements prepared.
        await run_driver(JOBFEED, url, "load", "--n", str(warm))
        await wait_count(url, JOBFEED.completed_sql, warm, 60)
        conn = await asyncpg.connect(url)
        t0 = time.perf_counter()
        try:
            async with conn.transaction():
                # Loaded paused: the backlog's own WAL (about a gigabyte for
                # 1,000,000 jobs) sets off a checkpoint, taken before the drain.
                await conn.execute("select jobfeed.set_kind_paused('noop', true)")
                if future:
                    await conn.execute(BACKLOG, "f", dt.timedelta(days=1), future)
                await conn.execute(BACKLOG, "d", dt.timedelta(0), due)
                # The planner knows the backlog, as autovacuum would have told it.
                await conn.execute("analyze jobfeed.jobs")
            await conn.execute("checkpoint")
            await conn.execute("select jobfeed.set_kind_paused('noop', false)")  # and a wake-up
            committed = await conn.fetchval("select extract(epoch from clock_timestamp())::float8")
        finally:
            await conn.close()
        load_s = time.perf_counter() - t0
        count, _ = await wait_count(url, JOBFEED.completed_sql, warm + drain_n, max(120.0, drain_n / 100), 0.1)
        await worker.stop()
    conn = await asyncpg.connect(url)
    try:
        nth = await conn.fetchval("select extract(epoch from finished_at)::float8 from jobfeed.jobs "
                                  "where state = 'completed' and target like 'd%' "
                                  "order by finished_at offset $1 - 1 limit 1", drain_n)
        completed = await conn.fetchval("select count(*) from jobfeed.jobs where state = 'completed' "
                                        "and target like 'd%'")
    finally:
        await conn.close()
    seconds = (nth - committed) if nth else None
    res = {"due": due, "future": future, "drain_n": drain_n, "completed_in_db": completed,
           "ok": completed >= drain_n, "load_seconds": load_s, "seconds": seconds,
           "rate": drain_n / seconds if seconds else None}
    await server.drop_database(url)
    return res


KEYED = """
insert into jobfeed.jobs (kind, target, payload, max_attempts, concurrency_key)
select $1, 'k' || g, jsonb_build_object('i', g), 5, case when $3 > 0 then 'key' || (g % $3) end
  from generate_series(1, $2) g
"""


async def _keys_case(server: pg.Server, kind: str, n: int, keys: int, settings: dict[str, str] | None) -> dict:
    """drain() of `kind`: n jobs spread over `keys` concurrency keys (0: none),
    committed in one transaction; commit to last completion on the database's
    clock."""
    url = await _fresh(server, JOBFEED, f"keys_{kind}")
    async with WorkerProcess(JOBFEED, url, settings={**(settings or {}), "kinds": kind}) as worker:
        await asyncio.sleep(0.5)  # let it settle into waiting
        conn = await asyncpg.connect(url)
        try:
            async with conn.transaction():
                await conn.execute(KEYED, kind, n, keys)
                await conn.execute("select pg_notify('jobfeed_due', $1)", kind)
            committed = await conn.fetchval("select extract(epoch from clock_timestamp())::float8")
        finally:
            await conn.close()
        count, _ = await wait_count(url, JOBFEED.completed_sql, n, max(120.0, n / 50))
        last = await pg.fetchval(url, JOBFEED.last_done_sql)
        stopped = await worker.stop()
    seconds = (last - committed) if last else None
    res = {"n": n, "keys": keys, "completed_in_db": count, "ok": count == n, "seconds": seconds,
           "rate": n / seconds if seconds and count == n else None, "worker_exit": stopped}
    await server.drop_database(url)
    return res


async def keys(server: pg.Server, *, n: int, keys: int, settings: dict[str, str] | None = None) -> dict:
    """The drain of n jobs over `keys` keys under max_running_per_key=1
    (bench.jobfeed_tasks' noop_keyed), and of n jobs of the uncapped noop
    kind in the same trial: the cost of the capped claim path."""
    return {
        "uncapped": await _keys_case(server, "noop", n, 0, settings),
        "capped": await _keys_case(server, "noop_keyed", n, keys, settings),
    }


async def depth(server: pg.Server, *, base: int, deep: int, future: int, drain_n: int,
                settings: dict[str, str] | None = None) -> dict:
    """jobfeed's drain rate (drain_n jobs) with `base` jobs queued, with `deep`
    queued, and with `base` queued behind `future` jobs due in a day."""
    return {
        "base": await _depth_case(server, "base", base, 0, drain_n, settings),
        "deep": await _depth_case(server, "deep", deep, 0, drain_n, settings),
        "future": await _depth_case(server, "future", base, future, drain_n, settings),
    }
