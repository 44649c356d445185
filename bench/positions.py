"""The feed's queue-position refresh, on an embedded PostgreSQL of its own: a
line of --line due jobs of one kind, --watched of them watched (spread over
the line, as open job pages would be), and the one refresh query the API runs
every 2 s for all of them (Queue.positions, in chunks of the feed's
REREAD_CHUNK). Prints the median and worst wall time of --rounds rounds, the
database backend's CPU per round, the median time of one job's read (its
position counted on its own) at the line's front, middle and back, the
median refresh of three watched jobs there and of five and of fifty at the
front, and whether every position came out exact.

python -m bench.positions [--line 20000] [--watched 10000] [--rounds 10]"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import psutil

from jobfeed.api.feed import REREAD_CHUNK
from jobfeed.worker import db, migrate
from jobfeed.worker.queue import Queue

from . import pg


async def measure(line: int, watched: int, rounds: int) -> dict:
    with pg.Server() as server:
        url = await server.new_database("positions")
        conn = await db.connect(url, name="bench-positions")
        await migrate.migrate(conn)
        queue = Queue(conn)
        await queue.register_kind("noop", max_attempts=5, lease=300, backoff=(60,))
        ids = []
        for start in range(0, line, 1000):
            made = await queue.submit_many("noop", [(f"t{n}", None) for n in range(start, min(line, start + 1000))])
            ids += sorted(job_id for job_id, _ in made)  # one run_after per batch: the id orders it
        await conn.execute("analyze jobfeed.jobs")
        step = max(1, line // watched)
        chosen = [str(i) for i in ids[::step][:watched]]
        backend = psutil.Process(await conn.fetchval("select pg_backend_pid()"))
        walls, cpus, exact = [], [], True
        for _ in range(rounds):
            cpu0 = sum(backend.cpu_times()[:2])
            t0 = time.perf_counter()
            got: dict[str, int] = {}
            for start in range(0, len(chosen), REREAD_CHUNK):
                got.update(await queue.positions(chosen[start:start + REREAD_CHUNK]))
            walls.append(time.perf_counter() - t0)
            cpus.append(sum(backend.cpu_times()[:2]) - cpu0)
            exact = exact and got == {c: n * step for n, c in enumerate(chosen)}
        places = {"front": 0, "middle": line // 2, "back": line - 1}
        single = {}  # one job's answer (GET /api/jobs/{id}) counts its own position
        for where, n in places.items():
            ms, views = await _timed(rounds * 3, lambda n=n: queue.get_job(ids[n]))
            single[f"get_job_{where}_ms"] = ms
            exact = exact and all(v is not None and v["position"] == n for v in views)
        # three pages open: the refresh counts each on its own
        ms, answers = await _timed(rounds * 3, lambda: queue.positions([ids[n] for n in places.values()]))
        single["refresh_of_3_ms"] = ms
        exact = exact and all(a == {str(ids[n]): n for n in places.values()} for a in answers)
        # five pages open at the front: one walk, which ends at the last of them
        ms, answers = await _timed(rounds * 3, lambda: queue.positions(ids[:5]))
        single["refresh_of_5_at_front_ms"] = ms
        exact = exact and all(a == {str(ids[n]): n for n in range(5)} for a in answers)
        # fifty at the front (the first page of a burst, say): the walk ends at the last of them too
        ms, answers = await _timed(rounds * 3, lambda: queue.positions(ids[:50]))
        single["refresh_of_50_at_front_ms"] = ms
        exact = exact and all(a == {str(ids[n]): n for n in range(50)} for a in answers)
        async with conn.transaction():  # the walk's own statements count in the transaction's index scans
            await queue.positions(chosen[:REREAD_CHUNK])
            claim_index_scans = await conn.fetchval(
                "select pg_stat_get_xact_numscans('jobfeed.jobs_queued_priority'::regclass)")
        await conn.close()
        return {"line": line, "watched": len(chosen), "rounds": rounds, "queries_per_round": -(-len(chosen) // REREAD_CHUNK),
                "median_ms": statistics.median(walls) * 1000, "worst_ms": max(walls) * 1000,
                "db_cpu_ms_per_round": statistics.median(cpus) * 1000, "exact": exact,
                "uses_claim_index": claim_index_scans > 0, **single}


async def _timed(times: int, call) -> tuple[float, list]:
    """The median wall time of `times` awaited calls, in ms, and their answers."""
    walls, answers = [], []
    for _ in range(times):
        t0 = time.perf_counter()
        answers.append(await call())
        walls.append(time.perf_counter() - t0)
    return statistics.median(walls) * 1000, answers


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--line", type=int, default=20000)
    p.add_argument("--watched", type=int, default=10000)
    p.add_argument("--rounds", type=int, default=10)
    args = p.parse_args()
    print(json.dumps(asyncio.run(measure(args.line, args.watched, args.rounds)), indent=1))


if __name__ == "__main__":
    main()
