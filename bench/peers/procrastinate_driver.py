"""procrastinate, in its own virtual environment (bench/.peers/procrastinate).

Configured as its documentation advises for throughput: async tasks and a worker
with `concurrency` sub-workers (docs/howto/production/concurrency: "app.run_worker(
concurrency=30)"; the bench found what suits no-op jobs on 2 cores, see WORKER_DEFAULTS),
LISTEN/NOTIFY on (the default), a psycopg pool large enough for every sub-worker,
finished jobs kept (the default), so the bench counts status 'succeeded'."""

from __future__ import annotations

import asyncio
import logging
import sys

from procrastinate import App, PsycopgConnector

from common import COMMIT_STAMP, LOOP, Starts, emit, enqueue_or_produce, parse_settings, parser, run, wait_for_stop
from record import from_env

WORKER_DEFAULTS = {"concurrency": "30", "fetch_job_polling_interval": "5"}
STARTS = Starts(None)
RECORDER = from_env()  # the fault bench: work, then record the run


def make_app(dsn: str, pool_size: int) -> App:
    app = App(connector=PsycopgConnector(conninfo=dsn, min_size=1, max_size=pool_size))

    @app.task(name="noop", queue="bench")
    async def noop(i: int) -> None:
        STARTS.record(i)
        if RECORDER:
            await RECORDER.run(i)

    return app


async def worker(app: App, settings: dict[str, str]) -> dict:
    cfg = {**WORKER_DEFAULTS, **settings}
    options = {}
    stalled = float(cfg.get("stalled_after", 0))
    if stalled:  # the fault bench: heartbeats and stalled-worker detection at its lease
        options = {"update_heartbeat_interval": stalled / 4, "stalled_worker_timeout": stalled}
    working = asyncio.create_task(app.run_worker_async(
        queues=["bench"], concurrency=int(cfg["concurrency"]), install_signal_handlers=False,
        fetch_job_polling_interval=float(cfg["fetch_job_polling_interval"]), **options))
    rescuer = asyncio.create_task(retry_stalled(app, stalled)) if stalled else None
    await asyncio.sleep(0.3)
    if working.done():
        working.result()
    emit({"ready": True, "settings": {**cfg, "pool_max_size": int(cfg["concurrency"]) + 2,
                                      "listen_notify": True, "loop": LOOP}})
    await asyncio.wait([asyncio.create_task(wait_for_stop()), working], return_when=asyncio.FIRST_COMPLETED)
    if rescuer:
        rescuer.cancel()
    working.cancel()  # procrastinate's documented graceful stop
    try:
        await asyncio.wait_for(working, 30)
    except asyncio.CancelledError:
        pass
    STARTS.dump()
    return {"stopped": True}


async def retry_stalled(app: App, seconds: float) -> None:
    """procrastinate leaves the jobs of a dead worker in `doing`; its documentation
    (howto/production/retry_stalled_jobs) has a periodic task retry them. Here a
    loop in every worker does the same, every half of `seconds`."""
    while True:
        await asyncio.sleep(seconds / 2)
        try:
            for job in await app.job_manager.get_stalled_jobs(seconds_since_heartbeat=seconds):
                await app.job_manager.retry_job(job)
        except Exception as exc:  # the database may be restarting: try again next round
            logging.getLogger("bench").warning("retrying stalled jobs failed: %s", exc)


async def main(argv: list[str]) -> None:
    global STARTS
    args = parser(__doc__).parse_args(argv)
    logging.getLogger("procrastinate").setLevel(logging.WARNING)
    settings = parse_settings(getattr(args, "set", None))
    pool = int({**WORKER_DEFAULTS, **settings}["concurrency"]) + 2 if args.command == "worker" else 1
    app = make_app(args.dsn, pool)
    noop = app.tasks["noop"]
    async with app.open_async():
        if args.command == "setup":
            await app.schema_manager.apply_schema_async()
            emit({"ok": True})
        elif args.command == "worker":
            STARTS = Starts(args.starts)
            emit(await worker(app, settings))
        elif args.command == "load":
            await noop.batch_defer_async(*[{"i": i} for i in range(1, args.n + 1)])
            rows = await app.connector.execute_query_one_async(COMMIT_STAMP + " as t")
            emit({"n": args.n, "committed_at": rows["t"]})
        else:
            async def single(i: int) -> None:
                await noop.defer_async(i=i)

            async def many(ids: list[int]) -> None:
                await noop.batch_defer_async(*[{"i": i} for i in ids])

            await enqueue_or_produce(args, single, many)


if __name__ == "__main__":
    run(main(sys.argv[1:]))
