"""The worker as a real process: the demo kind's scripts end to end, a worker
killed with SIGKILL mid-job, a graceful stop, and budget mode."""

from __future__ import annotations

import re
import signal
import subprocess
import time

import pytest

from conftest import JOBFEED, path_with_tests, worker_env
from queue_sql import ATTEMPTS
from jobfeed.worker.startup import GC_YOUNG
from waiting import eventually, wait_state


def start_worker(dsn: str, *args: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen(JOBFEED + ["worker", "--kinds", "demo", *args], env=worker_env(dsn, **env),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.kill()
    out, _ = proc.communicate(timeout=10)
    return out


def run_to_exit(proc: subprocess.Popen, timeout: float) -> str:
    """Let the process exit by itself within timeout (else it is killed: -9); its output."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        pass
    return stop(proc)


async def end_lease_now(pool, job_id) -> None:
    """Plant the end of a running job's lease (as if it had run out) and wake the
    workers, instead of waiting the lease out."""
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 millisecond' "
                       "where id = $1 and state = 'running'", job_id)
    await pool.execute("select pg_notify('jobfeed_due', 'demo')")


async def attempts_log(queue, job_id) -> list[dict]:
    return (await queue.admin_get_job(job_id))["attempts_log"]


@pytest.fixture(autouse=True)
async def _demo(demo_kind):
    """Jobs are submitted before the worker process has registered its kinds."""


@pytest.fixture
async def worker(dsn):
    proc = start_worker(dsn, "--concurrency", "4", "--poll", "200ms")
    yield proc
    stop(proc)


CASES = {
    # fail script -> (final state, outcomes of the attempts in order)
    "none": ([], "completed", ["completed"]),
    "transient": (["transient", "transient"], "completed", ["transient", "transient", "completed"]),
    "permanent": (["permanent"], "failed", ["permanent"]),
    "release": (["release"], "completed", ["released", "completed"]),
    "hang": (["hang"], "completed", ["lease_expired", "completed"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
async def test_demo_scripts_end_to_end(case, dsn, queue, pool, worker):
    fail, final, outcomes = CASES[case]
    job_id, _ = await queue.submit("demo", f"t-{case}", {"steps": 3, "step_ms": 20, "fail": fail})
    if case == "hang":
        # The hanging handler renews nothing: its lease may end at once.
        await eventually(lambda: pool.fetchval("select generation = 1 and state = 'running' "
                                               "from jobfeed.jobs where id = $1", job_id),
                         timeout=20, what="first run")
        await end_lease_now(pool, job_id)
    await wait_state(pool, job_id, final, timeout=20)
    view = await queue.admin_get_job(job_id)
    assert [a["outcome"] for a in view["attempts_log"]] == outcomes
    assert view["generation"] == len(outcomes)
    public = await queue.get_job(job_id)
    if final == "completed":
        assert public["result"] == {"steps": 3}
        assert public["progress"]["done"] == 3 and public["error"] is None
        # a release does not count as an attempt
        assert view["attempts"] == len(outcomes) - outcomes.count("released")
    else:
        assert public["error"]["code"] == "demo_permanent"


async def test_kill_9_mid_job_is_reclaimed_and_finishes(dsn, queue, pool):
    first = start_worker(dsn, "--concurrency", "1")
    try:
        job_id, _ = await queue.submit("demo", "long", {"steps": 10, "step_ms": 100})
        await wait_state(pool, job_id, "running")
        await eventually(lambda: pool.fetchval(
            "select (progress->>'done')::int >= 2 from jobfeed.jobs where id = $1", job_id), what="progress")
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=5)
    finally:
        stop(first)
    await end_lease_now(pool, job_id)  # the dead worker's lease, run out
    second = start_worker(dsn, "--concurrency", "1", "--poll", "200ms")
    try:
        await wait_state(pool, job_id, "completed", timeout=20)
    finally:
        stop(second)
    log = await attempts_log(queue, job_id)
    assert [a["outcome"] for a in log] == ["lease_expired", "completed"]
    assert log[0]["worker_id"] != log[1]["worker_id"]


async def test_sigterm_stops_within_grace_and_releases_running_jobs(dsn, queue, pool):
    proc = start_worker(dsn, "--concurrency", "2", "--grace", "500ms")
    try:
        long_id, _ = await queue.submit("demo", "long", {"steps": 100, "step_ms": 100})
        await wait_state(pool, long_id, "running")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
        took = time.monotonic() - started
    finally:
        out = stop(proc)
    assert proc.returncode == 0, out
    assert took < 5, f"worker took {took:.1f}s to stop"
    row = await pool.fetchrow("select state::text, attempts, run_after <= now() as due, last_error_code "
                              "from jobfeed.jobs where id = $1", long_id)
    # released: queued again at once, the attempt not counted
    assert dict(row) == {"state": "queued", "attempts": 0, "due": True, "last_error_code": "shutdown"}
    assert [a["outcome"] for a in await attempts_log(queue, long_id)] == ["released"]


async def test_sigterm_lets_a_short_job_finish(dsn, queue, pool):
    proc = start_worker(dsn, "--concurrency", "1", "--grace", "10s")
    try:
        job_id, _ = await queue.submit("demo", "short", {"steps": 5, "step_ms": 100})
        await wait_state(pool, job_id, "running")
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=10)
    finally:
        stop(proc)
    assert await pool.fetchval("select state::text from jobfeed.jobs where id = $1", job_id) == "completed"


async def test_budget_mode_handles_at_most_max_jobs_then_exits(dsn, queue, pool):
    ids = [(await queue.submit("demo", f"b{i}", {"steps": 1, "step_ms": 10}))[0] for i in range(6)]
    # A lease no loaded machine runs out: a lost lease would make a claim that
    # completes nothing, and the count of claims is what is tested.
    proc = start_worker(dsn, "--concurrency", "1", "--budget", "20s", "--reserve", "1s", "--max-jobs", "3",
                        JOBFEED_LEASE="60s")
    out = run_to_exit(proc, 15)
    assert proc.returncode == 0, out
    rows = await pool.fetch("select state::text, generation from jobfeed.jobs where id = any($1)", ids)
    # exactly three claims, all completed; the others never claimed (not claimed,
    # then put back: a released or retried job is 'queued' too)
    assert sorted((r["state"], r["generation"]) for r in rows) == [("completed", 1)] * 3 + [("queued", 0)] * 3, out
    assert await pool.fetchval(f"select count(*) from {ATTEMPTS} a") == 3, out
    assert "stopped after 3 claims" in out


async def test_budget_mode_defaults_to_three_jobs(dsn, queue, pool):
    """CONTRACT: budget mode's defaults are 240 s, 30 s and 3 jobs. A budget
    under 240 s given alone scales the reserve down with it: before, 20 s
    with the 30 s reserve claimed nothing and exited 'after 0 claims'."""
    ids = [(await queue.submit("demo", f"d{i}", {"steps": 1, "step_ms": 10}))[0] for i in range(5)]
    proc = start_worker(dsn, "--concurrency", "1", "--budget", "20s")
    out = run_to_exit(proc, 15)
    assert proc.returncode == 0, out
    states = [await pool.fetchval("select state::text from jobfeed.jobs where id = $1", i) for i in ids]
    assert sorted(states) == ["completed"] * 3 + ["queued"] * 2, out


@pytest.mark.parametrize("flags, said", [
    (("--budget", "20s", "--reserve", "30s"), "--reserve 30s is no shorter than --budget 20s"),
    (("--reserve", "1s"), "--reserve is part of budget mode"),  # alone it was ignored: no budget ran
])
def test_a_reserve_that_could_not_work_is_refused(dsn, flags, said):
    proc = start_worker(dsn, *flags)
    out = run_to_exit(proc, 15)
    assert proc.returncode == 2 and out.strip().splitlines() == [out.strip()], out
    assert said in out


async def test_budget_mode_exits_when_nothing_is_due(dsn):
    proc = start_worker(dsn, "--budget", "30s", "--reserve", "1s")
    out = run_to_exit(proc, 10)
    assert proc.returncode == 0, out


async def test_a_worker_process_settles_its_collector_once_started(dsn):
    """The worker freezes what it has built and collects the youngest
    generation every GC_YOUNG allocations (gc_tasks reports as it exits)."""
    proc = start_worker(dsn, "--budget", "30s", "--reserve", "1s", JOBFEED_TASKS="jobfeed.demo,gc_tasks",
                        PYTHONPATH=path_with_tests())
    out = run_to_exit(proc, 30)
    found = re.search(r"gc young=(\d+) frozen=(\d+)", out)
    assert found, out
    assert int(found.group(1)) == GC_YOUNG and int(found.group(2)) > 0


async def test_budget_end_releases_what_is_still_running(dsn, queue, pool):
    job_id, _ = await queue.submit("demo", "slow", {"steps": 100, "step_ms": 100})
    proc = start_worker(dsn, "--budget", "1500ms", "--reserve", "500ms")
    out = run_to_exit(proc, 15)
    assert proc.returncode == 0, out
    row = await pool.fetchrow("select state::text, attempts, last_error_code from jobfeed.jobs where id = $1", job_id)
    assert dict(row) == {"state": "queued", "attempts": 0, "last_error_code": "budget"}
