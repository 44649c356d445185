"""`jobfeed worker --processes N`: N worker processes under one parent, so a
machine's cores all run handlers (one Python process runs on one core).

Each child is a whole `jobfeed worker` with the same flags: its own worker id,
pool, LISTEN connection and `--concurrency` slots. The parent runs no jobs. A
signal to it stops every child gracefully (each with its own grace), and a
child outliving its parent gets SIGTERM from the kernel (Linux), so no worker
runs unsupervised. A child that fails makes the parent stop the others and exit
non-zero: the process manager restarts the whole set, and no child keeps running
beside a broken sibling. With JOBFEED_METRICS_PORT, child i serves /metrics on
that port + i."""

from __future__ import annotations

import asyncio
import ctypes
import logging
import os
import signal
import sys
from typing import Callable

from .settings import Settings
from .startup import on_signals

log = logging.getLogger("jobfeed.worker")

_PR_SET_PDEATHSIG = 1


def _die_with(parent: int) -> Callable[[], None]:
    """What runs in the child before exec: SIGTERM it when the parent dies (a
    parent already gone by then is seen by the pid check: no signal would come)."""
    def run() -> None:
        if sys.platform.startswith("linux"):
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
            if os.getppid() != parent:
                os.kill(os.getpid(), signal.SIGTERM)
    return run


def child_command(args) -> list[str]:
    """The command line of one child: the parent's own, one process (argparse
    keeps the last --processes), so every flag reaches the children as given."""
    return [sys.executable, "-m", "jobfeed.worker.cli", *args.argv, "--processes", "1"]


def _exit_code(returncode: int) -> int:
    return returncode if returncode > 0 else 1  # killed by a signal: a failure all the same


async def supervise(settings: Settings, args, dsn: str) -> int:
    """Run args.processes children until they end or a signal stops them; the
    first failing child's exit code, else 0."""
    command = child_command(args)
    children: list[asyncio.subprocess.Process] = []
    for i in range(args.processes):
        env = dict(os.environ, DATABASE_URL=dsn)
        if settings.metrics_port is not None:
            env["JOBFEED_METRICS_PORT"] = str(settings.metrics_port + i)
        children.append(await asyncio.create_subprocess_exec(*command, env=env, preexec_fn=_die_with(os.getpid())))
    log.info("worker: %d processes (%s)", len(children), ", ".join(str(c.pid) for c in children))
    stopping = False

    def stop() -> None:
        nonlocal stopping
        stopping = True
        for child in children:
            if child.returncode is None:
                child.send_signal(signal.SIGTERM)

    on_signals(stop)
    result = 0
    waits = {asyncio.ensure_future(c.wait()): c for c in children}
    while waits:
        done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for finished in done:
            child, code = waits.pop(finished), finished.result()
            if code != 0 and not stopping:
                log.error("worker process %d exited with %s; stopping the others", child.pid, code)
                result = _exit_code(code)
                stop()
            elif code not in (0, -signal.SIGTERM) and result == 0:
                result = _exit_code(code)
    return result
