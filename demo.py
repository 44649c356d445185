"""The built-in `demo` kind: progress step by step, failing on cue. Run n of a job
(its generation) follows payload["fail"][n-1] when present."""

from __future__ import annotations

import asyncio

from .worker.tasks import Abandon, Permanent, Release, Transient, task

SCRIPTS = ("transient", "permanent", "release", "hang")  # any other word (e.g. "ok"): a normal run


MAX_STEPS = 1000
MAX_STEP_MS = 10_000
MAX_RUN_MS = 10 * 60 * 1000  # one run: steps x step_ms


def validate(payload: dict) -> None:
    """Refuse (ValueError: 422 at submission) what would hold a worker too long."""
    for key, most in (("steps", MAX_STEPS), ("step_ms", MAX_STEP_MS)):
        value = payload.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= most:
            raise ValueError(f"{key} must be a whole number from 0 to {most}")
    if payload.get("steps", 5) * payload.get("step_ms", 300) > MAX_RUN_MS:
        raise ValueError("steps x step_ms must be at most 600000 (a run of 10 minutes)")
    fail = payload.get("fail", [])
    if not isinstance(fail, list) or not all(isinstance(f, str) for f in fail):
        raise ValueError(f"fail must be a list of strings ({', '.join(SCRIPTS)}; any other runs normally)")


@task("demo", description="Counts steps, failing on cue: payload {steps, step_ms, fail}", validate=validate)
async def demo(job, ctx):
    try:
        validate(job.payload)
    except ValueError as exc:
        raise Permanent("invalid_payload", str(exc)) from None
    steps = job.payload.get("steps", 5)
    step_ms = job.payload.get("step_ms", 300)
    fail = job.payload.get("fail", [])
    script = fail[job.generation - 1] if job.generation <= len(fail) else None

    if script == "permanent":
        raise Permanent("demo_permanent", "the demo script asked for a permanent failure")
    if script == "release":
        raise Release("demo_release", "the demo script asked for a release", retry_after=1)
    if script == "hang":
        ctx.heartbeat = False  # as a dead worker: no more lease renewals...
        await asyncio.sleep(ctx.lease + 1)
        raise Abandon()        # ...and nothing recorded
    for step in range(1, steps + 1):
        await asyncio.sleep(step_ms / 1000)
        await ctx.progress(step, steps, f"step {step} of {steps}")
        # Each step written now, not merged with the next as a worker merges
        # reports closer than its interval: the demo is watched step by step.
        await ctx.flush()
        if script == "transient":
            break
    if script == "transient":  # after the first step (or at once when there are none)
        raise Transient("demo_transient", "the demo script asked for a passing failure")
    return {"steps": steps}
