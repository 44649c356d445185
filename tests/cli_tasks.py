"""Kinds for the command line's tests: one whose validate() fails with
TypeError on a payload of the wrong type (as many hand-written validators do),
request policies, and a handler that ends its process (as a crashing native
library would)."""

import os

from jobfeed import task


def _validate(payload: dict) -> None:
    if payload.get("n", 0) > 10:  # "n": "many" raises TypeError here
        raise ValueError("n must be at most 10")


@task("typed", validate=_validate)
async def typed(job, ctx):
    return None


# Request policies, which `jobfeed submit` applies as a POST /api/jobs does.
@task("cached", reuse_for="10m")
async def cached(job, ctx):
    return None


@task("strict", on_duplicate="reject_different")
async def strict(job, ctx):
    return None


@task("exits")
async def exits(job, ctx):
    os._exit(job.payload["code"])
