"""Files in and out of band: multipart submissions stream into PostgreSQL
chunk by chunk, commit with their job or not at all, and are capped by
JOBFEED_MAX_UPLOAD; handlers read inputs and save outputs fenced by
generation; outputs download with ranges under the job view's access rules."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import os
import uuid
from pathlib import Path

import httpx
import psutil
import pytest

from jobfeed.worker import files
from jobfeed.worker.queue import Queue
from jobfeed.worker.tasks import Context, LeaseLost

from servers import Watcher, serve, start_api_process
from waiting import eventually

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


async def test_a_multipart_submission_stores_its_files_in_chunks_with_the_job(dsn, pool):
    video = os.urandom(3 * CHUNK + 1234)
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/api/jobs", files={"job": job_part(), "video": ("clip.mp4", video, "video/mp4"),
                                                  "notes": ("n.txt", b"hello", "text/plain"),
                                                  "empty": ("e", b"")})
        assert r.status_code == 201, r.text
        job_id = uuid.UUID(r.json()["id"])
        assert r.json()["outputs"] == []
    assert await input_bytes(pool, job_id, "video") == video
    assert await input_bytes(pool, job_id, "notes") == b"hello"
    assert await input_bytes(pool, job_id, "empty") == b""
    listed = {f.name: f for f in await files.files_of(pool, job_id, "in")}
    assert {n: (f.size, f.content_type) for n, f in listed.items()} == {
        "video": (len(video), "video/mp4"), "notes": (5, "text/plain"), "empty": (0, "application/octet-stream")}
    sizes = [row[0] for row in await pool.fetch(
        "select octet_length(data) from jobfeed.file_chunks where file_id = $1 order by seq", listed["video"].id)]
    assert sizes == [CHUNK, CHUNK, CHUNK, 1234]  # written a chunk at a time
    # a slice reads only what it asks for, across a chunk boundary
    part = b"".join([c async for c in files.open_file(pool, job_id, "in", "video", CHUNK - 10, CHUNK + 20)])
    assert part == video[CHUNK - 10:CHUNK + 20]
    with pytest.raises(files.FileNotFound, match="no input named 'nope'"):
        await input_bytes(pool, job_id, "nope")


def _multipart_of_size(size: int, target: str = "t") -> tuple[bytes, str]:
    """A multipart body of exactly `size` bytes: a job part and one file."""
    body, ctype = _multipart({"job": job_part(target=target), "f": ("f", b"")})
    filler = size - len(body)
    body, _ = _multipart({"job": job_part(target=target), "f": ("f", b"x" * filler)})
    assert len(body) == size, (len(body), size)
    return body, _multipart_ctype(body)


def _multipart_ctype(body: bytes) -> str:
    return "multipart/form-data; boundary=" + body.split(b"\r\n", 1)[0][2:].decode()


def _chunked(body: bytes, piece: int = 65536):
    async def pieces():
        for i in range(0, len(body), piece):
            yield body[i:i + piece]
    return pieces()


async def test_over_max_upload_is_413_and_stores_nothing(dsn, pool):
    limit = CHUNK * 2
    async with serve(dsn, max_upload=limit) as server, httpx.AsyncClient(base_url=server.url) as client:
        # declared too large: refused before the body, and the server hangs up
        host, port = server.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        body, ctype = _multipart_of_size(limit + 1)
        writer.write(f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
                     f"Content-Length: {limit + 1}\r\n\r\n".encode() + body[:1000])
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 413 ")
        await asyncio.wait_for(reader.read(), 5)
        writer.close()

        # chunked (no Content-Length): counted while streaming; one byte over is refused
        r = await client.post("/api/jobs", content=_chunked(body), headers={"content-type": ctype})
        assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large"), r.text
        assert await stored(pool) == {"jobs": 0, "files": 0, "chunks": 0}

        # exactly the limit passes, declared or not: it counts the whole body
        body, ctype = _multipart_of_size(limit, "chunked")
        r = await client.post("/api/jobs", content=_chunked(body), headers={"content-type": ctype})
        assert r.status_code == 201, r.text
        body, ctype = _multipart_of_size(limit, "declared")
        r = await client.post("/api/jobs", content=body, headers={"content-type": ctype})
        assert r.status_code == 201, r.text
        assert (await stored(pool))["jobs"] == 2


def _multipart(parts: dict) -> tuple[bytes, str]:
    request = httpx.Request("POST", "http://x/", files=parts)
    return request.read(), request.headers["content-type"]


async def test_a_duplicate_upload_joins_the_job_and_stores_none_of_its_files(dsn, pool):
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        first = await client.post("/api/jobs", files={"job": job_part(), "f": ("f", b"first" * 1000)})
        assert first.status_code == 201
        before = await stored(pool)
        second = await client.post("/api/jobs", files={"job": job_part(), "f": ("f", os.urandom(CHUNK + 5)),
                                                       "g": ("g", b"more")})
        assert second.status_code == 200, second.text
        assert second.json()["deduplicated"] is True and second.json()["id"] == first.json()["id"]
        assert second.json()["request_id"] != first.json()["request_id"]
    assert await stored(pool) == before
    job_id = uuid.UUID(first.json()["id"])
    assert await input_bytes(pool, job_id, "f") == b"first" * 1000
    assert [f.name for f in await files.files_of(pool, job_id, "in")] == ["f"]


@pytest.mark.parametrize("parts, status, code", [
    ({"f": ("f", b"x")}, 400, "invalid_multipart"),                                   # no job part
    ({"job": (None, b"{not json", "application/json"), "f": ("f", b"x")}, 400, "invalid_json"),
    ({"job": job_part(kind="nope"), "f": ("f", b"x")}, 422, "unknown_kind"),
    ({"job": job_part(), "a/b": ("f", b"x")}, 422, "invalid_file_name"),
    ({"job": job_part(), "x" * 201: ("f", b"x")}, 422, "invalid_file_name"),
    ({"job": job_part(), "f": ("f", b"x", "text/\x7f")}, 422, "invalid_file_name"),
    ({"job": job_part(), **{f"f{i}": ("f", b"x") for i in range(65)}}, 422, "too_many_files"),
])
async def test_bad_multipart_is_a_clear_4xx_and_stores_nothing(dsn, pool, parts, status, code):
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/api/jobs", files=parts)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    assert await stored(pool) == {"jobs": 0, "files": 0, "chunks": 0}


async def test_malformed_multipart_bodies(dsn, pool, caplog):
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        body, ctype = _multipart({"job": job_part(), "f": ("f", b"x" * 100)})
        cases = [
            (body[:-20], ctype),                                   # no closing boundary
            (body, "multipart/form-data"),                         # no boundary
            (b"garbage" * 10, ctype),
            (body.replace(b"form-data; name=\"f\"", b"attachment"), ctype),  # a part without a name
            (body.replace(b"name=\"f\"", b"name=\"job\""), ctype),  # two job parts
        ]
        for content, content_type in cases:
            r = await client.post("/api/jobs", content=content, headers={"content-type": content_type})
            assert r.status_code == 400, (content[:80], r.text)
            assert r.json()["error"]["code"] == "invalid_multipart"
        # another site's form may post multipart without a preflight: refused
        r = await client.post("/api/jobs", content=body, headers={"content-type": ctype,
                                                                  "origin": "https://evil.example"})
        assert (r.status_code, r.json()["error"]["code"]) == (403, "csrf")
    assert await stored(pool) == {"jobs": 0, "files": 0, "chunks": 0}
    # a client's garbage is answered, not logged
    assert not [r for r in caplog.records if r.name.startswith("python_multipart") and r.levelno >= logging.WARNING]


async def test_uploads_need_the_api_token_when_one_is_set(dsn, pool):
    async with serve(dsn, api_token="api-token-for-tests") as server, \
            httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/api/jobs", files={"job": job_part(), "f": ("f", b"x")})
        assert r.status_code == 401
        r = await client.post("/api/jobs", files={"job": job_part(), "f": ("f", b"x")},
                              headers={"authorization": "Bearer api-token-for-tests"})
        assert r.status_code == 201
    assert (await stored(pool))["files"] == 1


async def test_an_upload_commits_with_its_job(dsn, pool):
    """While the body streams in, neither the job nor its files exist for anyone else."""
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        body, ctype = _multipart({"job": job_part(), "f": ("f", os.urandom(CHUNK * 4))})
        seen = []

        async def pieces():
            for i in range(0, len(body), 65536):
                yield body[i:i + 65536]
                if i > CHUNK * 2:  # files are being written meanwhile
                    seen.append(await stored(pool))
        r = await client.post("/api/jobs", content=pieces(), headers={"content-type": ctype})
        assert r.status_code == 201
        assert seen and all(s == {"jobs": 0, "files": 0, "chunks": 0} for s in seen)
        assert await stored(pool) == {"jobs": 1, "files": 1, "chunks": 4}


async def test_files_go_with_their_job_when_swept(dsn, pool):
    q = Queue(pool)
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/api/jobs", files={"job": job_part(), "f": ("f", os.urandom(CHUNK + 1))})
        job_id = uuid.UUID(r.json()["id"])
    await pool.execute("select jobfeed.cancel($1)", job_id)
    await pool.execute("update jobfeed.jobs set finished_at = now() - interval '8 days' where id = $1", job_id)
    assert await q.delete_finished(7 * 86400) == 1
    assert await stored(pool) == {"jobs": 0, "files": 0, "chunks": 0}


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- handlers: inputs and outputs

async def _upload(server, parts: dict) -> uuid.UUID:
    async with httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/api/jobs", files=parts)
        assert r.status_code == 201, r.text
        return uuid.UUID(r.json()["id"])


async def _claim(pool, queue: Queue, job_id):
    [job] = await queue.claim(["demo"], 1, "w1")
    assert job.id == job_id
    return job, Context(queue, job, 30.0)


async def _expire(pool, job_id) -> None:
    await pool.execute("update jobfeed.jobs set lease_until = now() - interval '1 second' where id = $1", job_id)


async def test_a_handler_reads_its_inputs_chunk_by_chunk(dsn, pool):
    video = os.urandom(2 * CHUNK + 7)
    async with serve(dsn) as server:
        job_id = await _upload(server, {"job": job_part(), "video": ("v.mp4", video, "video/mp4")})
    queue = Queue(pool)
    _, ctx = await _claim(pool, queue, job_id)
    assert await ctx.list_inputs() == [{"name": "video", "size": len(video), "content_type": "video/mp4"}]
    chunks = [c async for c in ctx.open_input("video")]
    assert [len(c) for c in chunks] == [CHUNK, CHUNK, 7] and b"".join(chunks) == video
    assert b"".join([c async for c in ctx.open_input("video", 10, 20)]) == video[10:20]
    with pytest.raises(files.FileNotFound, match="no input named 'audio'"):
        [c async for c in ctx.open_input("audio")]


async def test_outputs_are_fenced_by_generation_and_replaced_by_a_later_attempt(dsn, pool, demo_kind):
    queue = Queue(pool)
    job_id = (await queue.submit("demo", "t")).id
    first, ctx1 = await _claim(pool, queue, job_id)
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
    second, ctx2 = await _claim(pool, queue, job_id)
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


async def test_bad_output_names_are_refused(dsn, pool, demo_kind):
    queue = Queue(pool)
    job_id = (await queue.submit("demo", "t")).id
    _, ctx = await _claim(pool, queue, job_id)
    for name in ("", "a/b", "x" * 201, "\x00"):
        with pytest.raises(ValueError):
            await ctx.save_output(name, b"x")
    with pytest.raises(ValueError):
        await ctx.save_output("ok", b"x", "not a type\n")


# ---------------------------------------------------------------- downloads

async def _job_with_output(pool, data: bytes, name: str = "out.bin", content_type: str = "application/x-test"):
    queue = Queue(pool)
    job_id = (await queue.submit("demo", "t")).id
    _, ctx = await _claim(pool, queue, job_id)
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
                                     (f"bytes=-{size * 2}", (0, size)), (f"bytes=5-{size * 3}", (5, size))]:
            r = await client.get(url, headers={"range": header})
            assert r.status_code == 206, header
            assert r.content == data[start:end], header
            assert r.headers["content-range"] == f"bytes {start}-{end - 1}/{size}", header
            assert r.headers["content-length"] == str(end - start)
        for header in (f"bytes={size}-", "bytes=-0", f"bytes={size + 10}-{size + 20}"):
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
        _, ctx = await _claim(pool, Queue(pool), job_id)
        await ctx.save_output("o", b"secret")
        url = f"/api/jobs/{job_id}/outputs/o"
        assert (await client.get(url, headers={"x-user": "ann"})).content == b"secret"
        assert (await client.get(url, headers={"x-jobfeed-request": request_id})).content == b"secret"
        assert (await client.get(url + f"?request={request_id}")).content == b"secret"
        for headers in ({}, {"x-user": "bob"}, {"x-jobfeed-request": str(uuid.uuid4())}):
            r = await client.get(url, headers=headers)
            assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found")


# ---------------------------------------------------------------- memory: files pass through, never whole

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
            _, ctx = await _claim(pool, Queue(pool), job_id)
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


# ---------------------------------------------------------------- jobfeed submit --file

async def test_the_command_line_uploads_files(dsn, pool, tmp_path):
    from test_cli import jobfeed

    clip = tmp_path / "clip.mp4"
    data = os.urandom(CHUNK + 17)
    clip.write_bytes(data)
    (tmp_path / "notes.txt").write_bytes(b"hi")
    out = jobfeed(dsn, "submit", "demo", "t", "--file", f"video={clip}", "--file", f"notes={tmp_path / 'notes.txt'}")
    assert out.returncode == 0, out.stderr
    job_id = uuid.UUID(out.stdout.strip())
    assert {f.name: (f.size, f.content_type) for f in await files.files_of(pool, job_id, "in")} == {
        "video": (len(data), "video/mp4"), "notes": (2, "text/plain")}
    assert await input_bytes(pool, job_id, "video") == data
    # a duplicate stores none
    again = jobfeed(dsn, "submit", "demo", "t", "--file", f"other={clip}")
    assert again.returncode == 0 and uuid.UUID(again.stdout.strip()) == job_id
    assert await pool.fetchval("select count(*) from jobfeed.job_files") == 2
    for bad, message in ((f"video{clip}", "NAME=PATH"), (f"a/b={clip}", "file name"),
                         (f"v={tmp_path / 'missing'}", "NAME=PATH")):
        out = jobfeed(dsn, "submit", "demo", "t2", "--file", bad)
        assert out.returncode != 0 and message in out.stderr and "Traceback" not in out.stderr
    out = jobfeed(dsn, "submit", "demo", "t2", "--file", f"v={clip}", JOBFEED_MAX_UPLOAD="1KiB")
    assert out.returncode != 0 and "JOBFEED_MAX_UPLOAD" in out.stderr
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1


async def test_sse_watchers_see_outputs_and_a_waiting_job_keeps_its_files(dsn, pool, demo_kind):
    queue = Queue(pool)
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=20) as client:
        job_id = (await queue.submit("demo", "t")).id
        watcher = Watcher(client, f"/api/jobs/{job_id}/events")
        task = asyncio.create_task(watcher.run())
        await watcher.opened.wait()
        _, ctx = await _claim(pool, queue, job_id)
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


async def test_slow_uploads_never_take_every_pool_connection(dsn, pool):
    """Each upload holds a connection while its body streams in; a dozen slow
    ones at once still leave the pool (10) to other requests."""
    go = asyncio.Event()
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        async def slow_upload(n: int) -> int:
            body, ctype = _multipart({"job": job_part(target=f"slow-{n}"), "f": ("f", b"x" * 100_000)})

            async def pieces():
                yield body[:50_000]
                await go.wait()
                yield body[50_000:]
            r = await client.post("/api/jobs", content=pieces(), headers={"content-type": ctype})
            return r.status_code
        uploads = [asyncio.create_task(slow_upload(n)) for n in range(12)]
        # the uploads that got a connection hold it in an open transaction
        await eventually(lambda: pool.fetchval(
            "select count(*) >= 5 from pg_stat_activity where datname = current_database()"
            " and state = 'idle in transaction'"), what="slow uploads holding their connections")
        r = await asyncio.wait_for(client.get(f"/api/jobs/{uuid.uuid4()}"), 5)
        assert r.status_code == 404
        go.set()
        assert await asyncio.gather(*uploads) == [201] * 12


async def test_racing_uploads_for_one_target_make_one_job_with_one_set_of_files(dsn, pool):
    contents = [os.urandom(CHUNK + 1 + n) for n in range(8)]
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        answers = await asyncio.gather(*(
            client.post("/api/jobs", files={"job": job_part(target="race"), "f": ("f", data)}) for data in contents))
    assert sorted(r.status_code for r in answers) == [200] * 7 + [201]
    assert len({r.json()["id"] for r in answers}) == 1
    [winner] = [contents[n] for n, r in enumerate(answers) if r.status_code == 201]
    job_id = uuid.UUID(answers[0].json()["id"])
    assert await input_bytes(pool, job_id, "f") == winner
    assert await stored(pool) == {"jobs": 1, "files": 1, "chunks": 2}


# ---------------------------------------------------------------- fan-out and fan-in with files, end to end

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
