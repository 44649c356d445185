"""The naive reference for POST /api/jobs: what a user would write without
jobfeed. A Starlette route on an asyncpg pool, one `INSERT ... ON CONFLICT DO
NOTHING RETURNING` per request and, on a conflict, one `SELECT` of the row
that holds the target. Served by uvicorn with the same settings as jobfeed's API
(`uvicorn bench.naive_app:create_app --factory`, DATABASE_URL in the environment).

Its table (`naive_jobs`) is made by `setup(dsn)`; the pool has the same size
as jobfeed's API pool by default, so neither side wins on connections."""

from __future__ import annotations

import contextlib
import json
import os

import asyncpg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

TABLE = """
create table if not exists naive_jobs (
  id bigint generated always as identity primary key,
  kind text not null,
  target text not null,
  payload jsonb not null,
  status text not null default 'queued',
  created_at timestamptz not null default now(),
  unique (kind, target)
)"""

INSERT = """
insert into naive_jobs (kind, target, payload) values ($1, $2, $3::jsonb)
on conflict (kind, target) do nothing
returning id, kind, target, status, created_at"""

SELECT = "select id, kind, target, status, created_at from naive_jobs where kind = $1 and target = $2"


async def setup(dsn: str) -> None:
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute(TABLE)
    finally:
        await conn.close()


def _view(row, deduplicated: bool) -> str:
    return json.dumps({"id": row["id"], "kind": row["kind"], "target": row["target"], "status": row["status"],
                       "created_at": row["created_at"].isoformat(), "deduplicated": deduplicated})


def create_app() -> Starlette:
    state: dict = {}

    @contextlib.asynccontextmanager
    async def lifespan(app):
        state["pool"] = await asyncpg.create_pool(os.environ["DATABASE_URL"], min_size=1,
                                                  max_size=int(os.environ.get("NAIVE_POOL", "10")))
        try:
            yield
        finally:
            await state["pool"].close()

    async def submit(request: Request) -> Response:
        body = json.loads(await request.body())
        if not isinstance(body, dict) or not isinstance(body.get("kind"), str) \
                or not isinstance(body.get("target"), str):
            return Response(status_code=422)
        payload = json.dumps(body.get("payload"))
        async with state["pool"].acquire() as conn:
            row = await conn.fetchrow(INSERT, body["kind"], body["target"], payload)
            if row is not None:
                return Response(_view(row, False), status_code=201, media_type="application/json",
                                headers={"Location": f"/api/jobs/{row['id']}"})
            row = await conn.fetchrow(SELECT, body["kind"], body["target"])
        return Response(_view(row, True), status_code=200, media_type="application/json")

    return Starlette(routes=[Route("/api/jobs", submit, methods=["POST"])],
                     lifespan=lifespan)
