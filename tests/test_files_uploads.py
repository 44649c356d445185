"""Files in: multipart submissions stream into PostgreSQL chunk by chunk,
commit with their job or not at all, are capped by JOBFEED_MAX_UPLOAD, and
share a held target's job without storing theirs; the command line uploads too."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid

import httpx
import pytest

from jobfeed.worker import files
from jobfeed.worker.queue import Queue

from file_parts import CHUNK, input_bytes, job_part, multipart, stored
from servers import serve
from waiting import eventually


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
    # a negative offset is the caller's mistake, not a file gone
    with pytest.raises(ValueError, match="count bytes from 0"):
        [c async for c in files.open_file(pool, job_id, "in", "notes", -1)]
    with pytest.raises(files.FileNotFound, match="no input named 'nope'"):
        await input_bytes(pool, job_id, "nope")


def _multipart_of_size(size: int, target: str = "t") -> tuple[bytes, str]:
    """A multipart body of exactly `size` bytes: a job part and one file."""
    body, ctype = multipart({"job": job_part(target=target), "f": ("f", b"")})
    filler = size - len(body)
    body, _ = multipart({"job": job_part(target=target), "f": ("f", b"x" * filler)})
    assert len(body) == size, (len(body), size)
    return body, _multipart_ctype(body)


def _multipart_ctype(body: bytes) -> str:
    return "multipart/form-data; boundary=" + body.split(b"\r\n", 1)[0][2:].decode()


def _chunked(body: bytes, piece: int = 65536):
    async def pieces():
        for i in range(0, len(body), piece):
            yield body[i:i + piece]
    return pieces()


async def test_a_client_that_sends_its_whole_body_before_reading_gets_the_413(dsn, pool):
    """httpx (as requests) reads no answer until it has sent the body. The
    server answered 413 and hung up with the body unread: the reset reached
    httpx as a ReadError, not the 413. It now drains a refused body (up to a
    bound) before hanging up. Bodies past the loopback's socket buffers."""
    limit = CHUNK * 2
    async with serve(dsn, max_upload=limit, max_payload=1000) as server, \
            httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        body, ctype = _multipart_of_size(6 * 1024 * 1024)
        r = await client.post("/api/jobs", content=body, headers={"content-type": ctype})
        assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large"), r.text
        r = await client.post("/api/jobs", content=_chunked(body), headers={"content-type": ctype})
        assert r.status_code == 413, r.text
        big = b'{"kind": "demo", "target": "' + b"x" * 6 * 1024 * 1024 + b'"}'
        r = await client.post("/api/jobs", content=big, headers={"content-type": "application/json"})
        assert (r.status_code, r.json()["error"]["code"]) == (413, "payload_too_large"), r.text
        # the connection after a drain is not reused: a new one answers as usual
        r = await client.get("/healthz")
        assert r.status_code == 200
        # ...and the drain is bounded: a body far over the limit is cut off
        host, port = server.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(f"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: {ctype}\r\n"
                     f"Content-Length: {1 << 30}\r\n\r\n".encode())
        sent = 0
        with pytest.raises(ConnectionError):
            while sent < 1 << 30:
                writer.write(b"x" * 65536)
                await asyncio.wait_for(writer.drain(), 10)
                sent += 65536
        assert sent < 64 * 1024 * 1024, sent
        writer.close()
    assert await stored(pool) == {"jobs": 0, "files": 0, "chunks": 0}


async def test_bytes_that_are_not_http_in_a_body_being_drained_end_it_quietly(dsn, caplog):
    """A chunked body refused with 413 is drained; a malformed chunk in it made
    the protocol answer 400 after its FIN, and asyncio logged the error
    ("Cannot call write() after write_eof()"). It now hangs up, silently."""
    part = b'--b\r\nContent-Disposition: form-data; name="f"; filename="f"\r\n\r\n'
    async with serve(dsn, max_upload=CHUNK * 2) as server:
        host, port = server.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n"
                     b"Content-Type: multipart/form-data; boundary=b\r\n\r\n"
                     + b"%x\r\n" % len(part) + part + b"\r\n"
                     + b"10000\r\n" + b"x" * 0x10000 + b"\r\n")
        writer.write(b"".join(b"10000\r\n" + b"x" * 0x10000 + b"\r\n" for _ in range(12)))
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
        assert head.startswith(b"HTTP/1.1 413 "), head
        writer.write(b"not a chunk size\r\n" * 10)
        await writer.drain()
        rest = await asyncio.wait_for(reader.read(), 5)
        assert b"payload_too_large" in rest and b"HTTP/1.1" not in rest, rest  # nothing after the 413
        writer.close()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


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
    ({"job": job_part(), "f": ("f", b"x", "text/\x7f")}, 422, "invalid_content_type"),
    ({"job": job_part(), "f": ("f", b"x", "bogus")}, 422, "invalid_content_type"),
    ({"job": job_part(), **{f"f{i}": ("f", b"x") for i in range(65)}}, 422, "too_many_files"),
])
async def test_bad_multipart_is_a_clear_4xx_and_stores_nothing(dsn, pool, parts, status, code):
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        r = await client.post("/api/jobs", files=parts)
        assert (r.status_code, r.json()["error"]["code"]) == (status, code), r.text
    assert await stored(pool) == {"jobs": 0, "files": 0, "chunks": 0}


async def test_malformed_multipart_bodies(dsn, pool, caplog):
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url) as client:
        body, ctype = multipart({"job": job_part(), "f": ("f", b"x" * 100)})
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
        # also behind a first Origin that is ours: every copy must be
        r = await client.post("/api/jobs", content=body, headers=[
            ("content-type", ctype), ("origin", server.url), ("origin", "https://evil.example")])
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
        body, ctype = multipart({"job": job_part(), "f": ("f", os.urandom(CHUNK * 4))})
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


async def test_slow_uploads_never_take_every_pool_connection(dsn, pool):
    """Each upload holds a connection while its body streams in; a dozen slow
    ones at once still leave the pool (10) to other requests."""
    go = asyncio.Event()
    async with serve(dsn) as server, httpx.AsyncClient(base_url=server.url, timeout=30) as client:
        async def slow_upload(n: int) -> int:
            body, ctype = multipart({"job": job_part(target=f"slow-{n}"), "f": ("f", b"x" * 100_000)})

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
