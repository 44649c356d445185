"""deploy/systemd: the units and environment files the README's "Under systemd"
offers, as systemd would use them. Each unit passes `systemd-analyze verify`
with no warning. Each runs its command line with the environment its files
give (in its order, the later file winning), on a new database: the migration,
then the API, a worker set and the sweeper, each as a login role of its own; a
demo job submitted over HTTP completes; the worker serves metrics per child;
and each stops within its TimeoutStopSec on the signal its KillMode sends (the
worker's handlers finish first). Files left as shipped refuse to start, with an
exit code the units do not restart on."""

from __future__ import annotations

import asyncio
import shlex
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import asyncpg
import httpx
import pytest

from conftest import skip_or_fail
from migration_dbs import as_user, empty_db  # noqa: F401  (a fixture)
from servers import Process, free_port, stream_statuses
from waiting import eventually
from jobfeed.worker.run_context import CANCEL_WAIT
from jobfeed.worker.settings import parse_duration

ROOT = Path(__file__).resolve().parent.parent
UNITS = ROOT / "deploy" / "systemd"
BIN = "/opt/jobfeed/bin/jobfeed"  # where the units expect the installed command
ETC = "/etc/jobfeed/"
JOBFEED = Path(sys.executable).parent / "jobfeed"
ROLES = {"api": "jobfeed_api", "worker": "jobfeed_worker", "sweeper": "jobfeed_sweeper"}
ADMIN_TOKEN = "deploy-test-admin-token"
# what systemd counts as a clean stop of a service it sent SIGTERM
CLEAN = (0, -signal.SIGTERM)


def read_unit(name: str) -> dict[str, dict[str, list[str]]]:
    """section -> key -> values in order (a key may repeat, as EnvironmentFile does)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] = {}
    for line in (UNITS / name).read_text().splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            current = sections.setdefault(line.strip("[]"), {})
            continue
        key, _, value = line.partition("=")
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def read_env(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            key, _, value = line.partition("=")
            out[key.strip()] = value.strip()
    return out


class Unit:
    def __init__(self, process: str):
        self.process = process
        self.service = read_unit(f"jobfeed-{process}.service")["Service"]

    def one(self, key: str, default: str | None = None) -> str:
        values = self.service.get(key)
        if not values:
            assert default is not None, f"jobfeed-{self.process}.service sets no {key}"
            return default
        return values[-1]

    def argv(self) -> list[str]:
        argv = shlex.split(self.one("ExecStart"))
        assert argv[0] == BIN, argv
        return [str(JOBFEED), *argv[1:]]

    def env(self, **override: str) -> dict[str, str]:
        """The environment systemd gives the command: its EnvironmentFiles in
        order (each one this folder ships), then the test's own values."""
        env = {"PATH": f"{JOBFEED.parent}:/usr/bin:/bin", "PYTHONUNBUFFERED": "1"}
        for path in self.service["EnvironmentFile"]:
            assert path.startswith(ETC), path
            env |= read_env(UNITS / path.removeprefix(ETC))
        return env | override

    def stop_timeout(self) -> float:
        return parse_duration(self.one("TimeoutStopSec"), "TimeoutStopSec")

    def stop_signal(self) -> signal.Signals:
        return signal.Signals[self.one("KillSignal", "SIGTERM")]


def test_every_unit_passes_systemd_analyze_verify(tmp_path):
    analyze = shutil.which("systemd-analyze")
    skip_or_fail(None if analyze else "systemd-analyze (Debian's systemd)")
    etc = tmp_path / "etc"
    shutil.copytree(UNITS, etc, ignore=shutil.ignore_patterns("*.service"))
    units = []
    for path in sorted(UNITS.glob("*.service")):
        text = path.read_text()
        assert BIN in text and ETC in text, path.name
        # the command and the files where this checkout has them (verify checks both)
        (tmp_path / path.name).write_text(text.replace(BIN, str(JOBFEED)).replace(ETC, f"{etc}/"))
        units.append(str(tmp_path / path.name))
    assert len(units) == 4, units
    out = subprocess.run([analyze, "verify", "--man=no", *units], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not (out.stdout + out.stderr).strip(), out.stdout + out.stderr


def test_each_unit_reads_the_shared_file_then_its_own():
    for process in ("migrate", *ROLES):
        unit = Unit(process)
        assert unit.service["EnvironmentFile"] == [f"{ETC}jobfeed.env", f"{ETC}{process}.env"], process
        # its own file names its database login (the owner's for the migration)
        assert read_env(UNITS / f"{process}.env")["DATABASE_URL"].startswith("postgresql://"), process
    for process, role in ROLES.items():
        assert f"//{role}_login:" in read_env(UNITS / f"{process}.env")["DATABASE_URL"], process


def test_stop_and_restart_settings_fit_jobfeed():
    worker = Unit("worker")
    argv = worker.argv()
    grace = parse_duration(argv[argv.index("--grace") + 1], "--grace")
    # its children get SIGTERM from it alone (KillMode=mixed), and the grace and
    # what follows end before systemd kills: the give-up on handlers that ignore
    # their cancellation, then Runner._shutdown's two 10 s bounds (the tasks'
    # end, the completions' writes)
    assert worker.one("KillMode") == "mixed"
    assert worker.stop_timeout() >= grace + CANCEL_WAIT + 20, (worker.stop_timeout(), grace)
    for process in ("api", "worker", "sweeper"):
        # a setting or the schema wrong (exit 2) is not restarted in a loop
        assert Unit(process).one("RestartPreventExitStatus") == "2"


@pytest.mark.parametrize("process", ["migrate", "api", "worker", "sweeper"])
async def test_files_as_shipped_refuse_to_start(process):
    """An unset admin token (and a placeholder database) never runs: exit 2 names
    the setting, and RestartPreventExitStatus keeps systemd from looping."""
    unit = Unit(process)
    proc = await asyncio.create_subprocess_exec(*unit.argv(), env=unit.env(), stdin=subprocess.DEVNULL,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 2 and b"JOBFEED_ADMIN_TOKEN" in out and b"Traceback" not in out, out.decode()


@pytest.fixture
async def logins(pg_admin_url):
    admin = await asyncpg.connect(pg_admin_url)
    users = {process: f"unit_{process}_{uuid.uuid4().hex[:8]}" for process in ROLES}

    async def create() -> dict[str, str]:  # after the migration, which makes the roles
        for process, user in users.items():
            await admin.execute(f"create role {user} login in role {ROLES[process]}")
        return users

    yield create
    for user in users.values():  # roles are cluster-wide: leave none behind
        await admin.execute(f"drop role if exists {user}")
    await admin.close()


@pytest.mark.timeout(180)
async def test_the_units_commands_run_jobfeed_and_stop_cleanly(empty_db, logins):  # noqa: F811
    # the shipped files as they are (JSON logs among them), but for what this
    # machine names differently
    common = dict(JOBFEED_ADMIN_TOKEN=ADMIN_TOKEN, JOBFEED_TASKS="jobfeed.demo")
    migrate = Unit("migrate")
    done = subprocess.run(migrate.argv(), env=migrate.env(DATABASE_URL=empty_db, **common), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("applied: "), done.stdout + done.stderr
    users = await logins()

    port, metrics = free_port(), free_port()
    units = {process: Unit(process) for process in ROLES}
    extra = {"api": {"JOBFEED_PORT": str(port)}, "worker": {"JOBFEED_METRICS_PORT": str(metrics)},
             "sweeper": {"JOBFEED_METRICS_PORT": str(free_port())}}
    procs = {process: Process(unit.argv(), unit.env(DATABASE_URL=as_user(empty_db, users[process]),
                                                    **common, **extra[process]))
             for process, unit in units.items()}
    await procs["api"].start(ready=r"Uvicorn running on")
    await procs["worker"].start(ready=r"worker: \d+ processes")
    await procs["sweeper"].start()
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            assert (await http.get("/readyz")).status_code == 200
            quick = await http.post("/api/jobs", json={"kind": "demo", "target": "quick",
                                                       "payload": {"steps": 2, "step_ms": 20}})
            assert quick.status_code == 201, quick.text
            statuses = await stream_statuses(http, quick.json()["id"])
            assert statuses[-1] == "completed", statuses
            # each of the worker's children serves its own metrics (port + i)
            children = int(units["worker"].argv()[units["worker"].argv().index("--processes") + 1])
            async def scraped(i: int) -> httpx.Response | None:
                try:
                    return await http.get(f"http://127.0.0.1:{metrics + i}/metrics")
                except httpx.ConnectError:  # that child may still be starting: another ran the job
                    return None

            for i in range(children):
                got = await eventually(lambda i=i: scraped(i), timeout=30, what=f"child {i}'s metrics")
                assert got.status_code == 200 and "jobfeed_" in got.text, (i, got.status_code, procs["worker"].log)

            # A job under way when the worker is stopped finishes within the
            # grace: no job is left to wait out its lease after a deploy.
            slow = await http.post("/api/jobs", json={"kind": "demo", "target": "slow",
                                                      "payload": {"steps": 10, "step_ms": 150}})
            slow_id = slow.json()["id"]
            for _ in range(100):
                if (await http.get(f"/api/jobs/{slow_id}")).json()["status"] == "processing":
                    break
                await asyncio.sleep(0.05)
            worker = procs["worker"]
            worker.proc.send_signal(units["worker"].stop_signal())  # to the parent alone (KillMode=mixed)
            code = await asyncio.wait_for(worker.proc.wait(), units["worker"].stop_timeout())
            assert code == 0, worker.log
            assert (await http.get(f"/api/jobs/{slow_id}")).json()["status"] == "completed", worker.log
    finally:
        codes = {}
        for process, proc in procs.items():
            if proc.proc is not None:
                codes[process] = await proc.stop(timeout=units[process].stop_timeout())
    for process, code in codes.items():
        assert code in CLEAN, f"{process} exited {code}:\n{procs[process].log}"
        assert "Traceback" not in procs[process].log, procs[process].log
