"""API scenarios: POST /api/jobs against a bare Starlette route, and SSE fan-out
against a bare sse-starlette endpoint. Each server is one uvicorn process with
the same settings; the load comes from bench.loadgen in a process of its own."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import tempfile
import time

import psutil

from jobfeed.worker import db
from jobfeed.worker.queue import Queue

from . import naive_app, pg
from .loadgen import host_port
from .queue_scenarios import percentile
from .systems import JOBFEED, ROOT, run_driver

# The same uvicorn settings for jobfeed's API and the bare apps: one process,
# uvicorn's defaults (its own choice of loop and HTTP parser), no access log.
UVICORN = ["-m", "uvicorn", "--factory", "--host", "127.0.0.1", "--port", "0", "--no-access-log",
           "--timeout-graceful-shutdown", "3"]


class ApiProcess:
    def __init__(self, app: str, env: dict[str, str] | None = None):
        self.args = [sys.executable, *UVICORN, app]
        self.env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self.proc: asyncio.subprocess.Process | None = None
        self.url = ""
        self.output: list[str] = []
        self._reader: asyncio.Task | None = None

    async def start(self, timeout: float = 60) -> "ApiProcess":
        self.proc = await asyncio.create_subprocess_exec(
            *self.args, cwd=ROOT, env=self.env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        found = asyncio.get_running_loop().create_future()

        async def read() -> None:
            async for raw in self.proc.stdout:
                line = raw.decode(errors="replace").rstrip()
                self.output.append(line)
                del self.output[:-200]
                m = re.search(r"Uvicorn running on (http://127\.0\.0\.1:\d+)", line)
                if m and not found.done():
                    found.set_result(m.group(1))
            if not found.done():
                found.set_exception(RuntimeError("uvicorn exited:\n" + "\n".join(self.output[-40:])))

        self._reader = asyncio.create_task(read())
        self.url = await asyncio.wait_for(found, timeout)
        return self

    @property
    def pid(self) -> int:
        return self.proc.pid

    def rss(self) -> int:
        return psutil.Process(self.proc.pid).memory_info().rss

    async def stop(self) -> None:
        if self.proc and self.proc.returncode is None:
            self.proc.terminate()
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except asyncio.TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        if self._reader:
            await self._reader

    async def __aenter__(self) -> "ApiProcess":
        return await self.start()

    async def __aexit__(self, *exc) -> None:
        await self.stop()


def jobfeed_api(dsn: str) -> ApiProcess:
    # Every bench client connects from 127.0.0.1: both stream caps are raised explicitly.
    return ApiProcess("jobfeed.api.app:create_app", {"DATABASE_URL": dsn, "JOBFEED_TASKS": "bench.jobfeed_tasks",
                                                     "JOBFEED_MAX_STREAMS_PER_CLIENT": "1000000",
                                                     "JOBFEED_MAX_STREAMS": "1000000"})


def bare_api() -> ApiProcess:
    return ApiProcess("bench.bare_app:create_app")


def naive_api(dsn: str) -> ApiProcess:
    return ApiProcess("bench.naive_app:create_app", {"DATABASE_URL": dsn})


async def loadgen(*args: str, timeout: float = 300) -> dict:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.loadgen", *args, cwd=ROOT,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"loadgen {args[0]} failed:\n{err.decode()[-3000:]}")
    return json.loads(out.decode().strip().splitlines()[-1])


# ---------------------------------------------------------------- HTTP submit

async def _naive(url: str, common: list[str], dup_targets: int) -> tuple[dict, dict]:
    """The naive route on a fresh table: new targets, then duplicates of targets made beforehand."""
    await pg.execute(url, "drop table if exists naive_jobs")
    await naive_app.setup(url)
    async with naive_api(url) as api:
        new = await loadgen("http", "--url", api.url, "--mode", "new", *common)
        await loadgen("http", "--url", api.url, "--mode", "dup", "--connections", "1", "--seconds", "0.5",
                      "--warmup", "0", "--dup-targets", str(dup_targets))
        dup = await loadgen("http", "--url", api.url, "--mode", "dup", *common)
    in_db = await pg.fetchval(url, "select count(*) from naive_jobs where target like 'n%'")
    dups = await pg.fetchval(url, "select count(*) from naive_jobs where target like 'd%'")
    new["ok"] = set(new["statuses"]) == {"201"} and in_db >= new["statuses"]["201"]
    dup["ok"] = set(dup["statuses"]) == {"200"} and dups == dup_targets
    return new, dup


def _mean_of(before: dict, after: dict) -> dict:
    return {**after, "rate": (before["rate"] + after["rate"]) / 2,
            "requests": before["requests"] + after["requests"],
            "statuses": {k: before["statuses"].get(k, 0) + after["statuses"].get(k, 0)
                         for k in set(before["statuses"]) | set(after["statuses"])},
            "rate_before": before["rate"], "rate_after": after["rate"],
            "ok": before.get("ok", True) and after.get("ok", True)}


async def http(server: pg.Server, *, seconds: float, connections: int, dup_targets: int = 100) -> dict:
    url = await server.new_database("http_jobfeed")
    naive_url = await server.new_database("http_naive")
    await run_driver(JOBFEED, url, "setup")
    common = ["--connections", str(connections), "--seconds", str(seconds), "--warmup", "1",
              "--dup-targets", str(dup_targets)]
    # The references run before and after jobfeed's (the mean counts), so a
    # burst of other work on the machine skews both sides alike.
    async with bare_api() as api:
        bare_before = await loadgen("http", "--url", api.url, "--mode", "new", *common)
    naive_new_before, naive_dup_before = await _naive(naive_url, common, dup_targets)
    async with jobfeed_api(url) as api:
        # The targets the duplicate run hits, made beforehand: every one of them
        # (on a loaded machine half a second of one connection made only some,
        # and the duplicate run then created the rest).
        for seconds in ("0.5", "3", "10"):
            await loadgen("http", "--url", api.url, "--mode", "dup", "--connections", "1", "--seconds", seconds,
                          "--warmup", "0", "--dup-targets", str(dup_targets))
            made = await pg.fetchval(url, "select count(*) from jobfeed.jobs where target like 'd%'")
            if made >= dup_targets:
                break
        new = await loadgen("http", "--url", api.url, "--mode", "new", *common)
        new_in_db = await pg.fetchval(url, "select count(*) from jobfeed.jobs where target like 'n%'")
        dup = await loadgen("http", "--url", api.url, "--mode", "dup", *common)
        dup_in_db = await pg.fetchval(url, "select count(*) from jobfeed.jobs where target like 'd%'")
    naive_new_after, naive_dup_after = await _naive(naive_url, common, dup_targets)
    async with bare_api() as api:
        bare_after = await loadgen("http", "--url", api.url, "--mode", "new", *common)
    bare = _mean_of(bare_before, bare_after)
    # Requests still in flight when the window closed also created jobs: at
    # least the 201s counted, at most one more per connection (plus the warm-up).
    new["created_in_db"] = new_in_db
    new["ok"] = set(new["statuses"]) == {"201"} and new_in_db >= new["statuses"]["201"]
    dup["new_jobs_in_db"] = dup_in_db - made
    dup["ok"] = set(dup["statuses"]) == {"200"} and dup_in_db == made == dup_targets
    bare["ok"] = set(bare["statuses"]) == {"201"}
    await server.drop_database(url)
    await server.drop_database(naive_url)
    return {"jobfeed_new": new, "jobfeed_dup": dup, "bare": bare,
            "naive_new": _mean_of(naive_new_before, naive_new_after),
            "naive_dup": _mean_of(naive_dup_before, naive_dup_after),
            "server": "uvicorn, 1 process, " + " ".join(UVICORN[2:])}


# ---------------------------------------------------------------- SSE fan-out

async def sse_client(url: str, paths: list[str], tmp: str):
    path_file = os.path.join(tmp, f"paths-{time.monotonic_ns()}.json")
    with open(path_file, "w") as f:
        json.dump(paths, f)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "bench.loadgen", "sse", "--url", url, "--paths", path_file, cwd=ROOT,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    return proc


async def ask(proc, command: str | None, timeout: float = 300) -> dict:
    if command is not None:
        proc.stdin.write(command.encode() + b"\n")
        await proc.stdin.drain()
    line = await asyncio.wait_for(proc.stdout.readline(), timeout)
    if not line:
        err = await proc.stderr.read()
        raise RuntimeError(f"sse client died:\n{err.decode()[-3000:]}")
    return json.loads(line)


async def close_client(proc) -> dict:
    try:
        res = await ask(proc, "quit", 60)
    except Exception:
        res = {}
    try:
        await asyncio.wait_for(proc.wait(), 30)
    except asyncio.TimeoutError:
        proc.kill()
        await proc.wait()
    return res


async def _settle_rss(api: ApiProcess, seconds: float = 1.0) -> int:
    await asyncio.sleep(seconds)
    return api.rss()


async def _open_and_measure(api: ApiProcess, paths: list[str], tmp: str, warm_paths: list[str]):
    """Warm the server up with a few streams (opened, then closed), read its RSS,
    open every stream, read it again. -> (client process, opened info, bytes per stream)."""
    warm = await sse_client(api.url, warm_paths, tmp)
    await ask(warm, None)
    await close_client(warm)
    before = await _settle_rss(api)
    client = await sse_client(api.url, paths, tmp)
    opened = await ask(client, None, 600)
    after = await _settle_rss(api, 2.0)
    per = (after - before) / opened["opened"] if opened["opened"] else None
    return client, opened, {"rss_before": before, "rss_after": after, "bytes_per_stream": per}


def _latencies(dump_file: str, t_commit: float, prefix: str | None = None) -> list[float]:
    with open(dump_file) as f:
        data = json.load(f)
    return [(times[0] - t_commit) * 1000 for path, times in data
            if times and (prefix is None or path.startswith(prefix))]


async def sse(server: pg.Server, *, watchers: int, hot: int, jobs: int, rounds: int) -> dict:
    """`hot` watchers of one job, the other watchers - hot spread over `jobs` jobs,
    all on one API process. Times from the worker's commit (taken just before
    the call that commits) to each client's receipt of the event it caused."""
    url = await server.new_database("sse_jobfeed")
    await run_driver(JOBFEED, url, "setup")
    pool = await db.create_pool(url, min_size=1, max_size=2, name="bench-sse")
    queue = Queue(pool)
    out: dict = {"watchers": watchers, "hot": hot, "jobs": jobs + 1}
    with tempfile.TemporaryDirectory(prefix="bench-sse-") as tmp:
        submitted = await queue.submit_many("noop", [(f"s{i}", {"i": i}) for i in range(jobs + 1)])
        ids = [str(job_id) for job_id, _ in submitted]
        hot_id, cold = ids[0], ids[1:]
        paths = [f"/api/jobs/{hot_id}/events"] * hot
        paths += [f"/api/jobs/{cold[i % len(cold)]}/events" for i in range(watchers - hot)]
        warm_paths = [f"/api/jobs/{cold[i % len(cold)]}/events" for i in range(min(200, watchers))]
        async with jobfeed_api(url) as api:
            client, opened, mem = await _open_and_measure(api, paths, tmp, warm_paths)
            out["opened"] = opened
            out["memory"] = mem
            try:
                # Round 0: every job claimed in one statement (queued -> processing).
                await ask(client, "mark")
                t0 = time.time()
                claimed = await queue.claim(["noop"], jobs + 1, "bench-sse")
                got_all = await ask(client, "wait 30 *")
                dump = os.path.join(tmp, "r0.json")
                await ask(client, f"dump {dump}")
                lat_all = _latencies(dump, t0)
                out["claim_all"] = {"jobs": len(claimed), "got": got_all, "p50_ms": percentile(lat_all, 50),
                                    "p99_ms": percentile(lat_all, 99), "max_ms": max(lat_all, default=None)}
                # Rounds on the hot job: one progress report each.
                gen = {str(c.id): c.generation for c in claimed}
                hot_lat: list[float] = []
                got_hot = []
                for r in range(1, rounds + 1):
                    await asyncio.sleep(0.3)
                    await ask(client, "mark")
                    t = time.time()
                    await queue.progress(claimed_id(claimed, hot_id), gen[hot_id], r, rounds + 1, None)
                    got_hot.append(await ask(client, f"wait 10 /api/jobs/{hot_id}/"))
                    dump = os.path.join(tmp, f"r{r}.json")
                    await ask(client, f"dump {dump}")
                    hot_lat += _latencies(dump, t, f"/api/jobs/{hot_id}/")
                out["hot_job"] = {"rounds": rounds, "got": got_hot, "samples": len(hot_lat),
                                  "p50_ms": percentile(hot_lat, 50), "p99_ms": percentile(hot_lat, 99),
                                  "max_ms": max(hot_lat, default=None)}
                # Last round: every job completed in one statement; the streams end.
                await asyncio.sleep(0.3)
                await ask(client, "mark")
                t = time.time()
                done = await queue.complete_many([(c.id, c.generation, None) for c in claimed])
                got_end = await ask(client, "wait 30 *")
                dump = os.path.join(tmp, "end.json")
                await ask(client, f"dump {dump}")
                lat_end = _latencies(dump, t)
                ends = await ask(client, "ends 30")
                out["complete_all"] = {"jobs": len(done), "got": got_end, "p50_ms": percentile(lat_end, 50),
                                       "p99_ms": percentile(lat_end, 99), "max_ms": max(lat_end, default=None),
                                       "streams_ended": ends["ended"]}
            finally:
                await close_client(client)
        ok = (opened["opened"] == watchers and got_all["got"] == watchers
              and all(g["got"] == g["of"] == hot for g in got_hot) and got_end["got"] == watchers
              and ends["ended"] == watchers)
        out["ok"] = ok

        # The bare sse-starlette endpoint, same server settings, same number of streams.
        # and the reference latency: one event broadcast to every stream (one put per client queue).
        async with bare_api() as api:
            client, opened, mem = await _open_and_measure(api, ["/events"] * watchers, tmp, ["/events"] * 200)
            try:
                await asyncio.sleep(0.3)
                await ask(client, "mark")
                t = time.time()
                published = await _post(api.url, "/publish")
                got = await ask(client, "wait 30 *")
                dump = os.path.join(tmp, "bare.json")
                await ask(client, f"dump {dump}")
                lat = _latencies(dump, t)
            finally:
                await close_client(client)
        out["bare"] = {"opened": opened, "memory": mem, "published_to": published, "got": got,
                       "p50_ms": percentile(lat, 50), "p99_ms": percentile(lat, 99), "max_ms": max(lat, default=None),
                       "ok": opened["opened"] == watchers == got["got"]}
    await pool.close()
    await server.drop_database(url)
    return out


async def _post(url: str, path: str) -> int:
    """POST with an empty body; -> the response body as an int (the bare app's count of clients)."""
    host, port = host_port(url)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                     .encode())
        data = await reader.read()
    finally:
        writer.close()
    return int(data.split(b"\r\n\r\n", 1)[1])


def claimed_id(claimed, job_id: str):
    for c in claimed:
        if str(c.id) == job_id:
            return c.id
    raise KeyError(job_id)
