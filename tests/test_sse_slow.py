"""Job streams are written by the feed itself (api/jobstream.py): a client that
does not read holds up nobody, costs at most one pending view, and still gets
the final view and the end once it reads; a client that goes away, reading or
not, leaves no subscription behind."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest

from servers import EventParser, Watcher, serve
from servers import http, server  # noqa: F401  (fixtures)
from waiting import eventually

BIG = "x" * 100_000  # one progress message: 40 of them are more than any socket buffers


class SilentClient:
    """A stream over a bare socket with a small receive buffer, not read until
    read_all() is called."""

    def __init__(self, url: str, path: str):
        host, port = url.removeprefix("http://").split(":")
        self.address, self.path = (host, int(port)), path
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.setblocking(False)

    async def open(self) -> None:
        loop = asyncio.get_running_loop()
        await loop.sock_connect(self.sock, self.address)
        await loop.sock_sendall(self.sock, f"GET {self.path} HTTP/1.1\r\nHost: t\r\n\r\n".encode())

    async def read_all(self, timeout: float = 15) -> list[dict]:
        """Everything up to the end of the response -> the job views it carried."""
        loop = asyncio.get_running_loop()
        data = b""
        while not data.endswith(b"\r\n0\r\n\r\n"):
            chunk = await asyncio.wait_for(loop.sock_recv(self.sock, 1 << 20), timeout)
            assert chunk, "the server closed the connection before the end of the response"
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        text = b""
        while True:  # chunked transfer coding
            size_line, _, body = body.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                break
            text, body = text + body[:size], body[size + 2:]
        parser, views = EventParser(), []
        for line in text.decode().split("\n"):
            event = parser.line(line)
            if event is not None and event.event == "job":
                views.append(event.json())
        return views

    def abort(self) -> None:
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        self.sock.close()


async def submit_and_claim(http, queue, target: str):
    job = (await http.post("/api/jobs", json={"kind": "demo", "target": target})).json()
    (claimed,) = await queue.claim(["demo"], 1, "w")
    return job, claimed


def reported(watcher: Watcher) -> float | None:
    progress = watcher.views[-1]["progress"] if watcher.views else None
    return progress["done"] if progress else None


async def test_a_client_that_does_not_read_holds_up_nobody_and_gets_the_end(dsn, queue):
    # No pings: a ping waiting on the full socket would hold the stream back
    # by itself, whatever the views' own writes do.
    async with serve(dsn, sse_ping=3600) as server, httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        feed = server.app.state.services.feed
        job, claimed = await submit_and_claim(http, queue, "slow")
        path = f"/api/jobs/{job['id']}/events"
        silent = SilentClient(server.url, path)
        await silent.open()
        reader = Watcher(http, path)
        task = asyncio.create_task(reader.run())
        await eventually(lambda: asyncio.sleep(0, feed.open_streams == 2), timeout=5, what="two streams")

        for done in range(1, 41):
            await queue.progress(claimed.id, claimed.generation, done, 40, BIG)
            # the reader gets every view while the silent client's socket is full
            await eventually(lambda done=done: asyncio.sleep(0, reported(reader) == done), timeout=5, interval=0.01,
                             what=f"progress {done} at the reading client")
        assert feed.behind_streams == 1
        await queue.complete(claimed.id, claimed.generation, {"ok": True})
        await asyncio.wait_for(task, 5)
        assert reader.ended and reader.views[-1]["status"] == "completed"
        assert len(reader.views) == 42  # processing, 40 reports, completed

        views = await silent.read_all()
        silent.abort()
        await eventually(lambda: asyncio.sleep(0, feed.open_streams == 0 and feed.watched_jobs == 0), timeout=5,
                         what="no stream left")
    # Its first views, then only the newest: the reports it could not take were dropped, not queued.
    versions = [v["version"] for v in views]
    assert versions == sorted(set(versions)), versions
    assert views[-1]["status"] == "completed" and views[-1]["result"] == {"ok": True}
    assert len(views) < 42, versions


@pytest.mark.parametrize("behind", [False, True], ids=["reading", "behind"])
async def test_a_client_that_goes_away_leaves_no_subscription(server, queue, behind):
    feed = server.app.state.services.feed
    async with httpx.AsyncClient(base_url=server.url, timeout=10) as http:
        job, claimed = await submit_and_claim(http, queue, f"gone-{behind}")
        silent = SilentClient(server.url, f"/api/jobs/{job['id']}/events")
        await silent.open()
        await eventually(lambda: asyncio.sleep(0, feed.open_streams == 1), timeout=5, what="the stream")
        if behind:
            reports = 0

            async def report_until_behind() -> bool:
                nonlocal reports
                reports += 1
                await queue.progress(claimed.id, claimed.generation, reports, 1000, BIG)
                return feed.behind_streams == 1

            await eventually(report_until_behind, timeout=10, interval=0.02, what="a full socket")
        silent.abort()
        await eventually(lambda: asyncio.sleep(0, feed.open_streams == 0 and feed.watched_jobs == 0), timeout=5,
                         what="the subscription cleaned up")
        metrics = (await http.get("/metrics")).text
    assert 'jobfeed_sse_streams{stream="job"} 0' in metrics
    assert feed.behind_streams == 0


async def test_views_go_straight_to_the_servers_request_cycle_not_through_a_send_each(server, http, queue):
    """Under httptools' request cycle (jobfeed's protocol, as here, or
    uvicorn's own) the feed writes each view and each ping to each stream as
    an HTTP chunk straight to the cycle (api/http_protocol.py, write_chunk),
    without an ASGI send each: a fan-out or a round of pings writes one to
    each of thousands of streams. The client reads them as any others; only
    the end goes through send."""
    feed = server.app.state.services.feed
    job, claimed = await submit_and_claim(http, queue, "direct")
    reader = Watcher(http, f"/api/jobs/{job['id']}/events")
    task = asyncio.create_task(reader.run())
    await eventually(lambda: asyncio.sleep(0, len(reader.views) == 1), timeout=5, what="the first view")
    (sub,) = feed._watch[job["id"]]
    stream = sub._writer
    sent: list[dict] = []
    send = stream._send

    async def counted(message) -> None:
        sent.append(message)
        await send(message)

    stream._send = counted
    for done in range(1, 4):
        await queue.progress(claimed.id, claimed.generation, done, 3, None)
        await eventually(lambda done=done: asyncio.sleep(0, reported(reader) == done), timeout=5, interval=0.01,
                         what=f"progress {done}")
    pinged = len(reader.comments)  # pings too (every 0.2 s here)
    await eventually(lambda: asyncio.sleep(0, len(reader.comments) >= pinged + 2), timeout=5, what="two pings")
    assert sent == []
    await queue.complete(claimed.id, claimed.generation, {"ok": True})
    await asyncio.wait_for(task, 5)
    assert [v["status"] for v in reader.views] == ["processing"] * 4 + ["completed"]
    assert [(m["body"], m["more_body"]) for m in sent] == [(b"", False)]
