"""Files out: handlers read their inputs chunk by chunk and save outputs
fenced by generation; outputs download whole or in ranges under the job
view's access rules, reach SSE watchers, and pass through the API process
without being held whole."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import os
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from jobfeed.worker import files
from jobfeed.worker.queue import Queue
from jobfeed.worker.tasks import Context, LeaseLost

from file_parts import CHUNK, claim_demo, input_bytes, job_part
from servers import ADMIN_TOKEN, Watcher, serve, start_api_process
from waiting import eventually


async def _upload(server, parts: dict) -> uuid.UUID:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/api/jobs", files=parts)
        assert r.status_code == 201, r.text
        return uuid.UUID(r.json()["id"])


async def _expire(pool, job_id) -> None:
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 second' where id = $1", job_id)


async def test_a_handler_reads_its_inputs_chunk_by_chunk(dsn, pool):
    video = os.urandom(2 * CHUNK + 7)
    async with serve(dsn) as server:
        job_id = await _upload(server, {"job": job_part(), "video": ("v.mp4", video, "video/mp4")})
    queue = Queue(pool)
    _, ctx = await claim_demo(pool, queue, job_id)
    assert await ctx.list_inputs() == [{"name": "video", "size": len(video), "content_type": "video/mp4"}]
    chunks = [c async for c in ctx.open_input("video")]
    assert [len(c) for c in chunks] == [CHUNK, CHUNK, 7] and b"".join(chunks) == video
    assert b"".join([c async for c in ctx.open_input("video", 10, 20)]) == video[10:20]
    with pytest.raises(files.FileNotFound, match="no input named 'audio'"):
        [c async for c in ctx.open_input("audio")]


async def test_outputs_are_fenced_by_generation_and_replaced_by_a_later_attempt(dsn, pool, demo_kind):
    queue = Queue(pool)
    job_id = (await queue.submit("demo", "t")).id
    first, ctx1 = await claim_demo(pool, queue, job_id)
    version = (await queue.get_job(job_id))["version"]

    async def pieces():
        for i in range(5):
            yield bytes([i]) * 100_000
    await ctx1.save_output("result.bin", pieces(), "application/x-test")
    view = await queue.get_job(job_id)
    assert view["outputs"] == [{"name": "result.bin", "size": 500_000, "content_type": "application/x-test"}]
    assert view["version"] == version + 1  # watchers see it

    # the lease is lost and another attempt takes the job: the old one's writes are refused
    await _expire(pool, job_id)
    second, ctx2 = await claim_demo(pool, queue, job_id)
    assert second.generation == first.generation + 1
    with pytest.raises(LeaseLost):
        await ctx1.save_output("result.bin", b"stale")
    with pytest.raises(LeaseLost):
        await ctx1.save_output("other", [b"stale"])
    view = await queue.get_job(job_id)
    assert view["outputs"] == [{"name": "result.bin", "size": 500_000, "content_type": "application/x-test"}]

    # one losing its lease while it writes: nothing of it shows
    async def slow():
        yield b"a" * CHUNK
        await _expire(pool, job_id)
        await queue.claim(["demo"], 1, "w3")
        yield b"b" * CHUNK
    with pytest.raises(LeaseLost):
        await ctx2.save_output("result.bin", slow())
    assert (await queue.get_job(job_id))["outputs"][0]["size"] == 500_000

    # the attempt that took it meanwhile (w3) replaces the output
    generation = await pool.fetchval("select generation from jobfeed.jobs where id = $1", job_id)
    assert generation == second.generation + 1
    ctx3 = Context(queue, dataclasses.replace(second, generation=generation), 30.0)
    await ctx3.save_output("result.bin", b"new", "text/plain")
    await ctx3.save_output("a.txt", iter([b"x", b"y"]))
    view = await queue.get_job(job_id)
    assert view["outputs"] == [{"name": "a.txt", "size": 2, "content_type": "application/octet-stream"},
                               {"name": "result.bin", "size": 3, "content_type": "text/plain"}]
    # the replaced output and the refused ones are gone
    assert await pool.fetchval("select count(*) from jobfeed.job_files where job_id = $1", job_id) == 2
    assert await pool.fetchval("select count(*) from jobfeed.file_chunks") == 2


async def test_an_unfinished_output_is_not_kept(dsn, pool, demo_kind):
    """An output whose saving stopped half way stayed stored, seen by nobody,
    until the job was swept: its chunks raised, or its worker died."""
    queue = Queue(pool)
    job_id = (await queue.submit("demo", "t")).id
    first, ctx = await claim_demo(pool, queue, job_id)

    async def broken():
        yield b"a" * CHUNK
        yield b"b" * CHUNK
        raise RuntimeError("the source went away")
    with pytest.raises(RuntimeError, match="went away"):
        await ctx.save_output("big.bin", broken())
    stored = "select count(*) from jobfeed.file_chunks"
    assert await pool.fetchval("select count(*) from jobfeed.job_files where job_id = $1", job_id) == 0
    assert await pool.fetchval(stored) == 0

    # a worker that died saving: its file is dropped by the next attempt's first save, of any name
    file_id = await pool.fetchval("select jobfeed.output_begin($1, $2, 'big.bin', 'text/plain', $3)",
                                  job_id, first.generation, CHUNK)
    assert await pool.fetchval("select jobfeed.file_put($1, 0, $2)", file_id, b"x" * CHUNK)
    await _expire(pool, job_id)
    second, ctx2 = await claim_demo(pool, queue, job_id)
    await ctx2.save_output("final.bin", b"done")
    assert [r["name"] for r in await pool.fetch("select name from jobfeed.job_files where job_id = $1", job_id)] \
        == ["final.bin"]
    assert await pool.fetchval(stored) == 1


async def test_bad_output_names_are_refused(dsn, pool, demo_kind):
    queue = Queue(pool)
    job_id = (await queue.submit("demo", "t")).id
    _, ctx = await claim_demo(pool, queue, job_id)
    for name in ("", "a/b", "x" * 201, "\x00"):
        with pytest.raises(ValueError):
            await ctx.save_output(name, b"x")
    with pytest.raises(ValueError):
        await ctx.save_output("ok", b"x", "not a type\n")


async def test_chunks_that_are_not_bytes_are_refused_not_stored_as_zeros(dsn, pool, demo_kind):
    """bytes(104) is 104 NULs: iterating b"hello" (ints) stored 532 zero bytes."""
    queue = Queue(pool)
    job_id = (await queue.submit("demo", "t")).id
    _, ctx = await claim_demo(pool, queue, job_id)

    async def ints():
        yield 1
    for chunks in (iter(b"hello"), [1, 2], ["text"], ints()):
        with pytest.raises(TypeError, match="an output's chunks are bytes"):
            await ctx.save_output("hello.txt", chunks, "text/plain")
    assert await pool.fetchval("select count(*) from jobfeed.job_files where job_id = $1", job_id) == 0
    await ctx.save_output("ok.txt", [b"he", bytearray(b"ll"), memoryview(b"o")], "text/plain")
    assert await pool.fetchval("select size from jobfeed.job_files where job_id = $1", job_id) == 5


async def _job_with_output(pool, data: bytes, name: str = "out.bin", content_type: str = "application/x-test"):
    queue = Queue(pool)
    job_id = (await queue.submit("demo", "t")).id
    _, ctx = await claim_demo(pool, queue, job_id)
    await ctx.save_output(name, data, content_type)
    return job_id


async def test_outputs_download_whole_and_in_ranges(dsn, pool, demo_kind):
    data = os.urandom(2 * CHUNK + 99)
    job_id = await _job_with_output(pool, data)
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        url = f"/api/jobs/{job_id}/outputs/out.bin"
        r = await client.get(url)
        assert r.status_code == 200 and r.content == data
        assert r.headers["content-type"] == "application/x-test"
        assert r.headers["content-length"] == str(len(data))
        assert r.headers["accept-ranges"] == "bytes"
        assert r.headers["content-disposition"].startswith("attachment")
        assert r.headers["content-security-policy"] == "sandbox"
        size = len(data)
        for header, (start, end) in [("bytes=0-0", (0, 1)), ("bytes=10-20", (10, 21)),
                                     (f"bytes={CHUNK - 5}-{CHUNK + 5}", (CHUNK - 5, CHUNK + 6)),
                                     (f"bytes={CHUNK}-", (CHUNK, size)), ("bytes=-100", (size - 100, size)),
                                     (f"bytes=-{size * 2}", (0, size)), (f"bytes=5-{size * 3}", (5, size)),
                                     ("bytes=5-" + "9" * 30, (5, size)), ("bytes=-" + "9" * 5000, (0, size)),
                                     ("bytes=" + "0" * 30 + "7-8", (7, 9))]:
            r = await client.get(url, headers={"range": header})
            assert r.status_code == 206, header
            assert r.content == data[start:end], header
            assert r.headers["content-range"] == f"bytes {start}-{end - 1}/{size}", header
            assert r.headers["content-length"] == str(end - start)
        for header in (f"bytes={size}-", "bytes=-0", f"bytes={size + 10}-{size + 20}", "bytes=" + "1" * 19 + "-"):
            r = await client.get(url, headers={"range": header})
            assert r.status_code == 416, header
            assert r.headers["content-range"] == f"bytes */{size}"
        # ignored: several ranges, another unit, nonsense; and If-Range naming another version
        for header in ("bytes=0-1,5-6", "items=0-1", "bytes=abc", "bytes=9-3"):
            r = await client.get(url, headers={"range": header})
            assert r.status_code == 200 and r.content == data, header
        head = await client.head(url, headers={"range": "bytes=0-9"})
        assert (head.status_code, head.headers["content-length"], head.content) == (206, "10", b"")
        r = await client.get(url, headers={"range": "bytes=0-9", "if-range": '"0"'})
        assert r.status_code == 200 and len(r.content) == size
        etag = r.headers["etag"]
        r = await client.get(url, headers={"range": "bytes=0-9", "if-range": etag})
        assert r.status_code == 206 and r.content == data[:10]
        # unknown output, unknown job
        assert (await client.get(f"/api/jobs/{job_id}/outputs/nope")).status_code == 404
        assert (await client.get(f"/api/jobs/{uuid.uuid4()}/outputs/out.bin")).status_code == 404
        assert (await client.get("/api/jobs/xyz/outputs/out.bin")).status_code == 404


async def test_an_empty_output_downloads(dsn, pool, demo_kind):
    job_id = await _job_with_output(pool, b"", "empty")
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get(f"/api/jobs/{job_id}/outputs/empty")
        assert (r.status_code, r.content, r.headers["content-length"]) == (200, b"", "0")
        assert (await client.get(f"/api/jobs/{job_id}/outputs/empty", headers={"range": "bytes=0-"})).status_code \
            == 416


async def test_outputs_follow_the_job_views_access_rules(dsn, pool, demo_kind):
    async with serve(dsn, requester_header="x-user", job_access="requesters") as server, \
            httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/api/jobs", json={"kind": "demo", "target": "private"}, headers={"x-user": "ann"})
        job_id, request_id = uuid.UUID(r.json()["id"]), r.json()["request_id"]
        _, ctx = await claim_demo(pool, Queue(pool), job_id)
        await ctx.save_output("o", b"secret")
        url = f"/api/jobs/{job_id}/outputs/o"
        assert (await client.get(url, headers={"x-user": "ann"})).content == b"secret"
        assert (await client.get(url, headers={"x-jobfeed-request": request_id})).content == b"secret"
        assert (await client.get(url + f"?request={request_id}")).content == b"secret"
        for headers in ({}, {"x-user": "bob"}, {"x-jobfeed-request": str(uuid.uuid4())},
                        {"authorization": "Bearer not-the-admin-token"}):
            r = await client.get(url, headers=headers)
            assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")
        # an admin sees every job in the admin views, and downloads its outputs here
        admin = {"authorization": f"Bearer {ADMIN_TOKEN}"}
        assert (await client.get(url, headers=admin)).content == b"secret"
        assert (await client.get(f"/api/jobs/{job_id}", headers=admin)).json()["id"] == str(job_id)


class PeakRss:
    """The largest resident set of a process, sampled while a block runs."""

    def __init__(self, pid: int):
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._task: asyncio.Task | None = None

    async def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, self.proc.memory_info().rss)
            await asyncio.sleep(0.005)

    async def __aenter__(self) -> "PeakRss":
        self.peak = self.proc.memory_info().rss
        self._task = asyncio.create_task(self._sample())
        return self

    async def __aexit__(self, *exc) -> None:
        assert self._task is not None
        self._task.cancel()
        self.peak = max(self.peak, self.proc.memory_info().rss)


async def test_a_20_mib_upload_and_download_pass_through_the_api_process(dsn, pool):
    """The API process (uvicorn as deployed) grows by far less than the file
    while 20 MiB go in, and again while they come out."""
    size = 20 * 1024 * 1024
    proc, url = await start_api_process(dsn)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            # warm up: every code path once, so that what grows later is the file
            r = await client.post("/api/jobs", files={"job": job_part(target="warm"), "f": ("f", b"x" * CHUNK * 3)})
            assert r.status_code == 201, r.text
            await pool.execute("select jobfeed.cancel($1)", uuid.UUID(r.json()["id"]))
            block = os.urandom(1024 * 1024)
            digest_in = hashlib.sha256()

            async def pieces():
                for _ in range(size // len(block)):
                    digest_in.update(block)
                    yield block
            head = b"--B\r\nContent-Disposition: form-data; name=\"job\"\r\nContent-Type: application/json\r\n\r\n" \
                   b'{"kind": "demo", "target": "big"}\r\n' \
                   b"--B\r\nContent-Disposition: form-data; name=\"video\"; filename=\"v\"\r\n\r\n"

            async def body():
                yield head
                async for piece in pieces():
                    yield piece
                yield b"\r\n--B--\r\n"
            before = psutil.Process(proc.proc.pid).memory_info().rss
            async with PeakRss(proc.proc.pid) as upload:
                r = await client.post("/api/jobs", content=body(),
                                      headers={"content-type": "multipart/form-data; boundary=B"})
            assert r.status_code == 201, r.text
            job_id = uuid.UUID(r.json()["id"])
            print(f"API RSS grew {(upload.peak - before) / 2**20:.1f} MiB during a 20 MiB upload")
            assert upload.peak - before < 8 * 1024 * 1024, (upload.peak - before) / 2**20
            [f] = await files.files_of(pool, job_id, "in")
            assert f.size == size
            assert await pool.fetchval("select count(*) from jobfeed.file_chunks where file_id = $1", f.id) \
                == size // CHUNK

            # out again as an output, downloaded through the API
            _, ctx = await claim_demo(pool, Queue(pool), job_id)
            await ctx.save_output("copy", ctx.open_input("video"), "video/mp4")
            digest_out = hashlib.sha256()
            before = psutil.Process(proc.proc.pid).memory_info().rss
            async with PeakRss(proc.proc.pid) as download:
                async with client.stream("GET", f"/api/jobs/{job_id}/outputs/copy") as r:
                    assert r.headers["content-length"] == str(size)
                    async for piece in r.aiter_bytes():
                        digest_out.update(piece)
            assert digest_out.hexdigest() == digest_in.hexdigest()
            print(f"API RSS grew {(download.peak - before) / 2**20:.1f} MiB during a 20 MiB download")
            assert download.peak - before < 8 * 1024 * 1024, (download.peak - before) / 2**20
    finally:
        await proc.stop()


async def test_sse_watchers_see_outputs_and_a_waiting_job_keeps_its_files(dsn, pool, demo_kind):
    queue = Queue(pool)
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        job_id = (await queue.submit("demo", "t")).id
        watcher = Watcher(client, f"/api/jobs/{job_id}/events")
        task = asyncio.create_task(watcher.run())
        await watcher.opened.wait()
        _, ctx = await claim_demo(pool, queue, job_id)
        async def seen(size: int):
            async def probe():
                return any(v["outputs"] and v["outputs"][0]["size"] == size for v in watcher.views)
            await eventually(probe)
        await ctx.save_output("a.bin", b"abc")
        await seen(3)
        await ctx.save_output("a.bin", b"abcd")  # replaced: a change of its own
        await seen(4)
        await queue.complete(job_id, ctx.job.generation, {"ok": True})
        await asyncio.wait_for(task, 10)
        sizes = [[o["size"] for o in v["outputs"]] for v in watcher.views]
        assert [3] in sizes and sizes[-1] == [4]
        versions = [v["version"] for v in watcher.views]
        assert versions == sorted(set(versions))  # each output change a version of its own

        # files with a job that waits for another: attached to it, committed with it
        r = await client.post("/api/jobs", files={"job": job_part(target="after", after=[str(job_id)]),
                                                  "f": ("f", b"later")})
        assert r.status_code == 201, r.text
        waiting = uuid.UUID(r.json()["id"])
        assert await input_bytes(pool, waiting, "f") == b"later"


async def test_an_uploaded_video_is_split_analysed_in_parts_and_merged(dsn, pool):
    """Upload a file; a worker process runs the parent, which splits it into 8
    children; each reads its slice of the parent's input and saves its part;
    the parent merges the parts into one output, downloaded whole and in a range."""
    from conftest import JOBFEED, worker_env
    from servers import Process

    video = os.urandom(3 * CHUNK + 12345)
    expected = video.translate(bytes(255 - b for b in range(256)))
    worker = Process(JOBFEED + ["worker", "--kinds", "clip,clip_part"],
                     worker_env(dsn, JOBFEED_TASKS="files_tasks", PYTHONPATH=str(Path(__file__).parent)))
    async with worker:
        await worker.start(ready=r"kinds ")
        async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            r = await client.post("/api/jobs", files={"job": job_part(kind="clip", target="holiday.mp4"),
                                                      "video": ("holiday.mp4", video, "video/mp4")})
            assert r.status_code == 201, r.text
            job_id = r.json()["id"]
            view = (await client.get(f"/api/jobs/{job_id}?wait=30s")).json()
            assert view["status"] == "completed", (view, worker.log)
            assert view["result"] == {"parts": 8}
            assert view["outputs"] == [{"name": "merged.bin", "size": len(video),
                                        "content_type": "application/octet-stream"}]
            got = await client.get(f"/api/jobs/{job_id}/outputs/merged.bin")
            assert got.content == expected
            part = await client.get(f"/api/jobs/{job_id}/outputs/merged.bin",
                                    headers={"range": f"bytes={CHUNK - 3}-{2 * CHUNK}"})
            assert part.status_code == 206 and part.content == expected[CHUNK - 3:2 * CHUNK + 1]
    children = await pool.fetch("select id from jobfeed.jobs where parent_id = $1", uuid.UUID(job_id))
    assert len(children) == 8


async def test_a_text_output_is_served_with_the_type_it_was_saved_with(dsn, pool, demo_kind):
    """Starlette added "; charset=utf-8" to every text/* type, declaring a
    Windows-1252 CSV as UTF-8."""
    csv = "naïve;€\n".encode("cp1252")
    plain = await _job_with_output(pool, csv, "out.csv", "text/csv")
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        for method in ("GET", "HEAD"):
            r = await client.request(method, f"/api/jobs/{plain}/outputs/out.csv")
            assert r.headers["content-type"] == "text/csv", method
        assert r.status_code == 200
        assert (await client.get(f"/api/jobs/{plain}/outputs/out.csv")).content == csv


@pytest.mark.parametrize("saved", ["text/javascript", "application/javascript; charset=utf-8", "Text/CSS",
                                   "application/x-ecmascript", "text/jscript"])
async def test_a_script_or_stylesheet_output_is_served_as_bytes(dsn, pool, demo_kind, saved):
    """A page of this origin loads <script src> and <link rel=stylesheet> of a
    JavaScript or CSS type whatever Content-Disposition says (nosniff lets
    exactly those through, and the CSP's 'self' allows this origin): such an
    output is served as bytes; the job's view still says what it was saved as."""
    job_id = await _job_with_output(pool, b"window.pwned = true", "s.js", saved)
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        r = await client.get(f"/api/jobs/{job_id}/outputs/s.js")
        assert r.status_code == 200 and r.content == b"window.pwned = true"
        assert r.headers["content-type"] == "application/octet-stream"
        assert r.headers["cross-origin-resource-policy"] == "same-origin"
        assert (await client.get(f"/api/jobs/{job_id}")).json()["outputs"][0]["content_type"] == saved
