"""The bench's kind for jobfeed workers (JOBFEED_TASKS=bench.jobfeed_tasks):
`noop` does nothing. With BENCH_STARTS set it notes when each handler started
(job.payload["i"] -> time.time()) and writes them there when the process exits."""

from __future__ import annotations

import atexit
import json
import os
import time

from jobfeed.worker.tasks import task

_PATH = os.environ.get("BENCH_STARTS")
_STARTS: dict[str, float] = {}


@task("noop", description="does nothing (benchmarks)")
async def noop(job, ctx):
    if _PATH:
        _STARTS[str(job.payload.get("i"))] = time.time()
    return None


def _dump() -> None:
    with open(_PATH, "w") as f:
        json.dump(_STARTS, f)


if _PATH:
    atexit.register(_dump)
