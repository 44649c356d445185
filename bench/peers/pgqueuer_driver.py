"""pgqueuer, in its own virtual environment (bench/.peers/pgqueuer).

Configured as its documentation advises for throughput (docs/guides/performance-
tuning.md): one QueueManager on a dedicated asyncpg connection, `batch_size` 100
(the issue's setting; the docs: raise it for short jobs), no per-process cap on
concurrent tasks, `pgq autovac` applied (fillfactor 70, aggressive autovacuum),
the default durable tables, and uvloop, which its CLI (`pgq run`) uses when
installed. Completed jobs leave the queue table and are logged in pgqueuer_log
with status 'successful': that is what the bench counts."""

from __future__ import annotations

import asyncio
import sys
from datetime import timedelta

import asyncpg
from pgqueuer import AsyncpgDriver, Queries, QueueManager
from pgqueuer.models import Job

from common import COMMIT_STAMP, LOOP, Starts, emit, enqueue_or_produce, parse_settings, parser, run, wait_for_stop
from record import from_env

ENTRYPOINT = "noop"
WORKER_DEFAULTS = {"batch_size": "100", "max_concurrent_tasks": "0", "dequeue_timeout": "30",
                   "heartbeat_timeout": "30"}  # the library's default; the fault bench sets its lease


def payload(i: int) -> bytes:
    return str(i).encode()


async def worker(dsn: str, starts: Starts, settings: dict[str, str]) -> dict:
    cfg = {**WORKER_DEFAULTS, **settings}
    conn = await asyncpg.connect(dsn)
    qm = QueueManager(Queries(AsyncpgDriver(conn)))
    recorder = from_env()  # the fault bench: work, then record the run

    @qm.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        starts.record(job.payload.decode())
        if recorder:
            await recorder.run(int(job.payload.decode()))

    run = asyncio.create_task(qm.run(batch_size=int(cfg["batch_size"]),
                                     max_concurrent_tasks=int(cfg["max_concurrent_tasks"]) or None,
                                     dequeue_timeout=timedelta(seconds=float(cfg["dequeue_timeout"])),
                                     heartbeat_timeout=timedelta(seconds=float(cfg["heartbeat_timeout"]))))
    await asyncio.sleep(0.3)  # verify_structure and LISTEN
    if run.done():
        run.result()
    emit({"ready": True, "settings": {**cfg, "loop": LOOP, "autovac": True, "driver": "AsyncpgDriver"}})
    await asyncio.wait([asyncio.create_task(wait_for_stop()), run], return_when=asyncio.FIRST_COMPLETED)
    qm.shutdown.set()
    await asyncio.wait_for(run, 30)
    await conn.close()
    starts.dump()
    return {"stopped": True}


async def main(argv: list[str]) -> None:
    args = parser(__doc__).parse_args(argv)
    if args.command == "worker":
        emit(await worker(args.dsn, Starts(args.starts), parse_settings(args.set)))
        return
    conn = await asyncpg.connect(args.dsn)
    queries = Queries(AsyncpgDriver(conn))
    if args.command == "setup":
        await queries.install()
        await queries.optimize_autovacuum()
        emit({"ok": True})
    elif args.command == "load":
        async with conn.transaction():
            await queries.enqueue([ENTRYPOINT] * args.n, [payload(i) for i in range(1, args.n + 1)], [0] * args.n)
            committed_at = await conn.fetchval(COMMIT_STAMP)
        emit({"n": args.n, "committed_at": committed_at})
    else:
        async def single(i: int) -> None:
            await queries.enqueue(ENTRYPOINT, payload(i), 0)

        async def many(ids: list[int]) -> None:
            await queries.enqueue([ENTRYPOINT] * len(ids), [payload(i) for i in ids], [0] * len(ids))

        await enqueue_or_produce(args, single, many)
    await conn.close()


if __name__ == "__main__":
    run(main(sys.argv[1:]))
