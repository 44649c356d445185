"""The systems compared, how to run their drivers, and how the bench counts their
jobs in the database (never from their logs).

jobfeed and the raw baseline run with this Python; each peer runs in a virtual
environment of its own under the cache directory (bench/.peers by default,
BENCH_PEERS_DIR to move it), made on first use with the latest releases from PyPI."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import subprocess
import sys
import venv
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
DRIVERS = HERE / "peers"
log = logging.getLogger("bench")


def peers_dir() -> Path:
    return Path(os.environ.get("BENCH_PEERS_DIR") or HERE / ".peers")


@dataclasses.dataclass(frozen=True)
class System:
    name: str
    driver: str                      # file in bench/peers/
    packages: tuple[str, ...] = ()   # a peer: what its venv gets from PyPI (latest releases)
    # SQL on the system's database (bench side, asyncpg):
    completed_sql: str = ""          # -> how many jobs completed
    queued_sql: str = ""             # -> how many jobs wait (after enqueue)
    last_done_sql: str = ""          # -> epoch of the last completion, on the server's clock
    version_module: str = ""         # what to ask for the installed version
    repeat: bool = True              # measured in every trial (False: the first only)
    # Its worker command starts several processes itself (the `processes` setting), as
    # its users would run it; for the others the bench starts that many worker commands.
    spawns_processes: bool = False

    @property
    def is_peer(self) -> bool:
        return bool(self.packages)

    @property
    def venv(self) -> Path:
        return peers_dir() / self.name

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python") if self.is_peer else sys.executable

    def installed(self) -> bool:
        return not self.is_peer or (self.venv / ".bench-ready").exists()

    def ensure(self) -> None:
        """Make the peer's venv if missing (pip from PyPI; once)."""
        if self.installed():
            return
        log.info("installing %s into %s (once)", " ".join(self.packages), self.venv)
        if self.venv.exists():
            import shutil
            shutil.rmtree(self.venv)
        self.venv.parent.mkdir(parents=True, exist_ok=True)
        venv.EnvBuilder(with_pip=True).create(self.venv)
        subprocess.run([self.python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--upgrade", *self.packages], check=True)
        (self.venv / ".bench-ready").write_text(" ".join(self.packages) + "\n")

    def version(self) -> str:
        if not self.version_module:
            return ""
        try:
            out = subprocess.run([self.python, "-c", "import importlib.metadata as m, sys; "
                                  f"print(m.version({self.version_module!r}))"],
                                 capture_output=True, text=True, timeout=60)
            return out.stdout.strip()
        except Exception:
            return ""

    def command(self, dsn: str, *args: str) -> list[str]:
        return [self.python, str(DRIVERS / self.driver), "--dsn", dsn, *args]


JOBFEED = System(
    "jobfeed", "jobfeed_driver.py",
    completed_sql="select count(*) from jobfeed.jobs where state = 'completed'",
    queued_sql="select count(*) from jobfeed.jobs where state = 'queued'",
    last_done_sql="select extract(epoch from max(finished_at))::float8 from jobfeed.jobs where state = 'completed'",
    version_module="jobfeed", spawns_processes=True)
RAW = System(
    "raw", "raw_driver.py",
    completed_sql="select count(*) from raw_jobs where state = 'completed'",
    queued_sql="select count(*) from raw_jobs where state = 'queued'",
    last_done_sql="select extract(epoch from max(finished_at))::float8 from raw_jobs where state = 'completed'")
PGQUEUER = System(
    "pgqueuer", "pgqueuer_driver.py", packages=("pgqueuer", "asyncpg"),
    completed_sql="select count(*) from pgqueuer_log where status = 'successful'",
    queued_sql="select count(*) from pgqueuer where status = 'queued'",
    last_done_sql="select extract(epoch from max(created))::float8 from pgqueuer_log where status = 'successful'",
    version_module="pgqueuer")
PROCRASTINATE = System(
    "procrastinate", "procrastinate_driver.py", packages=("procrastinate", "psycopg[binary]", "psycopg-pool"),
    completed_sql="select count(*) from procrastinate_jobs where status = 'succeeded'",
    queued_sql="select count(*) from procrastinate_jobs where status = 'todo'",
    last_done_sql="select extract(epoch from max(at))::float8 from procrastinate_events where type = 'succeeded'",
    # One trial: its drain of 20,000 jobs takes minutes, and no target is measured against it.
    version_module="procrastinate", repeat=False)

ALL = {s.name: s for s in (JOBFEED, PGQUEUER, PROCRASTINATE, RAW)}


def installed(systems: list[System], errors: dict[str, str]) -> list[System]:
    """The systems that install (a peer's venv made on first use); each other's
    reason goes in errors, and a run goes on without it (no network, say)."""
    usable = []
    for s in systems:
        try:
            s.ensure()
            usable.append(s)
        except Exception as exc:
            errors[s.name] = f"could not install {' '.join(s.packages)}: {exc}"
            log.warning("%s: %s", s.name, errors[s.name])
    return usable


# ---------------------------------------------------------------- running drivers

class DriverError(RuntimeError):
    pass


async def run_driver(system: System, dsn: str, *args: str, timeout: float = 600) -> dict:
    """Run one driver command to its end; its last stdout line is JSON."""
    proc = await asyncio.create_subprocess_exec(
        *system.command(dsn, *args), cwd=ROOT, stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
        raise DriverError(f"{system.name} {' '.join(args)}: no answer in {timeout:.0f}s") from None
    lines = [line for line in out.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        raise DriverError(f"{system.name} {' '.join(args)} failed ({proc.returncode}):\n"
                          f"{err.decode()[-3000:]}")
    return json.loads(lines[-1])


class WorkerProcess:
    """A driver's `worker` command: started, waited for until ready, stopped by SIGTERM."""

    def __init__(self, system: System, dsn: str, *, starts: str | None = None,
                 settings: dict[str, str] | None = None):
        self.system = system
        self.args = ["worker"]
        if starts:
            self.args += ["--starts", starts]
        for key, value in (settings or {}).items():
            self.args += ["--set", f"{key}={value}"]
        self.dsn = dsn
        self.proc: asyncio.subprocess.Process | None = None
        self.ready: dict = {}
        self.result: dict = {}
        self._err: bytearray = bytearray()
        self._err_task: asyncio.Task | None = None

    async def _drain_stderr(self) -> None:
        while chunk := await self.proc.stderr.read(65536):
            self._err += chunk
            del self._err[:-20000]

    async def start(self, timeout: float = 90) -> dict:
        self.proc = await asyncio.create_subprocess_exec(
            *self.system.command(self.dsn, *self.args), cwd=ROOT, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        self._err_task = asyncio.create_task(self._drain_stderr())
        try:
            while True:
                line = await asyncio.wait_for(self.proc.stdout.readline(), timeout)
                if not line:
                    raise DriverError(f"{self.system.name} worker exited:\n{self.stderr}")
                if line.startswith(b"{"):
                    self.ready = json.loads(line)
                    return self.ready
        except asyncio.TimeoutError:
            await self.kill()
            raise DriverError(f"{self.system.name} worker not ready in {timeout:.0f}s:\n{self.stderr}") from None

    @property
    def stderr(self) -> str:
        return self._err.decode(errors="replace")[-3000:]

    async def stop(self, timeout: float = 60) -> dict:
        if self.proc is None:
            return {}
        if self.proc.returncode is None:
            self.proc.terminate()
        try:
            out = await asyncio.wait_for(self.proc.stdout.read(), timeout)
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            await self.kill()
            raise DriverError(f"{self.system.name} worker did not stop in {timeout:.0f}s:\n{self.stderr}") from None
        if self._err_task:
            await self._err_task
        lines = [line for line in out.decode().splitlines() if line.startswith("{")]
        self.result = json.loads(lines[-1]) if lines else {}
        if self.proc.stdin:
            self.proc.stdin.close()
        return self.result

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()

    async def __aenter__(self) -> "WorkerProcess":
        await self.start()
        return self

    async def __aexit__(self, *exc) -> None:
        if exc[0] is not None:
            await self.kill()
        elif self.proc is not None and self.proc.returncode is None:
            await self.stop()
