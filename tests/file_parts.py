"""What tests/test_files_*.py share: the parts of a multipart submission, what
the database holds of files, and a claim of the demo job they made."""

from __future__ import annotations

import json

import httpx

from jobfeed.worker import files
from jobfeed.worker.queue import Queue
from jobfeed.worker.tasks import Context

CHUNK = files.CHUNK_SIZE


def job_part(kind: str = "demo", target: str = "t", **extra) -> tuple[None, str, str]:
    return (None, json.dumps({"kind": kind, "target": target, **extra}), "application/json")


async def stored(pool) -> dict:
    """What the database holds: jobs, files (committed ones) and chunks."""
    return {"jobs": await pool.fetchval("select count(*) from jobfeed.jobs"),
            "files": await pool.fetchval("select count(*) from jobfeed.job_files"),
            "chunks": await pool.fetchval("select count(*) from jobfeed.file_chunks")}


async def input_bytes(pool, job_id, name: str) -> bytes:
    out = b""
    async for chunk in files.open_file(pool, job_id, "in", name):
        out += chunk
    return out


def multipart(parts: dict) -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://x/", files=parts)
    return request.read(), request.headers["content-type"]


async def claim_demo(pool, queue: Queue, job_id):
    [job] = await queue.claim(["demo"], 1, "w1")
    assert job.id == job_id
    return job, Context(queue, job, 30.0)
