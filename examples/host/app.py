"""A host app that embeds jobfeed: its own page at /, jobfeed's API and UI under
/jobs, one asyncpg pool shared by both, one lifespan.

    DATABASE_URL=postgresql://... JOBFEED_TASKS=jobfeed.demo \
        uvicorn app:app --app-dir examples/host --port 8001
    DATABASE_URL=postgresql://... JOBFEED_TASKS=jobfeed.demo jobfeed worker   # runs the jobs

Then open http://127.0.0.1:8001/ (the host's page) or /jobs/ (jobfeed's UI).
The database must be migrated first (`jobfeed migrate`)."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse
from starlette.routing import Mount, Route

import jobfeed.api
from jobfeed import create_pool

PAGE = Path(__file__).with_name("page.html")


def identify(request: Request) -> str | None:
    """Who is asking: here a header a login proxy would set; use your session."""
    return request.headers.get("x-user")


# The pool is made in the lifespan, so jobfeed gets a callable that finds it then.
jobs = jobfeed.api.create_app(pool=lambda: app.state.pool, identify=identify)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette):
    app.state.pool = await create_pool(os.environ["DATABASE_URL"], name="host-app")
    try:
        async with jobfeed.api.lifespan(jobs):  # Starlette runs only the host's lifespan
            yield
    finally:
        await app.state.pool.close()


async def home(request: Request) -> FileResponse:
    return FileResponse(PAGE, headers={"Cache-Control": "no-cache"})


app = Starlette(routes=[Route("/", home), Mount("/jobs", jobs)], lifespan=lifespan)
