"""What the job streams' pings cost everyone else, on an embedded PostgreSQL of
its own: --streams job streams open on one API process (uvicorn, as the sse
scenario runs it) with JOBFEED_SSE_PING=--ping, then one client asking
GET /healthz every 20 ms on a connection of its own for --seconds. Each
answer's time shows how long the event loop was held before it: pings written
to every stream at once hold it for the whole round. Prints the answers'
median, p99 and worst times, and how many took over 20 ms.

python -m bench.pings [--streams 10000] [--ping 15s] [--seconds 32]"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time

from jobfeed.worker import db
from jobfeed.worker.queue import Queue

from . import pg, web_scenarios
from .loadgen import host_port, read_answer
from .queue_scenarios import percentile
from .systems import JOBFEED, run_driver

JOBS = 901  # the jobs the streams watch, as the sse scenario's
SLOW_MS = 20.0


async def _healthz_times(url: str, seconds: float) -> list[float]:
    """Milliseconds per GET /healthz, one at a time on one keep-alive connection."""
    reader, writer = await asyncio.open_connection(*host_port(url))
    times: list[float] = []
    end = time.monotonic() + seconds
    try:
        while time.monotonic() < end:
            start = time.perf_counter()
            writer.write(b"GET /healthz HTTP/1.1\r\nhost: bench\r\n\r\n")
            await read_answer(reader)
            times.append((time.perf_counter() - start) * 1000)
            await asyncio.sleep(0.02)
    finally:
        writer.close()
    return times


async def measure(streams: int, ping: str, seconds: float) -> dict:
    with pg.Server() as server:
        url = await server.new_database("pings")
        await run_driver(JOBFEED, url, "setup")
        pool = await db.create_pool(url, min_size=1, max_size=2, name="bench-pings")
        try:
            submitted = await Queue(pool).submit_many("noop", [(f"p{i}", {"i": i}) for i in range(JOBS)])
        finally:
            await pool.close()
        ids = [str(job_id) for job_id, _ in submitted]
        paths = [f"/api/jobs/{ids[i % len(ids)]}/events" for i in range(streams)]
        api = web_scenarios.jobfeed_api(url)
        api.env["JOBFEED_SSE_PING"] = ping
        with tempfile.TemporaryDirectory(prefix="bench-pings-") as tmp:
            async with api:
                client = await web_scenarios.sse_client(api.url, paths, tmp)
                try:
                    opened = await web_scenarios.ask(client, None, 600)
                    times = await _healthz_times(api.url, seconds)
                finally:
                    await web_scenarios.close_client(client)
    return {"streams": opened["opened"], "ok": opened["opened"] == streams, "ping": ping, "seconds": seconds,
            "answers": len(times), "p50_ms": percentile(times, 50), "p99_ms": percentile(times, 99),
            "max_ms": max(times), f"over_{SLOW_MS:g}_ms": sum(1 for t in times if t > SLOW_MS)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=10000)
    parser.add_argument("--ping", default="15s", help="JOBFEED_SSE_PING for the API (its default)")
    parser.add_argument("--seconds", type=float, default=32.0, help="two rounds of pings at the default")
    args = parser.parse_args()
    pg.raise_open_files()
    print(json.dumps(asyncio.run(measure(args.streams, args.ping, args.seconds)), indent=1))


if __name__ == "__main__":
    main()
