"""A kind whose handler catches every cancellation and goes on, for ever: what
a worker told to stop must give up on (tests/test_runner_stuck.py)."""

import asyncio

from jobfeed import task


@task("stuck", backoff=(60.0,), jitter=0.0)
async def stuck(job, ctx):
    while True:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass
