"""Files through the API: one large upload and its download, the API process's
RSS while each runs (against idle), and the upload's MB/s next to a plain COPY
of the same bytes, as 256 KiB bytea rows, into a table on the same server.

    .venv/bin/python -m bench.files                 # 1 GiB
    .venv/bin/python -m bench.files --size 64MiB    # quicker

Prints one JSON object (and writes it with --out)."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
import uuid

import asyncpg
import httpx
import psutil

from jobfeed.worker import files
from jobfeed.worker.migrate import migrate_database
from jobfeed.worker.settings import parse_size

from . import pg
from .web_scenarios import ApiProcess

MiB = 1024 * 1024
BLOCK = os.urandom(MiB)  # the body repeats it: the client's memory stays flat too


class Peak:
    """The largest RSS of a process while a block runs, sampled every 10 ms."""

    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.peak = 0

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            await asyncio.sleep(0.01)

    async def __aenter__(self) -> "Peak":
        self.peak = self.proc.memory_info().rss
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc) -> None:
        self._task.cancel()
        self.peak = max(self.peak, self.proc.memory_info().rss)


async def _upload(url: str, size: int, target: str) -> tuple[uuid.UUID, float]:
    head = (b"--B\r\nContent-Disposition: form-data; name=\"job\"\r\nContent-Type: application/json\r\n\r\n"
            + json.dumps({"kind": "noop", "target": target}).encode() + b"\r\n"
            b"--B\r\nContent-Disposition: form-data; name=\"video\"; filename=\"v\"\r\n"
            b"Content-Type: video/mp4\r\n\r\n")
    tail = b"\r\n--B--\r\n"

    async def body():
        yield head
        for _ in range(size // MiB):
            yield BLOCK
        yield BLOCK[:size % MiB]
        yield tail
    async with httpx.AsyncClient(base_url=url, timeout=3600) as client:
        started = time.perf_counter()
        r = await client.post("/api/jobs", content=body(), headers={
            "content-type": "multipart/form-data; boundary=B", "content-length": str(len(head) + size + len(tail))})
        took = time.perf_counter() - started
    r.raise_for_status()
    return uuid.UUID(r.json()["id"]), took


async def _publish_copy(dsn: str, job_id: uuid.UUID) -> None:
    """The input, also as the job's output `copy` (a server-side copy: what is
    measured is the download, not a handler)."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            new = await conn.fetchval(
                "insert into jobfeed.job_files (job_id, direction, name, content_type, chunk_size, size) "
                "select job_id, 'out', 'copy', content_type, chunk_size, size from jobfeed.job_files "
                "where job_id = $1 and direction = 'in' returning id", job_id)
            await conn.execute(
                "insert into jobfeed.file_chunks (file_id, seq, data) select $1, c.seq, c.data "
                "from jobfeed.file_chunks c join jobfeed.job_files f on f.id = c.file_id "
                "where f.job_id = $2 and f.direction = 'in'", new, job_id)
    finally:
        await conn.close()


async def _download(url: str, job_id: uuid.UUID, size: int) -> float:
    got = 0
    async with httpx.AsyncClient(base_url=url, timeout=3600) as client:
        started = time.perf_counter()
        async with client.stream("GET", f"/api/jobs/{job_id}/outputs/copy") as r:
            r.raise_for_status()
            async for piece in r.aiter_raw():
                got += len(piece)
        took = time.perf_counter() - started
    assert got == size, (got, size)
    return took


async def _copy(dsn: str, size: int) -> float:
    """COPY of the same bytes, as the same rows, into a plain table."""
    conn = await asyncpg.connect(dsn)
    try:
        await conn.execute("create table raw_chunks (seq int primary key, data bytea not null);"
                           "alter table raw_chunks alter column data set storage external")
        chunk = files.CHUNK_SIZE
        data = (BLOCK * (chunk // MiB + 1))[:chunk]

        def rows():
            for seq in range(size // chunk):
                yield (seq, data)
            if size % chunk:
                yield (size // chunk, data[:size % chunk])
        started = time.perf_counter()
        await conn.copy_records_to_table("raw_chunks", records=rows(), columns=["seq", "data"])
        return time.perf_counter() - started
    finally:
        await conn.close()


async def run(size: int) -> dict:
    with pg.Server() as server:
        dsn = await server.new_database("files")
        await migrate_database(dsn)
        env = {"DATABASE_URL": dsn, "JOBFEED_TASKS": "bench.jobfeed_tasks",
               "JOBFEED_MAX_UPLOAD": str(size + MiB), "JOBFEED_REQUEST_TIMEOUT": "1h"}
        async with ApiProcess("jobfeed.api.app:create_app", env) as api:
            await _upload(api.url, MiB, "warm-up")  # warm up: every code path once
            await asyncio.sleep(1)
            idle = api.rss()
            async with Peak(api.pid) as up:
                job_id, up_seconds = await _upload(api.url, size, "measured")
            await _publish_copy(dsn, job_id)
            await asyncio.sleep(1)
            idle_down = api.rss()
            async with Peak(api.pid) as down:
                down_seconds = await _download(api.url, job_id, size)
        copy_seconds = await _copy(dsn, size)
    mb = size / 1e6
    return {
        "size_bytes": size,
        "upload": {"seconds": round(up_seconds, 2), "mb_per_s": round(mb / up_seconds, 1),
                   "api_rss_idle_mib": round(idle / MiB, 1), "api_rss_peak_mib": round(up.peak / MiB, 1),
                   "api_rss_growth_mib": round((up.peak - idle) / MiB, 1)},
        "download": {"seconds": round(down_seconds, 2), "mb_per_s": round(mb / down_seconds, 1),
                     "api_rss_growth_mib": round((down.peak - idle_down) / MiB, 1)},
        "copy": {"seconds": round(copy_seconds, 2), "mb_per_s": round(mb / copy_seconds, 1)},
        "upload_to_copy_ratio": round(copy_seconds / up_seconds, 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.files", description=__doc__.splitlines()[0])
    parser.add_argument("--size", default="1GiB", help="bytes uploaded and downloaded (e.g. 64MiB, 1GiB)")
    parser.add_argument("--out", help="also write the result here as JSON")
    args = parser.parse_args(argv)
    result = asyncio.run(run(parse_size(args.size, "--size")))
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    # the goal: within 50 MiB of idle, both ways
    return 0 if max(result["upload"]["api_rss_growth_mib"], result["download"]["api_rss_growth_mib"]) < 50 else 1


if __name__ == "__main__":
    sys.exit(main())
