"""jobfeed, driven through its public Python API (jobfeed.Queue) and its real
worker process (`jobfeed worker`, JOBFEED_TASKS=bench.jobfeed_tasks).

Runs with jobfeed's own Python (the project's virtual environment)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from common import COMMIT_STAMP, LOOP, emit, enqueue_or_produce, parse_settings, parser, run, wait_for_stop  # noqa: E402

from jobfeed.worker import db, migrate  # noqa: E402
from jobfeed.worker.queue import Queue  # noqa: E402

KIND = "noop"
# Settings of the worker process (overridable with --set key=value).
WORKER_DEFAULTS = {"concurrency": "1000", "poll": "5s", "kinds": KIND, "processes": "1"}

# The same rows submit() makes, written by one statement (loading a backlog, not
# what is measured), then one wake-up for idle workers.
LOAD = """
insert into jobfeed.jobs (kind, target, payload, max_attempts)
select $1, 't' || g, jsonb_build_object('i', g), (select max_attempts from jobfeed.kinds where kind = $1)
  from generate_series(1, $2) g
"""


def target(i: int) -> str:
    return f"t{i}"


async def setup(dsn: str) -> None:
    conn = await db.connect(dsn, name="bench-setup")
    try:
        await migrate.migrate(conn)
    finally:
        await conn.close()
    pool = await db.create_pool(dsn, min_size=1, max_size=1, name="bench-setup")
    try:
        await Queue(pool).register_kind(KIND, max_attempts=5, lease=300, backoff=(60,),
                                        description="does nothing (benchmarks)")
    finally:
        await pool.close()


async def worker(dsn: str, starts: str | None, settings: dict[str, str]) -> dict:
    cfg = {**WORKER_DEFAULTS, **settings}
    env = dict(os.environ, DATABASE_URL=dsn, JOBFEED_TASKS="bench.jobfeed_tasks", PYTHONUNBUFFERED="1",
               JOBFEED_LOG_LEVEL="INFO")
    env.pop("BENCH_STARTS", None)
    if starts:
        env["BENCH_STARTS"] = starts
    args = [sys.executable, "-m", "jobfeed.worker.cli", "worker", "--kinds", cfg["kinds"],
            "--concurrency", cfg["concurrency"], "--poll", cfg["poll"], "--processes", cfg["processes"]]
    proc = await asyncio.create_subprocess_exec(*args, cwd=ROOT, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE)
    ready = asyncio.Event()
    tail: list[str] = []

    async def read() -> None:
        async for raw in proc.stderr:
            line = raw.decode(errors="replace").rstrip()
            tail.append(line)
            del tail[:-40]
            if re.search(r"worker \S+: kinds", line):
                ready.set()

    reader = asyncio.create_task(read())
    waiter = asyncio.create_task(proc.wait())
    await asyncio.wait([asyncio.create_task(ready.wait()), waiter], timeout=60,
                       return_when=asyncio.FIRST_COMPLETED)
    if not ready.is_set():
        if proc.returncode is None:
            proc.kill()
        raise SystemExit("jobfeed worker did not start:\n" + "\n".join(tail))
    emit({"ready": True, "pid": proc.pid, "settings": {"process": "jobfeed worker", **cfg, "loop": LOOP}})
    await asyncio.wait([asyncio.create_task(wait_for_stop()), waiter], return_when=asyncio.FIRST_COMPLETED)
    if proc.returncode is None:
        proc.terminate()
    try:
        code = await asyncio.wait_for(proc.wait(), 60)
    except asyncio.TimeoutError:
        proc.kill()
        code = await proc.wait()
    await reader
    errors = [line for line in tail if " ERROR " in line or "Traceback" in line]
    return {"stopped": True, "exit_code": code, "errors": errors[-5:]}


async def main(argv: list[str]) -> None:
    args = parser(__doc__).parse_args(argv)
    if args.command == "setup":
        await setup(args.dsn)
        emit({"ok": True})
    elif args.command == "worker":
        emit(await worker(args.dsn, args.starts, parse_settings(args.set)))
    elif args.command == "load":
        conn = await db.connect(args.dsn, name="bench-load")
        async with conn.transaction():
            await conn.execute(LOAD, KIND, args.n)
            await conn.execute("select pg_notify('jobfeed_due', $1)", KIND)
            committed_at = await conn.fetchval(COMMIT_STAMP)
        emit({"n": args.n, "committed_at": committed_at})
        await conn.close()
    else:
        # One connection, held, as the raw driver holds its own (a Queue takes a pool
        # or a connection): sequential awaits.
        conn = await db.connect(args.dsn, name="bench-enqueue")
        queue = Queue(conn)

        async def single(i: int) -> None:
            await queue.submit(KIND, target(i), {"i": i})

        async def many(ids: list[int]) -> None:
            await queue.submit_many(KIND, [(target(i), {"i": i}) for i in ids])

        await enqueue_or_produce(args, single, many)
        await conn.close()


if __name__ == "__main__":
    run(main(sys.argv[1:]))
