"""`jobfeed submit --follow`: watch one job until it finishes, drawing a progress
bar. Listens for NOTIFY jobfeed_changed and re-reads the job; also polls, since a
notification is only a hint."""

from __future__ import annotations

import asyncio
import sys
from typing import TextIO

from .db import Listener
from .queue import Queue
from .states import TERMINAL
from .terminal import shown
from .waits import wait_event

def render(view: dict, width: int = 30) -> str:
    progress = view.get("progress") or {}
    done, total = progress.get("done"), progress.get("total")
    if total:
        fraction = max(0.0, min(float(done or 0) / float(total), 1.0))
        if view["status"] == "completed":
            fraction = 1.0
        filled = int(round(fraction * width))
        bar = f"[{'#' * filled}{'.' * (width - filled)}] {fraction * 100:3.0f}%"
    else:
        bar = f"[{('#' * width) if view['status'] == 'completed' else ('.' * width)}]"
    message = progress.get("message") or ""
    line = f"{bar} {view['status']}"
    if message and view["status"] not in TERMINAL:
        line += f" - {message}"
    if view["status"] == "failed" and view.get("error"):
        line += f" - {view['error'].get('code')}: {view['error'].get('message')}"
    return shown(line)


async def follow(queue: Queue, dsn: str, job_id, out: TextIO = sys.stderr, poll: float = 1.0) -> dict:
    """Print the job's progress until it reaches a final status; returns the final view."""
    changed = asyncio.Event()
    key = str(job_id)

    def on_change(_channel: str, payload: str) -> None:
        if key in payload:
            changed.set()

    listener = Listener(dsn, {"jobfeed_changed": on_change}, on_connect=_set(changed), name="jobfeed-follow")
    await listener.start()  # LISTEN first, then read: a change in between is not missed
    live = out.isatty()
    last = None
    try:
        while True:
            changed.clear()
            view = await queue.get_job(job_id)
            if view is None:
                raise LookupError(f"job {job_id} no longer exists")
            line = render(view)
            if line != last:
                out.write(("\r\033[K" + line) if live else line + "\n")
                out.flush()
                last = line
            if view["status"] in TERMINAL:
                if live:
                    out.write("\n")
                return view
            await wait_event(changed, poll)
    finally:
        await listener.stop()


def _set(event: asyncio.Event):
    async def callback() -> None:
        event.set()
    return callback
