"""The bare references for the API scenarios, served by uvicorn with the same
settings as jobfeed's API (`uvicorn bench.bare_app:create_app --factory`):

- POST /api/jobs reads and parses the JSON body and answers a fixed job view of
  the same shape and size as jobfeed's (201, Location header), nothing else;
- GET /events is a bare sse-starlette stream: one asyncio.Queue per client and
  one first event, nothing else (POST /publish puts an event in every queue)."""

from __future__ import annotations

import asyncio
import json

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

JOB_ID = "4c01e1c7-3290-4114-9294-819b267fa02f"
VIEW = json.dumps({
    "id": JOB_ID, "kind": "noop", "error": None, "result": None, "status": "queued", "target": "t1",
    "version": 1, "progress": None, "created_at": "2026-11-30T02:11:56.633748+00:00",
    "updated_at": "2026-11-30T02:11:56.633748+00:00", "finished_at": None, "deduplicated": False})


def create_app() -> Starlette:
    clients: set[asyncio.Queue] = set()

    async def submit(request: Request) -> Response:
        body = json.loads(await request.body())
        if not isinstance(body, dict):
            return Response(status_code=422)
        return Response(VIEW, status_code=201, media_type="application/json",
                        headers={"Location": f"/api/jobs/{JOB_ID}"})

    async def events(request: Request) -> Response:
        queue: asyncio.Queue = asyncio.Queue()
        clients.add(queue)

        async def stream():
            try:
                yield ServerSentEvent(VIEW, event="job", id="1")
                while True:
                    item = await queue.get()
                    if item is None:
                        return
                    yield ServerSentEvent(item, event="job", id="2")
            finally:
                clients.discard(queue)

        return EventSourceResponse(stream(), ping=15)

    async def publish(request: Request) -> Response:
        data = (await request.body()).decode() or VIEW
        for queue in list(clients):
            queue.put_nowait(data)
        return Response(str(len(clients)))

    return Starlette(routes=[
        Route("/api/jobs", submit, methods=["POST"]),
        Route("/events", events, methods=["GET"]),
        Route("/publish", publish, methods=["POST"]),
    ])
