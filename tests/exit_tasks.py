"""Handlers that raise an exit (SystemExit, KeyboardInterrupt) in a task they
started themselves, and a steady kind: a worker process must end the first's
attempts only, and go on with the rest (tests/test_runner_stuck.py)."""

import asyncio

from jobfeed import task

EXITS = {"system-exit": SystemExit, "keyboard-interrupt": KeyboardInterrupt}


@task("exits", backoff=(60.0,), jitter=0.0)
async def exits(job, ctx):
    async def dies():
        await asyncio.sleep(0.01)
        raise EXITS[job.target]()

    if job.target == "system-exit":
        asyncio.create_task(dies())  # left to run on its own
        await asyncio.sleep(60)
    else:
        try:
            await asyncio.gather(dies(), asyncio.sleep(60))
        except asyncio.CancelledError:
            pass  # and returns a result: the exit stands all the same
    return {"outlived": "its exit"}


@task("steady", jitter=0.0)
async def steady(job, ctx):
    await asyncio.sleep(job.payload.get("seconds", 0))
    return {"steady": True}
