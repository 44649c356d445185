"""A kind whose handler catches every cancellation and goes on, for ever: what
a worker told to stop must give up on (tests/test_runner_stuck.py)."""

import asyncio

from jobfeed import task
from jobfeed.worker import startup

# A wait at exit longer than the test gives the worker process: tasks given up
# on are not waited for at all (any other would still be, this long).
startup.LEFTOVER_WAIT = 30.0


@task("stuck", backoff=(60.0,), jitter=0.0)
async def stuck(job, ctx):
    while True:
        try:
            await asyncio.sleep(0.05)
        except asyncio.CancelledError:
            pass
