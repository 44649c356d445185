"""`jobfeed top` in a real terminal (tmux): it shows the queue as the database
has it, follows changes live, quits on q and gives the terminal back."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import uuid

import pytest

from conftest import JOBFEED, worker_env
from jobfeed.worker.queue_admin import THROUGHPUT_MINUTES
from jobfeed.worker.states import STATES
from jobfeed.worker.top import render
from waiting import eventually

# .ci/run installs tmux: under CI=true a missing tmux fails the test instead of skipping it.
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None and os.environ.get("CI") != "true",
                                reason="tmux is not installed")


def tmux(*args: str) -> str:
    return subprocess.run(["tmux", *args], check=True, capture_output=True, text=True).stdout


def row(screen: str, kind: str) -> list[int] | None:
    for line in screen.splitlines():
        parts = line.split()
        if parts and parts[0] == kind and len(parts) == 1 + len(STATES):
            return [int(p) for p in parts[1:]]
    return None


async def db_row(pool, kind: str) -> list[int]:
    rows = dict(await pool.fetch("select state::text, count(*) from jobfeed.jobs where kind = $1 group by 1", kind))
    return [rows.get(s, 0) for s in STATES]


@pytest.mark.full
async def test_top_shows_the_queue_live_and_quits_cleanly_on_q(dsn, queue, pool, demo_kind):
    for i in range(3):
        await queue.submit("demo", f"top-{i}")
    await pool.execute("select jobfeed.worker_beat('w-top:1', 'top-host', array['demo'], 8, 2, '1 minute')")
    session = f"jobfeed-top-{uuid.uuid4().hex[:8]}"
    env = worker_env(dsn)
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("DATABASE_URL", "JOBFEED_TASKS", "PYTHONPATH")
                       if k in env)
    command = f"env {exports} {shlex.join(JOBFEED)} top; echo top-exited-$?; sleep 60"
    tmux("new-session", "-d", "-s", session, "-x", "140", "-y", "30", "sh", "-c", command)
    try:
        def screen() -> str:
            return tmux("capture-pane", "-p", "-t", session)

        async def shows(expected: list[int]):
            return screen() if row(screen(), "demo") == expected else None

        first = await eventually(lambda: shows_async(shows, pool), what="top to show the database's counts")
        assert "w-top:1" in first and "2/8" in first and "1 live, 0 lost" in first
        # live: a change in the database reaches the screen within a few redraws
        await queue.submit("demo", "top-new")
        await eventually(lambda: shows_async(shows, pool), what="top to show the new job")
        assert "paused" not in screen()
        await pool.execute("select jobfeed.set_kind_paused('demo', true)")  # an admin's pause, elsewhere

        async def paused():
            return "paused kinds (none of their jobs is claimed): demo" in screen()
        await eventually(paused, what="top to name the paused kind")

        tmux("send-keys", "-t", session, "q")

        async def exited():
            text = screen()
            return text if "top-exited-0" in text else None
        after = await eventually(exited, what="top to exit on q")
        # the alternate screen is gone: nothing of top's view is left on the terminal
        assert "WORKERS" not in after and "jobfeed top" not in after
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


@pytest.mark.full
@pytest.mark.parametrize("term", ["dumb", "xterm-nobody-knows", None])
async def test_a_terminal_curses_cannot_draw_on_gets_the_view_printed_once(dsn, queue, demo_kind, term):
    """TERM=dumb (no cursor addressing), a TERM terminfo lacks, or none: the
    view printed once and exit 0, as without a terminal, not curses' traceback."""
    await queue.submit("demo", "top-0")
    session = f"jobfeed-top-{uuid.uuid4().hex[:8]}"
    env = worker_env(dsn)
    exports = " ".join(f"{k}={shlex.quote(env[k])}" for k in ("DATABASE_URL", "JOBFEED_TASKS", "PYTHONPATH")
                       if k in env)
    terminal = "-u TERM" if term is None else f"TERM={term}"
    command = f"env {terminal} {exports} {shlex.join(JOBFEED)} top 2>&1; echo top-exited-$?; sleep 60"
    tmux("new-session", "-d", "-s", session, "-x", "140", "-y", "30", "sh", "-c", command)
    try:
        async def exited():
            text = tmux("capture-pane", "-p", "-t", session)
            return text if "top-exited-" in text else None
        out = await eventually(exited, what="top to exit")
        assert "top-exited-0" in out and "Traceback" not in out, out
        assert row(out, "demo") == [0, 1, 0, 0, 0, 0], out
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


async def shows_async(shows, pool):
    return await shows(await db_row(pool, "demo"))


def test_the_rates_are_over_the_whole_window_and_the_last_full_minute():
    """The throughput lists only minutes that had finishes: the rate divides
    by the window, and "last minute" is the minute before the current one."""
    stats = {"now": "2026-12-04T14:54:06+00:00", "counts": {}, "throughput": [
        {"minute": "2026-12-04T14:41:00+00:00", "completed": 150, "failed": 15},
        {"minute": "2026-12-04T14:52:00+00:00", "completed": 1, "failed": 0},
        {"minute": "2026-12-04T14:54:00+00:00", "completed": 4, "failed": 0}]}
    (rates,) = [line for line in render(stats, [], 200) if line.startswith("last minute")]
    assert rates.startswith("last minute: 0 completed, 0 failed")  # 14:53 had none
    assert f"per minute over {THROUGHPUT_MINUTES} min: {155 / THROUGHPUT_MINUTES:.1f} completed, 1.0 failed" in rates
    stats["throughput"][1]["minute"] = "2026-12-04T14:53:00+00:00"
    (rates,) = [line for line in render(stats, [], 200) if line.startswith("last minute")]
    assert rates.startswith("last minute: 1 completed, 0 failed")


def test_a_lost_worker_shows_no_running_count():
    """Its jobs were taken over when its leases ran out: before, top showed the
    last count it reported (1/5) as if it still ran them."""
    workers = [{"id": "w-live:1", "host": "h", "running": 2, "concurrency": 5, "lost": False,
                "last_seen": "2026-12-05T04:00:00+00:00", "kinds": ["demo"]},
               {"id": "w-gone:2", "host": "h", "running": 1, "concurrency": 5, "lost": True,
                "last_seen": "2026-12-05T03:50:00+00:00", "kinds": ["demo"]}]
    lines = render({"now": "2026-12-05T04:00:05+00:00", "counts": {}}, workers, 200)
    (live,) = [line for line in lines if "w-live:1" in line]
    (lost,) = [line for line in lines if "w-gone:2" in line]
    assert "2/5" in live and "LOST" in lost and "   -/5" in lost, lost
    assert "1 live, 1 lost   running 2 of 5 slots" in "\n".join(lines)


def test_paused_kinds_are_named():
    """Their jobs wait because an admin paused them, not for want of workers:
    before, top did not say so (only GET /api/kinds did)."""
    stats = {"now": "2026-12-05T04:00:05+00:00", "counts": {"a": {"queued": 3}, "b": {"queued": 1}}}
    assert not [line for line in render(stats, [], 200) if "paused" in line]
    (line,) = [line for line in render(stats, [], 200, paused=["b", "a"]) if "paused" in line]
    assert line.endswith(": a, b"), line
