"""`jobfeed worker --processes N`: children that share the work, stop with
their parent (by signal, or when it dies), and a child's failure that stops
the set."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess

import httpx
import pytest

from conftest import JOBFEED, path_with_tests, worker_env
from queue_sql import ATTEMPTS
from waiting import eventually, wait_state


def start(dsn: str, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(JOBFEED + ["worker", "--processes", "2", *args], env=worker_env(dsn, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc: subprocess.Popen, timeout: float = 15) -> str:
    """Wait for the process to exit (killed past timeout); its output."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
    return proc.communicate(timeout=10)[0]


def gone(pid: int) -> bool:
    """Exited (a zombie waiting for its reaper counts: it runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


async def children(pool, n: int = 2) -> list[int]:
    """The pids of the n worker processes, once each has signed in."""
    ids = await eventually(lambda: _signed_in(pool, n), timeout=30, what=f"{n} workers signed in")
    return sorted(int(worker_id.split(":")[1]) for worker_id in ids)


async def _signed_in(pool, n: int) -> list[str] | None:
    ids = [r["id"] for r in await pool.fetch("select id from jobfeed.workers")]
    return ids if len(ids) == n else None


@pytest.fixture(autouse=True)
async def _demo(demo_kind):
    """The demo kind, registered before the workers start."""


async def test_two_processes_share_the_jobs_and_stop_together(dsn, queue, pool):
    proc = start(dsn, "--kinds", "demo", "--concurrency", "2", "--poll", "200ms")
    out = ""
    try:
        pids = await children(pool)
        assert proc.pid not in pids and len(set(pids)) == 2
        # Four at once take both processes' slots (two each).
        ids = [(await queue.submit("demo", f"p{i}", {"steps": 4, "step_ms": 100}))[0] for i in range(8)]
        for job_id in ids:
            await wait_state(pool, job_id, "completed", timeout=30)
        ran = await pool.fetchval(f"select count(distinct worker_id) from {ATTEMPTS} a where job_id = any($1)",
                                  ids)
        assert ran == 2
        proc.send_signal(signal.SIGTERM)
        out = finish(proc)
    finally:
        out = finish(proc, 0) if proc.returncode is None else out
    assert proc.returncode == 0, out
    assert all(gone(pid) for pid in pids), out
    # each child stopped gracefully: it signed off
    assert await pool.fetchval("select count(*) from jobfeed.workers") == 0, out


async def test_children_stop_when_their_parent_is_killed(dsn, pool):
    proc = start(dsn, "--kinds", "demo")
    pids: list[int] = []
    try:
        pids = await children(pool)
        proc.kill()
        proc.wait(timeout=5)
        # the kernel's SIGTERM: each child stops as a signalled worker does, and signs off
        await eventually(lambda: _none_signed_in(pool), timeout=20, what="children signed off")
        await eventually(lambda: _all_gone(pids), timeout=20, what="children exited")
    finally:
        for pid in pids:  # orphans, when this fails (first: they hold the output pipe open)
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)
        finish(proc, 0)


async def _none_signed_in(pool) -> bool:
    return await pool.fetchval("select count(*) = 0 from jobfeed.workers")


async def _all_gone(pids: list[int]) -> bool:
    return all(gone(pid) for pid in pids)


async def test_a_child_that_dies_stops_the_others_and_the_parent_fails(dsn, pool):
    proc = start(dsn, "--kinds", "demo")
    try:
        pids = await children(pool)
        killed = pids[0]
        os.kill(killed, signal.SIGKILL)
        out = finish(proc)
    finally:
        finish(proc, 0)
    assert proc.returncode == 1, out
    assert f"worker process {killed} exited with -9; stopping the others" in out
    assert gone(pids[1]), out
    # the survivor signed off; the killed child's row stays until it is seen lost
    assert [r["id"].split(":")[1] for r in await pool.fetch("select id from jobfeed.workers")] == [str(killed)]


async def test_a_childs_own_exit_code_is_the_parents(dsn, queue, pool):
    proc = start(dsn, "--kinds", "exits", "--poll", "200ms",
                 JOBFEED_TASKS="jobfeed.demo,cli_tasks", PYTHONPATH=path_with_tests())
    try:
        pids = await children(pool)
        await queue.submit("exits", "now", {"code": 7})
        out = finish(proc)
    finally:
        finish(proc, 0)
    assert proc.returncode == 7, out
    assert re.search(r"worker process (\d+) exited with 7; stopping the others", out), out
    assert all(gone(pid) for pid in pids), out


async def test_a_usage_error_is_refused_once_by_the_parent(dsn):
    # checked before any child starts: one line, not one per process
    proc = start(dsn, "--kinds", "no_such_kind")
    out = finish(proc)
    assert proc.returncode == 2, out
    assert out.count("--kinds: no handler registered for no_such_kind") == 1, out


async def test_each_child_serves_metrics_on_a_port_of_its_own(dsn, pool):
    port = _two_free_ports()
    proc = start(dsn, "--kinds", "demo", JOBFEED_METRICS_PORT=str(port))
    try:
        await children(pool)
        for p in (port, port + 1):
            body = (await eventually(lambda p=p: _metrics(p), timeout=20, what=f"/metrics on {p}")).text
            assert "jobfeed_job_claims_total" in body
    finally:
        proc.send_signal(signal.SIGTERM)
        finish(proc)


async def _metrics(port: int) -> httpx.Response | None:
    try:
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{port}/metrics")
        return response if response.status_code == 200 else None
    except httpx.HTTPError:
        return None


def _two_free_ports() -> int:
    """A port p with p + 1 free as well (what the children bind)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise AssertionError("no two free ports in a row")
