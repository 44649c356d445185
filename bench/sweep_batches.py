"""The sweeper's batches on a long history: each batch's time as the sweep goes
on, from the oldest expired job every time against from where the last ended.

python -m bench.sweep_batches [--history 3000000] [--expired 1000000] [--batches 1500] [--batch 200]

Plants the history as the history scenario does (`bench.history.plant`: one
INSERT ... SELECT, then VACUUM ANALYZE), once per way, in a database of its own, and deletes
--batches batches of --batch with `jobfeed.delete_finished_v2`: without
`p_after` (every batch from the oldest expired job, stepping over the index
entries of the jobs deleted before it, as until the fortieth round) and with
it (each batch from the last one's end, as the sweeper does). Prints one JSON
object: each way's median batch time at a few points of the sweep, the total,
and the rows deleted (each batch must delete --batch). Runs on its own
embedded PostgreSQL."""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

import asyncpg

from . import pg
from .history import RETENTION_DAYS, plant
from .queue_scenarios import run_driver
from .systems import JOBFEED

SWEEP = f"select deleted, last_finished_at from jobfeed.delete_finished_v2('{RETENTION_DAYS} days', $1, $2)"


async def _sweep(url: str, batches: int, batch: int, keyset: bool) -> dict:
    conn = await asyncpg.connect(url)
    try:
        times, deleted, after = [], 0, None
        for _ in range(batches):
            t0 = time.perf_counter()
            n, last = await conn.fetchrow(SWEEP, batch, after)
            times.append((time.perf_counter() - t0) * 1000)
            deleted += n
            after = last if keyset else None
        marks = sorted({0, batches // 10, batches // 2, max(batches - 10, 0)})
        return {"batch_ms_at": {str(m): round(statistics.median(times[m:m + 10]), 2) for m in marks},
                "total_s": round(sum(times) / 1000, 2), "deleted": deleted, "ok": deleted == batches * batch}
    finally:
        await conn.close()


async def measure(history: int, expired: int, batches: int, batch: int) -> dict:
    out: dict = {"history": history, "expired": expired, "batches": batches, "batch": batch}
    with pg.Server() as server:
        for way, keyset in (("from_the_oldest", False), ("from_the_last_end", True)):
            url = await server.new_database(f"sweep_{way}")
            await run_driver(JOBFEED, url, "setup")
            await plant(url, history, expired)
            out[way] = await _sweep(url, batches, batch, keyset)
            await server.drop_database(url)
    out["ok"] = out["from_the_oldest"]["ok"] and out["from_the_last_end"]["ok"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--history", type=int, default=3_000_000, help="finished jobs planted")
    p.add_argument("--expired", type=int, default=1_000_000, help="of them, past the retention")
    p.add_argument("--batches", type=int, default=1500)
    p.add_argument("--batch", type=int, default=200, help="jobs per batch (the sweeper's own)")
    args = p.parse_args()
    if args.batches * args.batch > args.expired:
        p.error("--batches x --batch must not exceed --expired")
    result = asyncio.run(measure(args.history, args.expired, args.batches, args.batch))
    print(json.dumps(result, indent=1))
    if not result["ok"]:
        raise SystemExit("a batch deleted fewer jobs than asked")


if __name__ == "__main__":
    main()
