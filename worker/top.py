"""`jobfeed top`: a live terminal view of the queue, redrawn about once a second:
jobs by kind and state, throughput and failures per minute, the oldest due job,
and the workers. Quits on q (or Ctrl-C) and gives the terminal back as it was
(curses' alternate screen). Without a terminal it prints the view once."""

from __future__ import annotations

import asyncio
import curses
import datetime as dt
import logging
import sys
from collections.abc import Sequence

from . import db
from .queue import Queue
from .queue_admin import THROUGHPUT_MINUTES
from .settings import Settings
from .startup import prepare
from .states import STATES

REFRESH = 1.0  # seconds between redraws
STATS_AGE = 1.0  # the stats snapshot may be this old (it is shared with the API's readers)
SNAPSHOT_WIDTH = 200  # lines printed without a terminal are cut here, not at a screen's edge


def render(stats: dict, workers: list[dict], width: int, paused: Sequence[str] = (), *,
           interactive: bool = True) -> list[str]:
    """The screen's lines: pure, so a test can read them without a terminal.
    paused: the kinds an admin paused (their jobs wait for that, not for workers).
    interactive: redrawn on a terminal (the title says how to quit), else printed once."""
    as_of = str(stats.get("as_of") or stats.get("now") or "")[11:19]
    lines = [f"jobfeed top   as of {as_of} UTC" + ("   (q quits)" if interactive else ""), ""]
    # Columns fit an 80-column terminal: a 16-wide kind and 10 per state.
    head = f"{'KIND':<16}" + "".join(f"{s.upper():>10}" for s in STATES)
    lines.append(head)
    counts = stats.get("counts", {})
    totals = dict.fromkeys(STATES, 0)
    for kind in sorted(counts):
        row = counts[kind]
        lines.append(f"{kind[:15]:<16}" + "".join(f"{row.get(s, 0):>10}" for s in STATES))
        for s in STATES:
            totals[s] += row.get(s, 0)
    if len(counts) != 1:
        lines.append(f"{'all kinds':<16}" + "".join(f"{totals[s]:>10}" for s in STATES))
    if paused:
        lines.append("paused kinds (none of their jobs is claimed): " + ", ".join(sorted(paused)))
    lines.append("")
    # throughput lists only the minutes that had finishes: the last minute is
    # the one before the current (still counting) one, or none; the rate is
    # over the whole window
    points = stats.get("throughput") or []
    now = stats.get("as_of") or stats.get("now")  # the throughput's time: when it was counted
    last: dict = {}
    if now:
        previous = dt.datetime.fromisoformat(now).replace(second=0, microsecond=0) - dt.timedelta(minutes=1)
        last = next((p for p in points if dt.datetime.fromisoformat(p["minute"]) == previous), {})
    done = sum(p.get("completed", 0) for p in points)
    failed = sum(p.get("failed", 0) for p in points)
    lines.append(f"last minute: {last.get('completed', 0)} completed, {last.get('failed', 0)} failed   "
                 f"per minute over {THROUGHPUT_MINUTES} min: {done / THROUGHPUT_MINUTES:.1f} completed, "
                 f"{failed / THROUGHPUT_MINUTES:.1f} failed")
    oldest = stats.get("oldest_due_seconds")
    lines.append("oldest due job: " + ("none" if oldest is None else f"waiting {oldest:.0f}s"))
    lines.append("")
    live = [w for w in workers if not w["lost"]]
    lines.append(f"WORKERS  {len(live)} live, {len(workers) - len(live)} lost   "
                 f"running {sum(w['running'] for w in live)} of {sum(w['concurrency'] for w in live)} slots")
    for w in workers:
        seen = str(w["last_seen"])[11:19]
        # a lost worker runs nothing we know of: its last count is long taken over
        running = "-" if w["lost"] else w["running"]
        lines.append(f"  {w['id'][:36]:<37}{w['host'][:16]:<17}{running:>4}/{w['concurrency']:<4} "
                     f"{'LOST' if w['lost'] else 'live':<5} seen {seen}  {','.join(w['kinds'])}")
    return [line[:max(width - 1, 1)] for line in lines]


async def _snapshot(queue: Queue, width: int, interactive: bool = True) -> list[str]:
    stats, workers = await queue.stats(max_age=STATS_AGE), await queue.list_workers()
    paused = [k["kind"] for k in await queue.list_kinds() if k.get("paused")]
    return render(stats, workers, width, paused, interactive=interactive)


async def _run(screen, queue: Queue) -> None:
    curses.curs_set(0)
    screen.nodelay(True)
    while True:
        try:
            height, width = screen.getmaxyx()
            lines = await _snapshot(queue, width)
        except Exception as exc:  # the database restarting: say so, keep trying
            height, width = screen.getmaxyx()
            lines = [f"jobfeed top   {dt.datetime.now():%H:%M:%S}   (q quits)", "",
                     f"cannot read the queue: {type(exc).__name__}: {exc}"[:max(width - 1, 1)]]
        screen.erase()
        for y, line in enumerate(lines[:height]):
            screen.addstr(y, 0, line)
        screen.refresh()
        deadline = asyncio.get_running_loop().time() + REFRESH
        while asyncio.get_running_loop().time() < deadline:
            if screen.getch() in (ord("q"), ord("Q")):
                return
            await asyncio.sleep(0.05)


def _drawable() -> bool:
    """A terminal curses can draw on: one terminfo knows (TERM set, and not a
    name it lacks) that can move its cursor (TERM=dumb cannot). Else the view
    is printed once, as without a terminal, instead of curses' traceback."""
    try:
        curses.setupterm()
        return curses.tigetstr("cup") is not None
    except curses.error:
        return False


async def cmd_top(settings: Settings, args) -> int:
    dsn = await prepare(settings)
    pool = await db.create_pool(dsn, min_size=1, max_size=2, name="jobfeed-top")
    try:
        queue = Queue(pool)
        # curses needs a terminal to draw on and read keys from: without one
        # (a pipe, a file, cron, `watch`), the view is printed once, as
        # `top -b -n 1` does; so on a terminal curses cannot draw on.
        if not (sys.stdin.isatty() and sys.stdout.isatty() and _drawable()):
            print("\n".join(await _snapshot(queue, SNAPSHOT_WIDTH, interactive=False)))
            return 0
        screen = curses.initscr()
        # Log lines (asyncpg's reconnect warnings while the database is away)
        # would be written over the drawing and stay there: the screen says
        # "cannot read the queue" instead.
        logging.disable(logging.CRITICAL)
        try:
            curses.noecho()
            curses.cbreak()
            screen.keypad(True)
            await _run(screen, queue)
        except KeyboardInterrupt:
            pass
        finally:
            screen.keypad(False)
            curses.nocbreak()
            curses.echo()
            curses.endwin()
            logging.disable(logging.NOTSET)
    finally:
        await pool.close()
    return 0
