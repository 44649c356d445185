"""`jobfeed up`: embedded database, migrations, API, UI, workers and sweeper from
one command; prints the URL and the admin token; stops cleanly on SIGTERM and
comes back with its jobs and token."""

from __future__ import annotations

import os
import stat
import sys

import httpx
import pytest

from conftest import server_running
from servers import Process, free_port
from waiting import eventually

pytestmark = pytest.mark.full  # starts its own PostgreSQL


def up_process(data_dir: str, port: int, *args: str) -> Process:
    env = {k: v for k, v in os.environ.items() if not k.startswith("JOBFEED_") and k != "DATABASE_URL"}
    env.update({"JOBFEED_DATA_DIR": data_dir, "JOBFEED_PORT": str(port), "JOBFEED_BACKOFF": "200ms",
                "JOBFEED_LEASE": "2s", "PYTHONUNBUFFERED": "1"})
    return Process([sys.executable, "-m", "jobfeed.worker.cli", "up", "--grace", "1s", *args], env)


async def test_up_runs_everything_and_keeps_state_across_restarts(data_dir):
    port = free_port()
    proc = await up_process(data_dir, port).start(ready=r"jobfeed is up: (http://\S+/)")
    try:
        url = proc.match.group(1)
        assert url == f"http://127.0.0.1:{port}/"
        printed = next(line for line in proc.output if "token:" in line).split("token:")[1].strip()
        token_file = os.path.join(data_dir, "admin_token")
        assert open(token_file).read().strip() == printed
        assert stat.S_IMODE(os.stat(token_file).st_mode) == 0o600

        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            assert (await client.get("/")).status_code == 200
            assert (await client.get("/readyz")).status_code == 200
            created = await client.post("/api/jobs", json={
                "kind": "demo", "target": "up-1", "payload": {"steps": 2, "step_ms": 20, "fail": ["transient"]}})
            assert created.status_code == 201, created.text
            job_url = created.headers["location"]
            seen = set()

            async def finished():
                view = (await client.get(job_url)).json()
                seen.add(view["status"])
                return view if view["status"] in ("completed", "failed") else None

            view = await eventually(finished, what="the job to finish")
            assert view["status"] == "completed" and "failed" not in seen
            stats = await client.get("/api/admin/stats", headers={"Authorization": f"Bearer {printed}"})
            assert stats.status_code == 200 and stats.json()["counts"]["demo"]["completed"] == 1
    finally:
        code = await proc.stop(timeout=15)
    assert code == 0, proc.log

    # port 0 ("any free port"): the URL printed names the port it got; on every interface
    # (0.0.0.0), an address a browser can open, not 0.0.0.0 (a black-box pass)
    again = await up_process(data_dir, port, "--port", "0", "--host", "0.0.0.0").start(
        ready=r"jobfeed is up: http://127.0.0.1:(\d+)/")
    try:
        assert any(printed in line for line in again.output), "the token is kept in the data folder"
        given = int(again.match.group(1))
        assert given != 0
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{given}", timeout=10) as client:
            assert (await client.get(job_url)).json()["status"] == "completed"
    finally:
        assert await again.stop(timeout=15) == 0, again.log


async def test_up_runs_on_a_data_folder_whose_path_has_a_space(data_dir):
    # pg_ctl hands the socket folder to a shell unquoted: it is put where no space is
    spaced = os.path.join(data_dir, "my data")
    proc = await up_process(spaced, free_port()).start(ready=r"jobfeed is up: (http://\S+/)")
    try:
        async with httpx.AsyncClient(base_url=proc.match.group(1), timeout=10) as client:
            assert (await client.get("/readyz")).status_code == 200
        assert server_running(spaced)
    finally:
        code = await proc.stop(timeout=15)
    assert code == 0, proc.log
    assert not server_running(spaced), "the server is let go as jobfeed stops"
