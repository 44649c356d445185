"""Large bodies are refused before they are read whole, on a real server (the
in-process transport hands the app the whole body at once)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from jobfeed.api.app import create_app
from servers import FAST, ThreadServer, make_settings, serve


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


class BodyMeter:
    """ASGI middleware counting the body bytes the app has read of each request,
    and how many it had read when it answered: what the server took in, which
    the client cannot see (what it sends partly waits in kernel buffers)."""

    def __init__(self, app, requests: list):
        self.app = app
        self.requests = requests

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        seen = {"read": 0, "largest": 0, "status": None, "read_at_answer": None}
        self.requests.append(seen)

        async def counting_receive():
            message = await receive()
            if message["type"] == "http.request":
                n = len(message.get("body", b""))
                seen["read"] += n
                seen["largest"] = max(seen["largest"], n)
            return message

        async def watching_send(message):
            if message["type"] == "http.response.start":
                seen["status"], seen["read_at_answer"] = message["status"], seen["read"]
            await send(message)

        await self.app(scope, counting_receive, watching_send)


async def test_chunked_body_is_counted_while_it_streams(dsn, pool):
    """A chunked body declares no length: the server counts while it reads and
    answers 413 at the first chunk past the limit, having read no more than
    that. Judged by what the app read, not by what the client got to send
    (which depends on socket buffers and load: it once measured 1.1 MB)."""
    requests: list[dict] = []
    app = create_app(make_settings(dsn, max_payload=1000), FAST)
    app.add_middleware(BodyMeter, requests=requests)
    limit = 1000 + 16 * 1024  # the payload limit plus room for kind, target and JSON (api/state.py)
    async with ThreadServer(app) as server:
        host, port = server.url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(b"POST /api/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")

        def chunk(data: bytes) -> bytes:
            return b"%x\r\n%s\r\n" % (len(data), data)

        async def send_until_refused():
            writer.write(chunk(b'{"kind": "demo", "target": "a", "payload": {"n": "'))
            for _ in range(10_000):  # 10 MB if nobody stops it
                writer.write(chunk(b"x" * 1024))
                await writer.drain()

        try:
            await asyncio.wait_for(send_until_refused(), 30)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the server answered and hung up while we were still sending
        except asyncio.TimeoutError:
            pytest.fail("the server neither refused the body nor hung up")
        finally:
            writer.close()
        [seen] = requests
        assert seen["status"] == 413
        assert limit < seen["read_at_answer"] <= limit + seen["largest"]
        assert seen["read"] == seen["read_at_answer"]  # nothing read after answering

        async with httpx.AsyncClient(base_url=server.url, timeout=10) as client:
            async def small():
                yield b'{"kind": "demo", '
                yield b'"target": "chunked"}'
            ok = await client.post("/api/jobs", content=small(), headers={"Content-Type": "application/json"})
            assert ok.status_code == 201
    assert await pool.fetchval("select count(*) from jobfeed.jobs") == 1
