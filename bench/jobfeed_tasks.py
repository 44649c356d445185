"""The bench's kind for jobfeed workers (JOBFEED_TASKS=bench.jobfeed_tasks):
`noop` does nothing (for the fault bench, with BENCH_RECORD_DSN set, it works
BENCH_WORK_MS and records its run: bench/peers/record.py). With BENCH_STARTS set it notes when each handler started
(job.payload["i"] -> time.time()) and adds them to that file when the process exits."""

from __future__ import annotations

import atexit
import fcntl
import json
import os
import time

from bench.peers.record import from_env
from jobfeed.worker.tasks import task

_PATH = os.environ.get("BENCH_STARTS")
_STARTS: dict[str, float] = {}
_RECORDER = from_env()  # the fault bench (BENCH_RECORD_DSN): work, then record the run


@task("noop", description="does nothing (benchmarks)")
async def noop(job, ctx):
    if _PATH:
        _STARTS[str(job.payload.get("i"))] = time.time()
    if _RECORDER:
        await _RECORDER.run(job.payload["i"])
    return None


# The keys scenario: noop, one running job per concurrency_key at most.
task("noop_keyed", description="does nothing, one at a time per key (benchmarks)", max_running_per_key=1)(noop)


def _dump() -> None:
    """Merged into what other worker processes (--processes) wrote there."""
    with open(_PATH, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        text = f.read()
        f.seek(0)
        f.truncate()
        json.dump({**(json.loads(text) if text else {}), **_STARTS}, f)


if _PATH:
    atexit.register(_dump)
