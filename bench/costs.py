"""Per-job costs for docs/scaling.md's capacity model, on an embedded PostgreSQL
of its own: for each step (submit one at a time, submit_many, claim + complete
in batches, the sweeper's delete once the jobs are past the retention) the
database backend's CPU (its process's CPU time), the WAL bytes
(pg_current_wal_lsn before and after), the NOTIFYs a listener receives, the
round trips (calls made) and this Python process's CPU. Then a drain by a real
`jobfeed worker` process (concurrency 1,000, as the bench's): its CPU per job,
its database connections' CPU per job, and the whole server's.

python -m bench.costs [--n 2000] [--batch 100] [--drain-n 40000]"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import sys
import time

import psutil

from jobfeed.worker import db, migrate
from jobfeed.worker.queue import Queue
from jobfeed.worker.settings import Settings
from jobfeed.worker.sweeper import Sweeper

from . import pg
from .systems import ROOT

# The drain's jobs, committed in one statement (not measured apart: the server's
# total includes it; the worker's connections' figure does not).
LOAD = """insert into jobfeed.jobs (kind, target, payload, max_attempts)
select 'noop', 'd' || g, jsonb_build_object('i', g), 5 from generate_series(1, $1::int) g"""


def _cpu(proc: psutil.Process) -> float:
    try:
        times = proc.cpu_times()
        return times.user + times.system
    except psutil.NoSuchProcess:
        return 0.0  # a backend that ended meanwhile (autovacuum): its time is lost, not wrong


def _server_cpu(server: pg.Server) -> dict[int, float]:
    """CPU seconds so far of this server's processes (the postmaster's children), by pid."""
    assert server.data is not None
    postmaster = psutil.Process(int((server.data / "postmaster.pid").read_text().split()[0]))
    return {p.pid: _cpu(p) for p in postmaster.children()}


async def measure_drain(server: pg.Server, n: int) -> dict:
    """A real worker process drains n jobs: CPU per job of the worker, of the
    database backends serving it, and of the whole server. Backends that start
    during the drain (a pool growing) count from zero."""
    url = await server.new_database("costs_drain")
    conn = await db.connect(url, name="bench-costs")
    await migrate.migrate(conn)
    await Queue(conn).register_kind("noop", max_attempts=5, lease=300, backoff=(60,))
    env = dict(os.environ, DATABASE_URL=url, JOBFEED_TASKS="bench.jobfeed_tasks", JOBFEED_LOG_LEVEL="WARNING")
    worker = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "jobfeed.worker.cli", "worker", "--kinds", "noop", "--concurrency", "1000",
        cwd=ROOT, env=env, stdin=asyncio.subprocess.DEVNULL)

    async def waiting_for(sql: str, until) -> None:
        while not until(await conn.fetchval(sql)):
            if worker.returncode is not None:
                raise RuntimeError(f"the worker exited ({worker.returncode})")
            await asyncio.sleep(0.05)

    try:
        await waiting_for("select count(*) from jobfeed.workers", lambda seen: seen > 0)
        await asyncio.sleep(0.5)  # settled into waiting
        proc = psutil.Process(worker.pid)
        cpu0, db0, t0 = _cpu(proc), _server_cpu(server), time.perf_counter()
        await conn.execute(LOAD, n)
        await conn.execute("select pg_notify('jobfeed_due', 'noop')")
        await waiting_for("select count(*) from jobfeed.jobs where state = 'completed'", lambda done: done >= n)
        cpu1, db1, t1 = _cpu(proc), _server_cpu(server), time.perf_counter()
        serving = await conn.fetchval(
            "select array_agg(pid) from pg_stat_activity where application_name like 'jobfeed-worker%'")
    finally:
        if worker.returncode is None:
            worker.terminate()
        await worker.wait()
        await conn.close()
    used = {pid: seconds - db0.get(pid, 0.0) for pid, seconds in db1.items()}
    per_job = lambda seconds: seconds * 1e6 / n  # noqa: E731
    return {"n": n, "worker_cpu_us": per_job(cpu1 - cpu0),
            "worker_connections_db_cpu_us": per_job(sum(used.get(pid, 0.0) for pid in serving)),
            "server_cpu_us": per_job(sum(used.values())), "wall_us": per_job(t1 - t0)}


async def measure(n: int, batch: int, drain_n: int) -> dict:
    with pg.Server() as server:
        url = await server.new_database("costs")
        conn = await db.connect(url, name="bench-costs")
        await migrate.migrate(conn)
        queue = Queue(conn)
        await queue.register_kind("noop", max_attempts=5, lease=300, backoff=(60,))
        listener = await db.connect(url, name="bench-costs-listen")
        heard = {"jobfeed_changed": 0, "jobfeed_due": 0}
        for channel in heard:
            await listener.add_listener(channel, lambda _c, _p, ch, _x, channel=channel: heard.__setitem__(
                channel, heard[channel] + 1))
        backend = psutil.Process(await conn.fetchval("select pg_backend_pid()"))
        out = {}

        async def step(name: str, run, calls: int) -> None:
            await asyncio.sleep(0.3)
            for k in heard:
                heard[k] = 0
            lsn0 = await conn.fetchval("select pg_current_wal_lsn()")
            cpu0, db0 = time.process_time(), sum(backend.cpu_times()[:2])
            await run()
            cpu1, db1 = time.process_time(), sum(backend.cpu_times()[:2])
            wal = await conn.fetchval("select pg_wal_lsn_diff(pg_current_wal_lsn(), $1)::bigint", lsn0)
            await asyncio.sleep(0.3)  # the last notifications arrive
            out[name] = {"db_cpu_us": (db1 - db0) * 1e6 / n, "python_cpu_us": (cpu1 - cpu0) * 1e6 / n,
                         "wal_bytes": wal / n, "notifies": {k: v / n for k, v in heard.items()},
                         "round_trips": calls / n}

        async def single() -> None:
            for i in range(n):
                await queue.submit("noop", f"s{i}", {"i": i})

        async def many() -> None:
            for i in range(0, n, batch):
                await queue.submit_many("noop", [(f"m{j}", {"i": j}) for j in range(i, min(n, i + batch))])

        claimed_calls = [0]

        async def claim_complete() -> None:
            while jobs := await queue.claim(["noop"], batch, "costs"):
                await queue.complete_many([(j.id, j.generation, None) for j in jobs])
                claimed_calls[0] += 2

        await step("submit", single, n)
        await step("submit_many", many, -(-n // batch))
        # The queue now holds 2n jobs: claim and complete n of them per measured step.
        await conn.execute("delete from jobfeed.jobs where target like 'm%'")
        await step("claim_complete", claim_complete, 0)
        out["claim_complete"]["round_trips"] = claimed_calls[0] / n

        # Those n completed jobs, moved past the retention (untimed, and vacuumed
        # after), then deleted as the sweeper deletes: its call, its batch size.
        retention = Settings().retention
        await conn.execute("update jobfeed.jobs set finished_at = finished_at - $1::interval where state = 'completed'",
                           dt.timedelta(seconds=retention + 86400))
        await conn.execute("vacuum jobfeed.jobs")
        swept = {"jobs": 0, "calls": 0}

        async def sweep() -> None:
            while True:
                got = await queue.delete_finished(retention, Sweeper.BATCH)
                swept["jobs"] += got
                swept["calls"] += 1
                if got < Sweeper.BATCH:
                    return

        await step("sweep", sweep, 0)
        if swept["jobs"] != n:
            raise RuntimeError(f"the sweep deleted {swept['jobs']} of the {n} completed jobs")
        out["sweep"]["round_trips"] = swept["calls"] / n
        await listener.close()
        await conn.close()
        out["n"], out["batch"] = n, batch
        out["drain"] = await measure_drain(server, drain_n)
        return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--drain-n", type=int, default=40_000)
    args = p.parse_args()
    print(json.dumps(asyncio.run(measure(args.n, args.batch, args.drain_n)), indent=1))


if __name__ == "__main__":
    main()
