"""What every driver shares. A driver is a script run by the Python of the system
it drives (a peer's own virtual environment, or jobfeed's), so this file uses the
standard library only and imports nothing from bench/.

    python X_driver.py --dsn DSN setup
    python X_driver.py --dsn DSN enqueue --mode single|batch --n N [--batch B]
    python X_driver.py --dsn DSN load --n N
    python X_driver.py --dsn DSN worker [--starts FILE] [--set key=value ...]
    python X_driver.py --dsn DSN produce --rate R --seconds S --out FILE

Each command prints one JSON line on stdout (the worker prints {"ready": ...}
once it waits for jobs, and stops on SIGTERM or when stdin closes). Jobs are
no-ops; job n carries n (as its target, payload or argument) so the latency
scenario can match the producer's clock with the handler's."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import stat
import sys
import time
from typing import Awaitable, Callable


try:  # every driver's event loop (see run)
    import uvloop
except ImportError:
    uvloop = None
LOOP = "uvloop" if uvloop is not None else "asyncio"  # what run() runs on, for the settings a driver reports


# The load's commit time on the server's clock for `load`: read as the last
# statement of the loading transaction, so that no worker can have seen a job
# before it (read after the commit, a drain of a few hundred jobs could end
# first and be timed below zero). A driver whose library commits on a
# connection of its own reads it just after.
COMMIT_STAMP = "select extract(epoch from clock_timestamp())::float8"


def run(coro) -> None:
    """A driver's event loop: uvloop where its Python has it (pgqueuer's CLI runs
    on it, so do jobfeed's processes, and uvicorn picks it for a web app that
    submits), else asyncio's own. The same loop for every system, so that a
    comparison of two queues is not one of two event loops."""
    (uvloop.run if uvloop is not None else asyncio.run)(coro)


def emit(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


class Starts:
    """Handler start times, job key -> time.time(), written as JSON at the end."""

    def __init__(self, path: str | None):
        self.path = path
        self.times: dict[str, float] = {}

    def record(self, key) -> None:
        if self.path:
            self.times[str(key)] = time.time()

    def dump(self) -> None:
        if self.path:
            with open(self.path, "w") as f:
                json.dump(self.times, f)


def parse_settings(items: list[str] | None) -> dict[str, str]:
    out = {}
    for item in items or []:
        key, _, value = item.partition("=")
        out[key.strip()] = value.strip()
    return out


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--dsn", required=True)
    sub = p.add_subparsers(dest="command", required=True)
    sub.add_parser("setup")
    e = sub.add_parser("enqueue")
    e.add_argument("--mode", choices=["single", "batch"], required=True)
    e.add_argument("--n", type=int, required=True)
    e.add_argument("--batch", type=int, default=1000)
    ld = sub.add_parser("load")
    ld.add_argument("--n", type=int, required=True)
    w = sub.add_parser("worker")
    w.add_argument("--starts", help="file for the handlers' start times (latency)")
    w.add_argument("--set", action="append", help="a worker setting, key=value")
    pr = sub.add_parser("produce")
    pr.add_argument("--rate", type=float, required=True)
    pr.add_argument("--seconds", type=float, required=True)
    pr.add_argument("--out", required=True)
    return p


async def timed_enqueue(n: int, batch: int, mode: str,
                        single: Callable[[int], Awaitable[None]],
                        many: Callable[[list[int]], Awaitable[None]]) -> dict:
    """Jobs 1..n, one await at a time (single) or `batch` per call."""
    start = time.perf_counter()
    if mode == "single":
        for i in range(1, n + 1):
            await single(i)
    else:
        for lo in range(1, n + 1, batch):
            await many(list(range(lo, min(lo + batch, n + 1))))
    seconds = time.perf_counter() - start
    return {"n": n, "mode": mode, "batch": batch if mode == "batch" else 1, "seconds": seconds,
            "rate": n / seconds if seconds > 0 else None}


async def produce(rate: float, seconds: float, out: str, single: Callable[[int], Awaitable[None]]) -> dict:
    """Enqueue one job every 1/rate s, steadily (no catching up in bursts beyond
    the schedule), recording the clock just before each enqueue call."""
    n = max(int(rate * seconds), 1)
    times: dict[str, float] = {}
    interval = 1.0 / rate
    t0 = time.perf_counter() + 0.05
    late = 0
    for i in range(1, n + 1):
        due = t0 + (i - 1) * interval
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        elif delay < -interval:
            late += 1
        times[str(i)] = time.time()
        await single(i)
    with open(out, "w") as f:
        json.dump(times, f)
    return {"n": n, "rate": rate, "late": late, "seconds": time.perf_counter() - t0}


async def enqueue_or_produce(args, single: Callable[[int], Awaitable[None]],
                             many: Callable[[list[int]], Awaitable[None]]) -> None:
    """The `enqueue` and `produce` commands, given how a system enqueues one job
    and many."""
    if args.command == "enqueue":
        emit(await timed_enqueue(args.n, args.batch, args.mode, single, many))
    else:
        emit(await produce(args.rate, args.seconds, args.out, single))


async def wait_for_stop() -> None:
    """Until SIGTERM/SIGINT, or until stdin closes (the bench died)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    # The bench holds our stdin open as a pipe: it closing means the bench is gone.
    if stat.S_ISFIFO(os.fstat(0).st_mode):
        def on_stdin() -> None:
            try:
                data = os.read(0, 1024)
            except OSError:
                data = b""
            if not data:
                loop.remove_reader(0)
                stop.set()
        loop.add_reader(0, on_stdin)
    await stop.wait()
