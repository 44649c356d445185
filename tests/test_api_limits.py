"""Large bodies are refused before they are read whole, on a real server (the
in-process transport hands the app the whole body at once)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from servers import serve


@pytest.fixture
async def server(dsn):
    async with serve(dsn, max_payload=1000) as s:
        yield s


async def test_declared_length_over_the_limit_is_refused_before_the_body(server, pool):
    host, port = server.url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    started = time.monotonic()
    # 100 MB announced, none sent: the answer must come without waiting for it.
    writer.write(b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100000000\r\n\r\n{\"kind\": ")
    await writer.drain()
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 413 ")
    assert time.monotonic() - started < 3
    # ...and the server hangs up rather than drain 100 MB.
    await asyncio.wait_for(reader.read(), 5)
    assert reader.at_eof()
    writer.close()
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 0


async def test_chunked_body_is_counted_while_it_streams(server, pool):
    sent = 0

    async def endless():
        nonlocal sent
        yield b'{"kind": "demo", "target": "a", "payload": {"n": "'
        for _ in range(10_000):  # 10 MB if nobody stops it
            sent += 1024
            yield b"x" * 1024

    async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
        try:
            response = await client.post("/api/jobs", content=endless())
            assert response.status_code == 413
            assert response.json()["error"]["code"] == "payload_too_large"
        except (httpx.WriteError, httpx.RemoteProtocolError, httpx.ReadError):
            pass  # the server answered and closed while we were still sending
        assert sent < 1_000_000

        async def small():
            yield b'{"kind": "demo", '
            yield b'"target": "chunked"}'
        ok = await client.post("/api/jobs", content=small())
        assert ok.status_code == 201
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1
