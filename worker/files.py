"""Files in and out of band (sql/functions/47_files.sql): a job's inputs, uploaded
with its submission, and its outputs, saved by its handler. Both are written and
read one chunk (CHUNK_SIZE bytes) at a time, so neither the API nor a worker
ever holds a whole file."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import uuid
from typing import Any, AsyncIterable, AsyncIterator, Iterable

import asyncpg

from .sql import query

log = logging.getLogger("jobfeed.files")

CHUNK_SIZE = 256 * 1024  # one row of file_chunks; a range read fetches the chunks it spans
DEFAULT_CONTENT_TYPE = "application/octet-stream"


class FileNotFound(LookupError):
    """No such input (or output) of this job."""


class FileGone(RuntimeError):
    """A file vanished while being read: its job was deleted, or an output replaced."""


@dataclasses.dataclass(frozen=True)
class StoredFile:
    id: int
    name: str
    size: int
    content_type: str
    chunk_size: int

    def public(self) -> dict:
        return {"name": self.name, "size": self.size, "content_type": self.content_type}


class Rechunker:
    """Bytes in pieces of any size -> pieces of exactly `size` bytes (the last shorter)."""

    def __init__(self, size: int = CHUNK_SIZE):
        self.size = size
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self._buf += data
        out = []
        while len(self._buf) >= self.size:
            out.append(bytes(self._buf[:self.size]))
            del self._buf[:self.size]
        return out

    def rest(self) -> bytes | None:
        data, self._buf = bytes(self._buf), bytearray()
        return data or None


class Staging:
    """An upload's files, written a chunk at a time on `conn` inside the
    transaction that then submits their job: attach() gives them to the job
    when the submission created it, else drops them (a duplicate joined a job
    that has its own). Rolled back, nothing of them remains."""

    def __init__(self, conn):
        self.conn = conn
        self.files: list[tuple[int, int]] = []  # (file id, size) of finished files
        self._file: int | None = None
        self._seq = 0
        self._size = 0
        self._rechunk = Rechunker()

    async def begin(self, name: str, content_type: str) -> None:
        self._file = await self.conn.fetchval(query("file_stage"), name, content_type, CHUNK_SIZE)
        self._seq = self._size = 0

    async def write(self, data: bytes) -> None:
        for chunk in self._rechunk.feed(data):
            await self._put(chunk)

    async def _put(self, chunk: bytes) -> None:
        await self.conn.execute(query("file_put"), self._file, self._seq, chunk)
        self._seq += 1
        self._size += len(chunk)

    async def end(self) -> None:
        rest = self._rechunk.rest()
        if rest is not None:
            await self._put(rest)
        assert self._file is not None
        self.files.append((self._file, self._size))
        self._file = None

    async def attach(self, job_id: uuid.UUID, created: bool) -> None:
        ids = [f for f, _ in self.files]
        if ids and created:
            await self.conn.execute(query("file_attach"), job_id, ids, [s for _, s in self.files])
        elif ids:  # joined a job that has its own files
            await self.conn.execute(query("file_discard"), ids)


async def files_of(db, job_id: uuid.UUID, direction: str) -> list[StoredFile]:
    rows = await db.fetch(query("files_of"), job_id, direction)
    return [StoredFile(r["id"], r["name"], r["size"], r["content_type"], r["chunk_size"]) for r in rows]


async def find(db, job_id: uuid.UUID, direction: str, name: str) -> StoredFile:
    for f in await files_of(db, job_id, direction):
        if f.name == name:
            return f
    what = "input" if direction == "in" else "output"
    raise FileNotFound(f"job {job_id} has no {what} named {name!r}")


async def read(db, f: StoredFile, start: int = 0, end: int | None = None) -> AsyncIterator[bytes]:
    """Bytes start..end-1 of a file (end None: to its end), one chunk per query."""
    if start < 0 or (end is not None and end < 0):
        raise ValueError(f"file {f.name!r}: start and end count bytes from 0 (got {start}, {end})")
    end = f.size if end is None else min(end, f.size)
    pos = start
    while pos < end:
        seq, offset = divmod(pos, f.chunk_size)
        length = min(f.chunk_size - offset, end - pos)
        data = await db.fetchval(query("file_read"), f.id, seq, offset + 1, length)
        if data is None or len(data) != length:
            raise FileGone(f"file {f.name!r} is gone")
        pos += length
        yield data


def _piece(piece: object) -> bytes:
    """A chunk as bytes; anything else is a TypeError: bytes(5) is five NULs,
    so iterating a bytes object (ints) would store zeros, silently."""
    if not isinstance(piece, (bytes, bytearray, memoryview)):
        raise TypeError(f"an output's chunks are bytes, not {type(piece).__name__} "
                        "(iterating a bytes object gives ints: pass the bytes itself)")
    return bytes(piece)


async def _pieces(chunks: Any) -> AsyncIterator[bytes]:
    """bytes, an iterable or an async iterable of bytes -> its pieces."""
    if isinstance(chunks, (bytes, bytearray, memoryview)):
        yield bytes(chunks)
    elif hasattr(chunks, "__aiter__"):
        async for piece in chunks:
            yield _piece(piece)
    else:
        for piece in chunks:
            yield _piece(piece)


async def save_output(db, job_id: uuid.UUID, generation: int, name: str,
                      chunks: bytes | Iterable[bytes] | AsyncIterable[bytes],
                      content_type: str = DEFAULT_CONTENT_TYPE) -> bool:
    """Store an output; False when the attempt no longer holds the job (then
    nothing of it is visible). Chunks are written as they come, each in its own
    statement; the output appears, replacing one of the same name, at once
    when all are in."""
    check_name(name)
    content_type = check_content_type(content_type)
    file_id = await db.fetchval(query("output_begin"), job_id, generation, name, content_type, CHUNK_SIZE)
    if file_id is None:
        return False
    size, seq = 0, 0
    rechunk = Rechunker()

    async def put(data: bytes) -> bool:
        nonlocal seq, size
        ok = await db.fetchval(query("file_put"), file_id, seq, data)
        seq += 1
        size += len(data)
        return bool(ok)

    try:
        async for piece in _pieces(chunks):
            for data in rechunk.feed(piece):
                if not await put(data):
                    return False
        rest = rechunk.rest()
        if rest is not None and not await put(rest):
            return False
    except BaseException:
        # the chunks raised, or a write did: drop what was written (shielded,
        # since a cancellation of the handler may be why we are here)
        await asyncio.shield(_discard(db, job_id, file_id))
        raise
    return bool(await db.fetchval(query("output_finish"), job_id, generation, file_id, size))


async def _discard(db, job_id: uuid.UUID, file_id: int) -> None:
    try:
        await db.execute(query("output_discard"), job_id, file_id)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError) as exc:
        # left for a later attempt's first save, or the sweeper's delete of the job
        log.warning("could not drop the unfinished output %s of job %s: %s", file_id, job_id, exc)


MAX_NAME_BYTES = 200


def check_name(name: object) -> str:
    """A file's name: 1 to 200 bytes of printable text without a slash (it is a
    URL path segment: /api/jobs/{id}/outputs/{name})."""
    if not isinstance(name, str) or not 1 <= len(name.encode("utf-8", "replace")) <= MAX_NAME_BYTES \
            or not name.isprintable() or "/" in name or name in (".", ".."):
        raise ValueError(f"a file name must be 1 to {MAX_NAME_BYTES} bytes of printable text without '/'")
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("a file name must be valid text") from None
    return name


def check_content_type(value: object) -> str:
    if value is None or value == "":
        return DEFAULT_CONTENT_TYPE
    if not isinstance(value, str) or not value.isascii() or not value.isprintable() or len(value) > 200 \
            or "/" not in value:
        raise ValueError("a content type must be printable ASCII like text/plain, at most 200 characters")
    return value


async def open_file(db, job_id: uuid.UUID, direction: str, name: str, start: int = 0,
                    end: int | None = None) -> AsyncIterator[bytes]:
    """A file's bytes, looked up by name at the first iteration."""
    f = await find(db, job_id, direction, name)
    async for data in read(db, f, start, end):
        yield data
