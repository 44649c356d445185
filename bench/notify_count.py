"""NOTIFYs per completed job, and claims per job (workers woken for it).

python -m bench.notify_count [--workers 4] [--jobs 200] [--progress 20]

Four worker runners (in one process, each with its own listening connection,
as separate worker processes would have) serve one kind; jobs are submitted
one at a time, 5 ms apart, as single HTTP submissions arrive; each handler
reports progress --progress times over about 0.2 s, then completes. A
listening connection counts every jobfeed_changed and jobfeed_due
notification until the last job is completed; claim calls are counted at the
Queue. Prints one JSON object. Runs on its own embedded PostgreSQL."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time

import asyncpg

from jobfeed.worker import db, migrate
from jobfeed.worker.queue import Queue
from jobfeed.worker.runner import Runner
from jobfeed.worker.tasks import TaskSpec

from . import pg


async def scenario(url: str, workers: int, jobs: int, progress: int) -> dict:
    conn = await asyncpg.connect(url)
    try:
        await migrate.migrate(conn)
    finally:
        await conn.close()
    pool = await db.create_pool(url, min_size=2, max_size=40)
    claims = 0

    class Counting(Queue):
        async def claim(self, *args, **kw):
            nonlocal claims
            claims += 1
            return await super().claim(*args, **kw)

    async def handler(job, ctx):
        for i in range(1, progress + 1):
            await ctx.progress(i, progress)
            await asyncio.sleep(0.2 / max(progress, 1))
        return {"ok": True}

    spec = TaskSpec("count", handler, max_attempts=3, lease=30.0, backoff=(1.0,), jitter=0.0)
    queue = Queue(pool)
    await queue.register_kind("count", max_attempts=3, lease=30.0, backoff=(1.0,), jitter=0.0)
    heard = {"jobfeed_changed": 0, "jobfeed_due": 0}
    listener = await db.connect(url)
    for channel in heard:
        await listener.add_listener(channel, lambda _c, _p, ch, _payload: heard.__setitem__(ch, heard[ch] + 1))
    runners = [Runner(Counting(pool), url, [spec], concurrency=10, poll_interval=5.0, grace=5.0)
               for _ in range(workers)]
    tasks = [asyncio.create_task(r.run()) for r in runners]
    try:
        await asyncio.sleep(2.5)  # every worker listening (and seated, where workers take turns)
        claims = 0
        for channel in heard:
            heard[channel] = 0
        t0 = time.monotonic()
        for i in range(jobs):
            await queue.submit("count", f"t{i}")
            await asyncio.sleep(0.005)
        while await pool.fetchval("select count(*) from jobfeed.jobs where state = 'completed'") < jobs:
            await asyncio.sleep(0.05)
        seconds = time.monotonic() - t0
        await asyncio.sleep(0.3)  # the last notifications arrive
    finally:
        for r in runners:
            r.stop()
        await asyncio.gather(*tasks)
        await listener.close()
        await pool.close()
    return {"workers": workers, "jobs": jobs, "progress_reports_per_job": progress, "seconds": round(seconds, 2),
            "notify_changed_per_job": round(heard["jobfeed_changed"] / jobs, 2),
            "notify_due_per_job": round(heard["jobfeed_due"] / jobs, 2),
            "notify_per_job": round(sum(heard.values()) / jobs, 2),
            "claims_per_job": round(claims / jobs, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--progress", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    with pg.Server() as server:
        async def go():
            url = await server.new_database("notify_count")
            return await scenario(url, args.workers, args.jobs, args.progress)
        print(json.dumps(asyncio.run(go())))


if __name__ == "__main__":
    main()
