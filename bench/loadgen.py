"""Load generators, run as a process of their own beside the server under test
(loopback only, bounded in count and time). Plain asyncio sockets: httpx would
cost more CPU than the servers it measures on a 2-core machine.

    python -m bench.loadgen http --url URL --mode new|dup [--connections C] [--seconds S]
    python -m bench.loadgen sse --url URL --paths FILE

`http` prints one JSON line: requests, statuses, rate, latency percentiles.
`sse` opens one stream per path in FILE (a JSON list), prints {"opened": ...}
once each has its first event, then obeys commands on stdin, one per line:
    mark                      remember how many events every stream has had
    wait SECONDS PREFIX|*     wait until every stream (whose path starts with
                              PREFIX) has an event after the mark; prints {"got", "of"}
    ends SECONDS              wait until every stream has ended; prints {"ended", "of"}
    dump FILE                 write the receipt times after the mark, per stream
    quit                      close every stream and exit"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time


def _pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[max(0, min(len(s) - 1, int(round(p / 100 * len(s) + 0.5)) - 1))]


def host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("http://").rstrip("/").split(":")
    return host, int(port)


async def read_answer(reader: asyncio.StreamReader) -> int:
    """One HTTP/1.1 answer off a keep-alive connection: its status (its body,
    sized by Content-Length, read and dropped)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        if line[:15].lower() == b"content-length:":
            length = int(line[15:])
    if length:
        await reader.readexactly(length)
    return int(head[9:12])


# ---------------------------------------------------------------- HTTP submit

async def http_load(url: str, mode: str, connections: int, seconds: float, warmup: float,
                    dup_targets: int, kind: str) -> dict:
    host, port = host_port(url)
    statuses: dict[int, int] = {}
    latencies: list[float] = []
    counted = 0
    t_start = time.perf_counter() + warmup
    t_end = t_start + seconds

    def body(conn: int, seq: int) -> bytes:
        target = f"d{(conn * 7919 + seq) % dup_targets}" if mode == "dup" else f"n{conn}-{seq}"
        return json.dumps({"kind": kind, "target": target, "payload": {"i": seq}}).encode()

    async def client(conn: int) -> None:
        nonlocal counted
        reader, writer = await asyncio.open_connection(host, port)
        seq = 0
        try:
            while True:
                now = time.perf_counter()
                if now >= t_end:
                    return
                seq += 1
                data = body(conn, seq)
                writer.write(b"POST /api/jobs HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                             b"Content-Length: %d\r\n\r\n%s" % (host.encode(), len(data), data))
                status = await read_answer(reader)
                done = time.perf_counter()
                if now >= t_start:  # after the warm-up, and started within the window
                    statuses[status] = statuses.get(status, 0) + 1
                    latencies.append((done - now) * 1000)
                    counted += 1
        finally:
            writer.close()

    await asyncio.gather(*(client(c) for c in range(connections)))
    elapsed = max(time.perf_counter(), t_end) - t_start
    return {"mode": mode, "connections": connections, "seconds": seconds, "requests": counted,
            "rate": counted / seconds, "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "p50_ms": _pct(latencies, 50), "p99_ms": _pct(latencies, 99), "elapsed": elapsed}


# ---------------------------------------------------------------- SSE watchers

class Stream:
    __slots__ = ("path", "times", "mark", "ended", "status", "error")

    def __init__(self, path: str):
        self.path = path
        self.times: list[float] = []   # receipt time of each event (not comments)
        self.mark = 0
        self.ended = False
        self.status = 0
        self.error = ""


class Watch(asyncio.Protocol):
    """One stream, parsed as its bytes arrive: an event's receipt time is taken
    in data_received, with no task woken per event (10,000 streams of tasks
    would make this client, not the server, the slowest part)."""

    def __init__(self, stream: Stream, request: bytes, opened: asyncio.Event, on_event):
        self.stream, self.request, self.opened, self.on_event = stream, request, opened, on_event
        self.transport: asyncio.Transport | None = None
        self.buf = b""
        self.head_done = False
        self.chunked = False
        self.pending = b""

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.time()
        self.buf += data
        try:
            self._parse(now)
        except ValueError as exc:
            self._finish(type(exc).__name__)

    def _parse(self, now: float) -> None:
        stream = self.stream
        if not self.head_done:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            head, self.buf = self.buf[:end + 4], self.buf[end + 4:]
            self.head_done = True
            stream.status = int(head[9:12])
            if stream.status != 200:
                self._finish()
                return
            self.chunked = b"transfer-encoding: chunked" in head.lower()
        while self.buf and not stream.ended:
            if self.chunked:
                line_end = self.buf.find(b"\r\n")
                if line_end < 0:
                    return
                size = int(self.buf[:line_end].strip(), 16)
                start = line_end + 2
                if len(self.buf) < start + size + 2:
                    return
                data, self.buf = self.buf[start:start + size], self.buf[start + size + 2:]
                if size == 0:
                    self._finish()
                    return
            else:
                data, self.buf = self.buf, b""
            self.pending += data.replace(b"\r\n", b"\n")
            # An event ends at a blank line; comment-only blocks (pings) are not events.
            while b"\n\n" in self.pending:
                block, self.pending = self.pending.split(b"\n\n", 1)
                if any(not line.startswith(b":") for line in block.split(b"\n") if line):
                    stream.times.append(now)
                    self.opened.set()
                    self.on_event()

    def _finish(self, error: str = "") -> None:
        if error:
            self.stream.error = self.stream.error or error
        elif self.stream.status == 200:
            self.stream.ended = True
            self.on_event()
        self.opened.set()
        if self.transport is not None:
            self.transport.close()

    def eof_received(self) -> bool:
        if not self.chunked and self.head_done:
            self._finish()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.stream.ended and not self.stream.error and exc is not None:
            self.stream.error = type(exc).__name__
        self.opened.set()


async def watch(host: str, port: int, stream: Stream, opened: asyncio.Event, on_event) -> Watch | None:
    request = f"GET {stream.path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
    try:
        _, protocol = await asyncio.get_running_loop().create_connection(
            lambda: Watch(stream, request, opened, on_event), host, port)
    except OSError as exc:
        stream.error = str(exc)
        opened.set()
        return None
    return protocol


async def sse_watchers(url: str, paths: list[str], open_concurrency: int, open_timeout: float) -> None:
    host, port = host_port(url)
    streams = [Stream(p) for p in paths]
    changed = asyncio.Event()
    gate = asyncio.Semaphore(open_concurrency)
    watches: list[Watch] = []
    t0 = time.perf_counter()

    async def open_one(s: Stream) -> None:
        opened = asyncio.Event()
        async with gate:
            protocol = await watch(host, port, s, opened, changed.set)
            if protocol is not None:
                watches.append(protocol)
            await opened.wait()

    try:
        await asyncio.wait_for(asyncio.gather(*(open_one(s) for s in streams)), open_timeout)
    except asyncio.TimeoutError:
        pass
    ok = sum(1 for s in streams if s.status == 200 and s.times)
    errors: dict[str, int] = {}
    for s in streams:
        if not (s.status == 200 and s.times):
            key = s.error or f"status {s.status}"
            errors[key] = errors.get(key, 0) + 1
    print(json.dumps({"opened": ok, "of": len(streams), "seconds": time.perf_counter() - t0,
                      "errors": errors}), flush=True)

    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    while line := (await stdin.readline()).decode().strip():
        cmd, *args = line.split()
        if cmd == "mark":
            for s in streams:
                s.mark = len(s.times)
            print(json.dumps({"marked": len(streams)}), flush=True)
        elif cmd == "wait":
            timeout, prefix = float(args[0]), args[1]
            chosen = [s for s in streams if prefix == "*" or s.path.startswith(prefix)]
            deadline = time.perf_counter() + timeout
            while True:
                got = sum(1 for s in chosen if len(s.times) > s.mark)
                left = deadline - time.perf_counter()
                if got == len(chosen) or left <= 0:
                    break
                changed.clear()
                try:
                    await asyncio.wait_for(changed.wait(), min(left, 0.5))
                except asyncio.TimeoutError:
                    pass
            print(json.dumps({"got": got, "of": len(chosen)}), flush=True)
        elif cmd == "ends":
            deadline = time.perf_counter() + float(args[0])
            while sum(1 for s in streams if s.ended) < len(streams) and time.perf_counter() < deadline:
                changed.clear()
                try:
                    await asyncio.wait_for(changed.wait(), 0.2)
                except asyncio.TimeoutError:
                    pass
            print(json.dumps({"ended": sum(1 for s in streams if s.ended), "of": len(streams)}), flush=True)
        elif cmd == "dump":
            with open(args[0], "w") as f:
                json.dump([[s.path, s.times[s.mark:]] for s in streams], f)
            print(json.dumps({"dumped": len(streams)}), flush=True)
        elif cmd == "quit":
            break
    for w in watches:
        if w.transport is not None:
            w.transport.close()
    await asyncio.sleep(0)
    print(json.dumps({"ended": sum(1 for s in streams if s.ended)}), flush=True)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    h = sub.add_parser("http")
    h.add_argument("--url", required=True)
    h.add_argument("--mode", choices=["new", "dup"], default="new")
    h.add_argument("--connections", type=int, default=32)
    h.add_argument("--seconds", type=float, default=8)
    h.add_argument("--warmup", type=float, default=1)
    h.add_argument("--dup-targets", type=int, default=100)
    h.add_argument("--kind", default="noop")
    s = sub.add_parser("sse")
    s.add_argument("--url", required=True)
    s.add_argument("--paths", required=True, help="JSON file: a list of paths, one stream each")
    s.add_argument("--open-concurrency", type=int, default=256)
    s.add_argument("--open-timeout", type=float, default=180)
    args = p.parse_args(argv)
    if args.command == "http":
        print(json.dumps(asyncio.run(http_load(args.url, args.mode, args.connections, args.seconds, args.warmup,
                                                args.dup_targets, args.kind))), flush=True)
    else:
        with open(args.paths) as f:
            paths = json.load(f)
        asyncio.run(sse_watchers(args.url, paths, args.open_concurrency, args.open_timeout))


if __name__ == "__main__":
    main()
